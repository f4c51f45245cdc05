"""A registry's manifests by digest: read and copied through skopeo (pulls go through the engine: through_engine.py).

A verdict belongs to one manifest digest, so everything that crosses a registry here is addressed by
digest, and every digest is read back from the registry (the sha256 of the bytes it serves), never
taken from a push's output alone. Copies keep the digest (`skopeo copy --all --preserve-digests`: it
refuses to write anything that would need another manifest); `docker buildx imagetools create` would
wrap the image in a new index, a new digest, and is not used.

skopeo (in Debian since bookworm, on GitHub's Ubuntu runners) speaks to the registry itself: plain HTTP
only for a registry on loopback (as the engine allows 127.0.0.0/8), credentials from the Docker config
that `docker login` wrote ($DOCKER_CONFIG/config.json), or skopeo's own REGISTRY_AUTH_FILE. No credential
appears in a message: the registry's words are scrubbed first.

Every read of a registry (skopeo's and cosign's) has one deadline, `deadline(env)`: 20 s unless
SGLANG_IMAGES_REGISTRY_TIMEOUT says more; a registry that takes connections and never answers is named
(`no_answer`) instead of waiting for the tools' own minutes. Copies, which move gigabytes, keep their own
limit: every copy here follows a read of the same registry, which a registry that does not answer fails first.
The engine's pull (`verify REPO@sha256:…`) has no limit on its size, only on silence: it fails when the engine
reports no progress for PULL_SILENCE times the deadline (an engine busy extracting a layer of gigabytes on a loaded
machine can be silent for more than 20 s while the registry did nothing wrong).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import platform_reading, proc, strictjson
from ..errors import RegistryError
from .failures import COPY, GRACE_S, READ, deadline, failure, no_answer, stalled
from .references import by_digest, is_loopback, repository_of

INDEX_TYPES = frozenset({"application/vnd.oci.image.index.v1+json",
                         "application/vnd.docker.distribution.manifest.list.v2+json"})
ABSENT_RE = re.compile(r"manifest unknown|name unknown|not found|404", re.I)
SKOPEO_HINT = "install skopeo (`apt-get install skopeo`; `.ci/install-engine` does it)"
COPY_TIMEOUT = 3 * 3600.0    # a copy between registries moves gigabytes


class AmbiguousManifest(RegistryError):
    """A manifest Go's readers (skopeo, Docker) and Python could read as different images (strictjson)."""


@dataclass(frozen=True)
class Manifest:
    """One manifest as the registry served it: its digest is the sha256 of those very bytes."""

    ref: str
    digest: str
    data: dict[str, Any]

    @property
    def media_type(self) -> str:
        return str(self.data.get("mediaType") or "")

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES or (not self.media_type and "manifests" in self.data)

    @property
    def config_digest(self) -> str | None:
        config = self.data.get("config")
        return str(config.get("digest")) if isinstance(config, dict) and config.get("digest") else None

    def platform(self, os: str, architecture: str) -> str | None:
        """The digest of this index's manifest for `os`/`architecture` as the engine picks it (platform_reading.py:
        `x86_64` is amd64); None: not an index, or none there. AmbiguousManifest when two entries are that
        platform, since which one an engine pulls then depends on its own rules."""
        asked = f"{os}/{architecture}"
        try:
            entries = platform_reading.listed(self.data.get("manifests"))
            named = [(platform, str(e.get("digest"))) for platform, e in entries]
        except platform_reading.NotCanonical as exc:
            msg = f"{self.ref} is an index that readers of images read apart: {exc}"
            raise AmbiguousManifest(msg, hint=platform_reading.HINT) from None
        found = {digest for platform, digest in named if platform and platform_reading.matches(platform, asked)}
        if len(found) > 1:
            msg = (f"{self.ref} is an index with {len(found)} manifests for {asked} ({', '.join(sorted(found))}): "
                   "which one an engine pulls depends on its own rules")
            raise AmbiguousManifest(msg, hint="the index is not one this project wrote; do not use it")
        return found.pop() if found else None

    def children(self) -> list[str]:
        return [str(e.get("digest")) for e in self.data.get("manifests") or [] if e.get("digest")]


@dataclass(frozen=True)
class Located:
    """An image in a registry, read back: what `ref` resolved to, and the ids an engine may give it."""

    repository: str
    digest: str                    # the manifest (or index) digest: the subject of its verdicts
    platform_digest: str | None    # when `digest` is an index: the manifest of the engine's platform
    # An engine names a pulled image by its manifest's digest (containerd image store) or by its config's
    # digest (the classic store): an image id outside this set is another image.
    ids: frozenset[str]

    @property
    def subject(self) -> str:
        return f"{self.repository}@{self.digest}"


