"""Reading a registry without the engine (skopeo): the manifest a reference is served as, and its config.

What `check` and `export` need to know a digest for sure: the manifest's bytes (their sha256 is the digest
the registry serves for a tag now) and the config blob they name. Credentials are skopeo's (docker's
config.json or containers' auth.json); plain HTTP only on loopback, the rule the engine and cosign apply.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

from .. import proc
from ..errors import RegistryError
from ..refs import REFERENCE

SKOPEO_HINT = "apt-get install skopeo (`.ci/install-engine` does)"
LOOPBACK = re.compile(r"(127(?:\.[0-9]{1,3}){3}|localhost|\[::1\])(:[0-9]+)?")
TIMEOUT_S = 120


def host(ref: str) -> str | None:
    match = REFERENCE.fullmatch(ref)
    return match.group("domain") if match else None


def tls_flag(ref: str) -> list[str]:
    """No TLS for a loopback registry (a test's, or one on this host); TLS everywhere else."""
    domain = host(ref)
    return ["--tls-verify=false"] if domain and LOOPBACK.fullmatch(domain) else []


def source_flag(ref: str) -> list[str]:
    """tls_flag as `skopeo copy` spells it for its source."""
    return [f.replace("--tls-verify", "--src-tls-verify") for f in tls_flag(ref)]


def _inspect(ref: str, *extra: str) -> bytes:
    skopeo = proc.which("skopeo", hint=SKOPEO_HINT)
    with tempfile.TemporaryDirectory(prefix="sglang-images-inspect-") as scratch:
        out = Path(scratch) / "raw"
        done = proc.run([skopeo, "inspect", "--raw", *extra, *tls_flag(ref), f"docker://{ref}"],
                        timeout=TIMEOUT_S, stdout=out)
        if done.ok:
            return out.read_bytes()
    detail = done.tail(3).replace("\n", " ")
    said = re.search(r'msg="(.*)"', detail)   # skopeo's log line: level=fatal msg="..."
    detail = said.group(1).replace('\\"', '"') if said else detail
    hint = "check the reference and that the registry answers (`docker login HOST` if it needs credentials)"
    if "manifest unknown" in detail or "not found" in detail.lower():
        hint = "no image of that name and tag or digest is in the registry"
    msg = f"reading {ref} from its registry failed: {detail}"
    raise RegistryError(msg, hint=hint)


def manifest(ref: str) -> bytes:
    """The manifest bytes the registry serves for `ref` now."""
    return _inspect(ref)


def config(ref: str) -> bytes:
    """The config blob of the manifest `ref` names."""
    return _inspect(ref, "--config")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
