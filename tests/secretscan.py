"""Scan an image for what the host lends its builds: saved (`docker save` / the SDK's `image.save()`), or its
layers where the engine keeps them (`scan_in_place`, which exports nothing).

Builds borrow the host's CA bundle and pip index settings as BuildKit secrets (build/buildx.py
`build_secrets`, from hostenv.py): `/run/secrets/ca` is the whole bundle, `/run/secrets/index` exports
PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, UV_DEFAULT_INDEX and UV_INDEX. None of it may reach a layer, the
image config or its history. What is looked for, in every file of every layer and in the config:

- each certificate of the host bundle that is *not* one of Debian's public roots (a Debian image may
  legitimately carry the Mozilla roots through its own ca-certificates package; a private or
  intercepting CA of the host must not be there): its DER bytes and a base64 line of its PEM body;
- the bundle file's bytes as a whole, when it holds such a private certificate;
- each index URL, its host name (unless it is the public PyPI) and any user:password in it;
- files at the paths a secret would have if copied (`/run/secrets/*`, pip.conf, .netrc, .pypirc);
- in the config and history only (a layer of Python packages is full of example URLs): any
  `user:password@` URL and well-known token shapes.

Test code, not a command: it knows what to look for only from this host's own secrets, and it checks
the build recipe (what the project does with them), not images users bring.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import ssl
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from buildscripts import hostenv
from tests import needs

if TYPE_CHECKING:
    import docker

PUBLIC_ROOTS = Path("/usr/share/ca-certificates/mozilla")   # Debian's ca-certificates package
PUBLIC_INDEX_HOSTS = {"pypi.org", "files.pythonhosted.org", "download.pytorch.org"}
CHUNK = 8 << 20
SECRET_PATHS = re.compile(r"^(run/secrets/.+|(.*/)?pip\.conf|(.*/)?\.netrc|(.*/)?\.pypirc)$")
CREDENTIAL_URL = re.compile(rb"[a-z][a-z0-9+.-]*://[^/\s:@\"']+:[^/\s@\"']+@[^/\s\"']+", re.I)
TOKENS = re.compile(rb"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_-]{20}|"
                    rb"AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----")
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s+-----END CERTIFICATE-----", re.S)


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Finding:
    where: str   # "layer <id>: <path>", "config", ...
    what: str    # which secret (its description, never its value)


@dataclass
class Secrets:
    """What must not be found: byte strings by description."""

    needles: dict[str, bytes] = field(default_factory=dict)

    def add(self, what: str, value: bytes | str) -> None:
        data = value.encode() if isinstance(value, str) else value
        if len(data) >= 6:   # shorter strings occur by chance
            self.needles[what] = data


def pem_certificates(bundle: bytes) -> list[bytes]:
    """The DER bytes of each certificate of a PEM bundle."""
    return [base64.b64decode(b"".join(body.split())) for body in PEM.findall(bundle)]


def public_roots(folder: Path = PUBLIC_ROOTS) -> set[bytes]:
    return {der for path in sorted(folder.glob("*.crt")) for der in pem_certificates(path.read_bytes())}


def host_secrets(env: Mapping[str, str], public: set[bytes] | None = None) -> Secrets:
    """What this host passes to builds (the same functions build_secrets calls), as needles."""
    found = Secrets()
    public = public_roots() if public is None else public
    bundle_path = hostenv.ca_bundle(env)
    bundle = bundle_path.read_bytes() if bundle_path else b""
    private = [der for der in pem_certificates(bundle) if der not in public]
    for number, der in enumerate(private, 1):
        found.add(f"private CA #{number} of the host bundle (DER)", der)
        lines = ssl.DER_cert_to_PEM_cert(der).splitlines()[1:-1]
        found.add(f"private CA #{number} of the host bundle (PEM)", lines[len(lines) // 2])  # key material
    if private:
        found.add("the host CA bundle file", bundle)
    index = hostenv.index_settings(env)
    for number, url in enumerate(u for u in (index.index_url, *index.extra_index_urls) if u):
        add_url(found, f"index URL #{number + 1}", url)
    return found


def add_url(found: Secrets, what: str, url: str) -> None:
    parts = urlsplit(url)
    found.add(what, url)
    if parts.hostname and parts.hostname not in PUBLIC_INDEX_HOSTS:
        found.add(f"{what}: host name", parts.hostname)
    if parts.password:
        found.add(f"{what}: user:password", f"{parts.username}:{parts.password}")
        found.add(f"{what}: password", parts.password)


def search(stream: Readable, secrets: Secrets) -> set[str]:
    """Descriptions of the needles found in `stream`, read in chunks (layers hold GB-sized files)."""
    found: set[str] = set()
    overlap = max((len(n) for n in secrets.needles.values()), default=1) - 1
    tail = b""
    while chunk := stream.read(CHUNK):
        window = tail + chunk
        found |= {what for what, needle in secrets.needles.items() if needle in window}
        tail = window[-overlap:] if overlap else b""
    return found


def scan_metadata(where: str, data: bytes, secrets: Secrets) -> list[Finding]:
    """The image config (ENV, labels, history of build steps): needles, credential URLs and tokens."""
    hits = [Finding(where, what) for what in sorted(search(io.BytesIO(data), secrets))]
    hits += [Finding(where, "a user:password URL") for _ in CREDENTIAL_URL.finditer(data)]
    hits += [Finding(where, "a token or private key") for _ in TOKENS.finditer(data)]
    return hits


def scan_layer(where: str, layer: Readable, secrets: Secrets) -> list[Finding]:
    hits: list[Finding] = []
    with tarfile.open(fileobj=cast(IO[bytes], layer), mode="r|*") as tar:
        for member in tar:
            path = member.name.removeprefix("./")
            if member.isfile() and SECRET_PATHS.match(path):
                hits.append(Finding(f"{where}: {path}", "a file where a secret would be copied"))
            if not member.isfile() or member.size == 0:
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            hits += [Finding(f"{where}: {path}", what) for what in sorted(search(handle, secrets))]
    return hits


def scan_saved(archive: Readable, secrets: Secrets) -> tuple[list[Finding], dict[str, int]]:
    """Scan a docker-archive stream: every layer tar, and every other file as metadata (the config with
    its history, manifest.json, and the per-layer `json` files of the legacy format).

    Returns the findings and what was scanned ({"layers": n, "configs": n}), so that a caller can check
    that something was scanned at all."""
    findings: list[Finding] = []
    counts = {"layers": 0, "configs": 0}
    with tarfile.open(fileobj=cast(IO[bytes], archive), mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            handle = outer.extractfile(member)
            assert handle is not None
            if member.name.endswith(".tar"):
                counts["layers"] += 1
                findings += scan_layer(f"layer {member.name}", handle, secrets)
            else:
                counts["configs"] += 1
                findings += scan_metadata(member.name, handle.read(), secrets)
    return findings, counts


class ChunkReader:
    """A read()-able stream over an iterator of byte chunks (what `image.save()` yields)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks: Iterator[bytes] = iter(chunks)
        self.pending = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.pending) < size:
            try:
                self.pending += next(self.chunks)
            except StopIteration:
                break
        if size < 0:
            size = len(self.pending)
        data, self.pending = self.pending[:size], self.pending[size:]
        return data


