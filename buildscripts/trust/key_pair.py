"""A signing key pair for the verifiers of a project's CI (`python -m buildscripts keygen DIR`).

DIR/signing-key.pem is the private key, owner-only from its first byte; DIR/signing-key.pub the public key to
commit under keys/. A key is never overwritten.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from .keys import SigningKey, generate, private_pem


def write_pair(folder: Path) -> tuple[Path, Path, str]:
    """(private key file, public key file, key id) of a new pair written into `folder`."""
    private, public = folder / "signing-key.pem", folder / "signing-key.pub"
    key = SigningKey(str(private), generate())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private_pem(key.private))
        public.write_bytes(key.public.pem)
    except FileExistsError:
        msg = f"{private} exists: a key is never overwritten"
        raise ConfigError(msg, hint="pick another folder, or remove the old key yourself") from None
    except OSError as exc:
        msg = f"cannot write the key pair into {folder}: {exc.strerror}"
        raise ConfigError(msg, hint="pass a writable folder") from None
    return private, public, key.public.keyid