def locate(ref: str, env: Mapping[str, str], *, platform: tuple[str, str] = ("linux", "amd64"),
           log: Path | None = None) -> Located:
    """Where `ref` (a tag or a digest) points now, and, for an index, its manifest for `platform`."""
    top = served(ref, env, log=log)
    ids = {top.digest, *filter(None, [top.config_digest])}
    platform_digest = None
    if top.is_index:
        platform_digest = top.platform(*platform)
        if platform_digest is None:
            msg = f"{ref} is an index with no manifest for {'/'.join(platform)}"
            raise RegistryError(msg, hint="build the image for this platform, or verify it on a machine of one "
                                          "of its platforms")
        child = served(f"{repository_of(ref)}@{platform_digest}", env, log=log)
        ids |= {child.digest, *filter(None, [child.config_digest])}
    return Located(repository_of(ref), top.digest, platform_digest, frozenset(ids))


def said(done: proc.Completed) -> str:
    """skopeo's last words without its log framing (`time=… level=fatal msg="…"`)."""
    last = done.tail(1) if not done.timed_out else f"no answer within {done.duration_s:.0f} s"
    found = re.search(r'msg="(.*)"\s*$', last)
    return (found.group(1).replace('\\"', '"') if found else last) or f"skopeo exit {done.returncode}"


def skopeo() -> str:
    return proc.which("skopeo", hint=SKOPEO_HINT)


def _access(flag: str, repository: str, env: Mapping[str, str]) -> list[str]:
    """TLS off for loopback only; the Docker config's credentials when $DOCKER_CONFIG names one."""
    args = [f"--{flag}tls-verify=false"] if is_loopback(repository) else []
    config = Path(env["DOCKER_CONFIG"]) / "config.json" if env.get("DOCKER_CONFIG") else None
    if config is not None and config.is_file() and not env.get("REGISTRY_AUTH_FILE"):
        args.append(f"--{flag}authfile={config}")
    return args


def source_access(ref: str, env: Mapping[str, str]) -> list[str]:
    """`skopeo copy`'s flags for reading `ref` as its source (what export copies from a registry)."""
    return _access("src-", repository_of(ref), env)


def _read(argv: list[str], ref: str, env: Mapping[str, str], log: Path | None) -> bytes | None:
    """skopeo's standard output byte for byte; None when the registry says it has no such thing."""
    seconds = deadline(env)
    with tempfile.TemporaryDirectory(prefix="sglang-images-skopeo-") as scratch:
        out = Path(scratch) / "stdout"
        done = proc.run_to_file([skopeo(), "--command-timeout", f"{seconds:g}s", *argv], out,
                                timeout=seconds + GRACE_S, log=log, env=dict(env))
        if done.ok:
            return out.read_bytes()
    if stalled(done):
        raise no_answer(READ, ref, seconds)
    if ABSENT_RE.search(done.output) and "dial tcp" not in done.output:
        return None
    raise failure(READ, ref, said(done))