def scan_in_place(client: docker.DockerClient, refs: str | Sequence[str], secrets: Secrets) -> tuple[list[Finding],
                                                                                                  dict[str, int]]:
    """The same scan over the engine's own copy of each layer (overlay2's diff folders) of the images `refs`, each
    layer once, and each image's inspect data and history: nothing is exported. Needs read access to the
    engine's root (root)."""
    layers: list[str] = []
    metadata: list[tuple[str, bytes]] = []
    for ref in [refs] if isinstance(refs, str) else refs:
        image = client.images.get(ref)
        driver = image.attrs.get("GraphDriver") or {}
        if driver.get("Name") != "overlay2":
            needs.unavailable(f"the overlay2 storage driver to scan {ref} in place (the engine has "
                              f"{driver.get('Name')})", "Docker's default storage driver on ext4 and xfs")
        data = driver.get("Data") or {}
        layers += [d for d in (data.get("UpperDir", ""), *str(data.get("LowerDir", "")).split(":"))
                   if d and d not in layers]
        metadata.append((f"config and history of {ref}", json.dumps(
            {"inspect": image.attrs, "history": cast(Any, client.api).history(ref)}).encode()))
    unreadable = [folder for folder in layers if not os.access(folder, os.R_OK | os.X_OK)]
    if unreadable:
        needs.unavailable(f"read access to the engine's layers ({unreadable[0]})", "run the tests as root")
    findings: list[Finding] = []
    for number, folder in enumerate(layers):
        for path in sorted(Path(folder).rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            shown = str(path.relative_to(folder))
            if SECRET_PATHS.match(shown):
                findings.append(Finding(f"layer {number}: {shown}", "a file where a secret would be copied"))
            with path.open("rb") as fh:
                findings += [Finding(f"layer {number}: {shown}", what) for what in sorted(search(fh, secrets))]
    for where, data in metadata:
        findings += scan_metadata(where, data, secrets)
    return findings, {"layers": len(layers), "configs": len(metadata)}


def describe(findings: list[Finding]) -> str:
    return json.dumps([f"{f.where}: {f.what}" for f in findings][:50], indent=1)
