"""The verifier's signing key and the public keys a command trusts.

Who signs: the process that verified (a `nox -s build` or `nox -s verify` job). In CI the key is a secret
(SGLANG_IMAGES_SIGNING_KEY: the PEM text; or SGLANG_IMAGES_SIGNING_KEY_FILE: its path) whose public half is
committed under keys/ of the project, so every job and every user trusts it. On a machine with no such
secret a local key is made on first use (KEY_DIR/verifier-key.pem, readable by its owner only): records this
machine's verifier made are trusted on this machine, and nowhere else.

The image under test never sees the key: it runs in a container (or an LXC container, or as a process given
only the probe), and the record is signed by the host after it judged what came back.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import ConfigError

KEY_ENV, KEY_FILE_ENV, KEY_DIR_ENV = ("SGLANG_IMAGES_SIGNING_KEY", "SGLANG_IMAGES_SIGNING_KEY_FILE",
                                      "SGLANG_IMAGES_KEY_DIR")
LOCAL_KEY = "verifier-key.pem"
PROJECT_KEYS = "keys"     # under the project root: *.pub, the public halves of the CI signing keys


@dataclass(frozen=True)
class PublicKey:
    name: str                      # where it came from, for messages
    key: ec.EllipticCurvePublicKey

    @property
    def pem(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def keyid(self) -> str:
        """sha256 of the public key (DER): names the key in an envelope and in results."""
        der = self.key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class SigningKey:
    name: str
    private: ec.EllipticCurvePrivateKey

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.name, self.private.public_key())


def generate() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _p256(load: Callable[[bytes], object], data: bytes, name: str, kind: type, what: str, hint: str) -> Any:
    """The ECDSA P-256 key of type `kind` that `load` reads from PEM `data`, else a ConfigError naming `name`."""
    try:
        key = load(data)
    except (ValueError, TypeError) as exc:
        msg = f"{name} is not {what} ({exc})"
        raise ConfigError(msg, hint=hint) from None
    if not isinstance(key, kind) or not isinstance(getattr(key, "curve", None), ec.SECP256R1):
        msg = f"{name} is not an ECDSA P-256 key"
        raise ConfigError(msg, hint=hint)
    return key


def parse_private(data: bytes, name: str) -> SigningKey:
    key = _p256(lambda d: serialization.load_pem_private_key(d, password=None), data, name,
                ec.EllipticCurvePrivateKey, "an unencrypted PEM private key",
                "make one with `python -m buildscripts keygen DIR`")
    return SigningKey(name, key)


def parse_public(data: bytes, name: str) -> PublicKey:
    key = _p256(serialization.load_pem_public_key, data, name, ec.EllipticCurvePublicKey, "a PEM public key",
                "pass the .pub file made with the signing key")
    return PublicKey(name, key)


def read_public(path: Path) -> PublicKey:
    try:
        return parse_public(path.read_bytes(), str(path))
    except OSError as exc:
        msg = f"cannot read the public key {path}: {exc.strerror}"
        raise ConfigError(msg, hint="pass the path of a .pub file") from None


def key_dir(env: Mapping[str, str]) -> Path:
    if env.get(KEY_DIR_ENV):
        return Path(env[KEY_DIR_ENV])
    config = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(config) / "sglang-images"


def signing_key(env: Mapping[str, str]) -> SigningKey:
    """The configured key (CI secret), else this machine's local key, made on first use."""
    if env.get(KEY_ENV):
        return parse_private(env[KEY_ENV].encode(), f"${KEY_ENV}")
    if env.get(KEY_FILE_ENV):
        path = Path(env[KEY_FILE_ENV])
        try:
            return parse_private(path.read_bytes(), str(path))
        except OSError as exc:
            msg = f"cannot read the signing key {path} (${KEY_FILE_ENV}): {exc.strerror}"
            raise ConfigError(msg, hint=f"point ${KEY_FILE_ENV} at a PEM private key") from None
    return _local_key(key_dir(env) / LOCAL_KEY)


def _local_key(path: Path) -> SigningKey:
    try:
        return parse_private(path.read_bytes(), str(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        msg = f"cannot read this machine's verifier key {path}: {exc.strerror}"
        raise ConfigError(msg, hint=f"fix its permissions, or set ${KEY_DIR_ENV} to a folder of yours") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # O_EXCL: two verifiers starting at once end up with one key, not each with its own.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return parse_private(path.read_bytes(), str(path))
    except OSError as exc:
        msg = f"cannot create this machine's verifier key in {path.parent}: {exc.strerror}"
        raise ConfigError(msg, hint=f"set ${KEY_DIR_ENV} to a writable folder, or ${KEY_FILE_ENV}") from None
    key = generate()
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem(key))
    return SigningKey(str(path), key)


def project_keys(root: Path) -> list[PublicKey]:
    return [read_public(p) for p in sorted((root / PROJECT_KEYS).glob("*.pub"))]


def trusted(root: Path, env: Mapping[str, str], extra: Sequence[Path] = ()) -> list[PublicKey]:
    """The keys whose signatures a command accepts: the project's (keys/*.pub), the one this process signs
    with (a CI secret, or this machine's local key when it exists), and any passed with --trust-key."""
    found = project_keys(root) + [read_public(p) for p in extra]
    if env.get(KEY_ENV) or env.get(KEY_FILE_ENV) or (key_dir(env) / LOCAL_KEY).exists():
        found.append(signing_key(env).public)
    unique: dict[str, PublicKey] = {}
    for key in found:
        unique.setdefault(key.keyid, key)
    return list(unique.values())