def digest_of(data: bytes) -> str:
    """The digest of a manifest's bytes, as a registry names it."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def lookup(ref: str, env: Mapping[str, str], *, log: Path | None = None) -> Manifest | None:
    """The manifest the registry serves for `ref` (a tag or a digest) now; None when it serves none.

    By digest, skopeo checks that the bytes hash to that digest; by tag, the digest is taken of them here."""
    out = _read(["inspect", "--raw", *_access("", repository_of(ref), env), f"docker://{ref}"], ref, env, log)
    if out is None:
        return None
    try:
        data = strictjson.loads_object(out)
    except strictjson.Ambiguous as exc:
        msg = f"the registry serves an ambiguous manifest for {ref} ({exc})"
        raise AmbiguousManifest(msg, hint="readers of images would disagree which image it is: push it again "
                                          "with a tool that writes plain JSON, and verify that") from None
    digest = digest_of(out)
    wanted = by_digest(ref)
    if wanted and wanted[1] != digest:  # skopeo checks this too: a second look costs nothing
        raise failure(READ, ref, f"the registry served a manifest of digest {digest}")
    return Manifest(ref, digest, data)


def served(ref: str, env: Mapping[str, str], *, log: Path | None = None) -> Manifest:
    """The manifest the registry serves for `ref`; a RegistryError naming it when the registry has none."""
    found = lookup(ref, env, log=log)
    if found is None:
        msg = f"the registry serves no manifest for {ref}"
        raise RegistryError(msg, hint="it was deleted, or never pushed there: build and stage it again "
                                      "(`nox -s build -- --stage REPO`)")
    return found


def raw(ref: str, env: Mapping[str, str], *, config: bool = False, log: Path | None = None) -> bytes:
    """The bytes the registry serves for `ref`'s manifest (with `config`: the config blob that manifest
    names), byte for byte: what an OCI archive carries to show which image it holds (trust/carried.py)."""
    flags = ["--config"] if config else []
    out = _read(["inspect", "--raw", *flags, *_access("", repository_of(ref), env), f"docker://{ref}"], ref, env, log)
    if out is None:
        msg = f"the registry serves no {'config' if config else 'manifest'} for {ref}"
        raise RegistryError(msg, hint="it was deleted, or never pushed there")
    return out


def config_platform(ref: str, env: Mapping[str, str], *, log: Path | None = None) -> str | None:
    """os/architecture[/variant] as the image config of `ref`'s manifest names them (what an engine checks a
    plain manifest's platform by); None when it names no os and architecture."""
    try:
        config = strictjson.loads_object(raw(ref, env, config=True, log=log))
    except strictjson.Ambiguous as exc:
        msg = f"the image config of {ref} is ambiguous ({exc})"
        raise AmbiguousManifest(msg, hint="readers of images would disagree which platform it is") from None
    try:
        return platform_reading.read(config, required=False)
    except platform_reading.NotCanonical as exc:
        msg = f"the image config of {ref} names a platform readers of images read apart: {exc}"
        raise AmbiguousManifest(msg, hint=platform_reading.HINT) from None


def copy(source: str, destination: str, env: Mapping[str, str], *, log: Path | None = None) -> None:
    """Copy `source` to `destination` (a tag or `@digest`) keeping the manifest digest (all platforms of an
    index); skopeo refuses rather than write another digest."""
    done = proc.run([skopeo(), "copy", "--all", "--preserve-digests", "--quiet",
                     *_access("src-", repository_of(source), env), *_access("dest-", repository_of(destination), env),
                     f"docker://{source}", f"docker://{destination}"], timeout=COPY_TIMEOUT, log=log, env=dict(env))
    if not done.ok:
        raise failure(COPY, destination, said(done))


def write_index(ref: str, data: bytes, env: Mapping[str, str], *, log: Path | None = None) -> str:
    """Write `data`, an index whose every manifest the repository of `ref` holds already, to `ref` byte for
    byte, and return its digest. skopeo copies the index alone (`--multi-arch index-only`) from an OCI layout
    that holds nothing but those bytes; the registry refuses an index whose manifests it lacks."""
    media_type = str(strictjson.loads_object(data).get("mediaType") or "")
    if media_type not in INDEX_TYPES:
        msg = f"an index for {ref} was asked to be written with media type {media_type!r}"
        raise RegistryError(msg, hint="this is a bug: only indexes are written here")
    digest = digest_of(data)
    with tempfile.TemporaryDirectory(prefix="sglang-images-index-") as scratch:
        layout = Path(scratch)
        (layout / "blobs" / "sha256").mkdir(parents=True)
        (layout / "blobs" / "sha256" / digest.split(":", 1)[1]).write_bytes(data)
        (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        top = {"schemaVersion": 2, "manifests": [{"mediaType": media_type, "digest": digest, "size": len(data)}]}
        (layout / "index.json").write_text(json.dumps(top))
        seconds = deadline(env)   # one manifest: a write as short as a read
        done = proc.run([skopeo(), "--command-timeout", f"{seconds:g}s", "copy", "--multi-arch", "index-only",
                         "--preserve-digests", "--quiet", *_access("dest-", repository_of(ref), env), f"oci:{layout}",
                         f"docker://{ref}"], timeout=seconds + GRACE_S, log=log, env=dict(env))
    if not done.ok:
        raise no_answer(COPY, ref, seconds) if stalled(done) else failure(COPY, ref, said(done))
    return digest


def tags(repository: str, env: Mapping[str, str], *, log: Path | None = None) -> list[str]:
    """The repository's tags ([] when the registry knows no such repository)."""
    out = _read(["list-tags", *_access("", repository, env), f"docker://{repository}"], repository, env, log)
    if out is None:
        return []
    try:
        return [str(t) for t in json.loads(out).get("Tags") or []]
    except (ValueError, AttributeError):
        raise failure(READ, repository, "the registry's tag list is not JSON") from None
