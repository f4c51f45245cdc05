"""The verifier's signing key and the public keys a command trusts.

Who signs: the process that verified (a `nox -s build` or `nox -s verify` job). In CI the key is a secret
(SGLANG_IMAGES_SIGNING_KEY: the PEM text; or SGLANG_IMAGES_SIGNING_KEY_FILE: its path) whose public half is
committed under keys/ of the project, so every job and every user trusts it. On a machine with no such
secret a local key is made on first use (KEY_DIR/verifier-key.pem, readable by its owner only): records this
machine's verifier made are trusted on this machine, and nowhere else.

The image under test never sees the key: it runs in a container, in an unprivileged LXC container, or in host
mode as an identity of its own (verify/identity.py); the record is signed by the host after it judged what came
back. A private key file is used only when it is a plain file (no link), owned by the caller, that nobody else
may read or write, in folders nobody else may write (OpenSSH's StrictModes): a key another user could plant,
swap or read vouches for nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
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
            return parse_private(_private_bytes(path, f"the signing key ${KEY_FILE_ENV}"), str(path))
        except OSError as exc:
            msg = f"cannot read the signing key {path} (${KEY_FILE_ENV}): {exc.strerror}"
            raise ConfigError(msg, hint=f"point ${KEY_FILE_ENV} at a PEM private key") from None
    return _local_key(key_dir(env) / LOCAL_KEY)


def key_problem(path: Path, *, uid: int | None = None) -> str | None:
    """Why the private key at `path` must not be used (None: it may): a link, not a plain file, another
    owner, readable or writable by others, or a folder on its way that others may write."""
    uid = os.geteuid() if uid is None else uid
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link (give the key file itself)"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a plain file"
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by the caller (uid {uid})"
    if st.st_mode & 0o077:
        return f"its mode {st.st_mode & 0o777:o} lets others read or write it (chmod 600)"
    return _folders_problem(path.parent, uid)


def _folders_problem(folder: Path, uid: int) -> str | None:
    """A folder on the way to a key that someone else could write: they could swap the key. A sticky folder
    (/tmp) is safe for the entries its users own."""
    for each in [folder.absolute(), *folder.absolute().parents]:
        st = each.stat()
        if st.st_uid not in (0, uid):
            return f"the folder {each} is owned by uid {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"the folder {each} can be written by others (mode {st.st_mode & 0o7777:o})"
    return None


def _private_bytes(path: Path, what: str) -> bytes:
    """The bytes of a private key file once `key_problem` finds nothing against it (ConfigError else)."""
    problem = key_problem(path)
    if problem:
        msg = f"{what} {path} is not used: {problem}"
        raise ConfigError(msg, hint="a key another user could read, plant or swap vouches for nothing: make a new "
                                    "one in a folder only you can write (`python -m buildscripts keygen DIR`)")
    return path.read_bytes()


def _local_key(path: Path) -> SigningKey:
    try:
        return parse_private(_private_bytes(path, "this machine's verifier key"), str(path))
    except FileNotFoundError:   # a link, dangling or not, is found by key_problem: only no file at all is new
        pass
    except OSError as exc:
        msg = f"cannot read this machine's verifier key {path}: {exc.strerror}"
        raise ConfigError(msg, hint=f"fix its permissions, or set ${KEY_DIR_ENV} to a folder of yours") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        problem = _folders_problem(path.parent, os.geteuid())
        if problem:
            msg = f"this machine's verifier key is not made in {path.parent}: {problem}"
            raise ConfigError(msg, hint=f"set ${KEY_DIR_ENV} to a folder only you can write")
        # O_EXCL: two verifiers starting at once end up with one key, not each with its own.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return parse_private(_private_bytes(path, "this machine's verifier key"), str(path))
    except OSError as exc:
        msg = f"cannot create this machine's verifier key in {path.parent}: {exc.strerror}"
        raise ConfigError(msg, hint=f"set ${KEY_DIR_ENV} to a writable folder, or ${KEY_FILE_ENV}") from None
    key = generate()
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem(key))
    return SigningKey(str(path), key)


def project_keys(root: Path) -> list[PublicKey]:
    return committed(root, PROJECT_KEYS)


def committed(root: Path, folder: str | Path) -> list[PublicKey]:
    """The public keys committed under `root`/`folder` (*.pub), named by their path in the project: what a
    message or a report says of them is the same on every machine."""
    return [PublicKey(str(p.relative_to(root)), read_public(p).key) for p in sorted((root / folder).glob("*.pub"))]


def trusted(root: Path, env: Mapping[str, str], extra: Sequence[Path] = ()) -> list[PublicKey]:
    """The keys whose signatures a command accepts: the project's (keys/*.pub), the one this process signs
    with (a CI secret, or this machine's local key when it exists), and any passed with --trust-key."""
    found = project_keys(root) + [read_public(p) for p in extra]
    if env.get(KEY_ENV) or env.get(KEY_FILE_ENV) or os.path.lexists(key_dir(env) / LOCAL_KEY):
        found.append(signing_key(env).public)
    unique: dict[str, PublicKey] = {}
    for key in found:
        unique.setdefault(key.keyid, key)
    return list(unique.values())

