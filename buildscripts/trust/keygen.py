"""`python -m buildscripts keygen DIR`: a signing key pair for the verifiers of a project's CI.

Writes DIR/signing-key.pem (the private key, owner-only: store it as the CI secret
SGLANG_IMAGES_SIGNING_KEY and delete the file) and DIR/signing-key.pub (commit it under keys/, where every
command and `check` trusts it). Never overwrites a key.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

from .. import log
from ..errors import ConfigError
from ..workspace import Workspace, path_argument
from .keys import SigningKey, generate, private_pem


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    del ws, env
    parser = argparse.ArgumentParser(prog="keygen", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dir", type=path_argument, help="folder for signing-key.pem and signing-key.pub")
    args = parser.parse_args(list(argv))
    private, public = args.dir / "signing-key.pem", args.dir / "signing-key.pub"
    key = SigningKey(str(private), generate())
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private_pem(key.private))
        public.write_bytes(key.public.pem)
    except FileExistsError:
        msg = f"{private} exists: a key is never overwritten"
        raise ConfigError(msg, hint="pick another folder, or remove the old key yourself") from None
    except OSError as exc:
        msg = f"cannot write the key pair into {args.dir}: {exc.strerror}"
        raise ConfigError(msg, hint="pass a writable folder") from None
    log.info(f"wrote {private} (secret: store it as SGLANG_IMAGES_SIGNING_KEY, then delete it) and {public} "
             f"(commit it as keys/NAME.pub); key id {key.public.keyid[:16]}")
    return 0
