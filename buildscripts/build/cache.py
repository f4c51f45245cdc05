"""A build cache shared between runners: BuildKit's registry cache, and the buildx builder that uses it.

Each cell exports its layers to `REF:CELL` and imports from the refs of every cell that shares its
base and torch lane, so a fresh runner building `…-none` finds the torch and SGLang layers another
runner pushed for `…-pip`. Whether a builder can export is asked, not assumed: the `docker` driver of
an engine with the classic image store (Docker 20.10's default) can import a registry cache but not
export one; with the containerd image store (Docker 24+, `"features": {"containerd-snapshotter":
true}`), or a `docker-container` / `remote` / `kubernetes` builder, it can. A cache that cannot be
reached is left out, with a warning: the build goes on without it.
Whether the builder can rewrite its layers' timestamps (BuildKit 0.13's `rewrite-timestamp`) is asked the same
way, from the BuildKit version `docker buildx inspect` names (docs/reproducible-builds.md).
"""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import proc
from ..errors import ConfigError
from ..matrix.schema import Cache

CONTAINERD_STORE = "io.containerd.snapshotter.v1"
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
# The first BuildKit whose image exporters take `rewrite-timestamp=true` (moby/buildkit#4057).
REWRITE_TIMESTAMPS = (0, 13)
# The engine's own builder says no version where the engine was built without it (Debian's docker.io 26 says
# v0.0.0+unknown): there the engine's release says which BuildKit it vendors (moby 26.0 vendors 0.13).
ENGINE_WITH_BUILDKIT_0_13 = (26, 0)


@dataclass(frozen=True)
class Builder:
    """The buildx builder the builds run on."""

    name: str | None               # None: the current one (`docker buildx use`)
    driver: str                    # docker, docker-container, remote, kubernetes
    exports_cache: bool
    why_not: str | None = None     # why it cannot export a registry cache
    buildkit: str = ""             # its BuildKit's version, as `docker buildx inspect` names it ("" unknown)

    @property
    def loads(self) -> bool:
        """Whether built images must be loaded into the engine explicitly (every driver but `docker`)."""
        return self.driver != "docker"

    rewrites_timestamps: bool = False   # its exporters clamp every layer's file times (rewrites_timestamps())

    def args(self) -> list[str]:
        """Which builder, and `--load` where the image must be loaded; a build that rewrites timestamps names its
        own output instead (buildx.reproducible_output), which `--load` would contradict."""
        load = self.loads and not self.rewrites_timestamps
        return (["--builder", self.name] if self.name else []) + (["--load"] if load else [])


def driver_of(inspect_output: str) -> str:
    """The driver named by `docker buildx inspect`'s first `Driver:` line."""
    match = re.search(r"^Driver:\s*(\S+)", inspect_output, re.M)
    return match.group(1) if match else "unknown"


def buildkit_of(inspect_output: str) -> str:
    """The BuildKit version `docker buildx inspect` names (`BuildKit version: v0.13.2`, older buildx `Buildkit:`)."""
    match = re.search(r"^\s*Build[Kk]it(?: version)?:\s*(\S+)", inspect_output, re.M)
    return match.group(1) if match else ""


def buildkit_release(version: str) -> tuple[int, int]:
    """(major, minor) of a BuildKit version (v0.8+unknown -> (0, 8)); (0, 0) when it names none."""
    match = re.match(r"v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def rewrites_timestamps(driver: str, buildkit: str, docker_info: Mapping[str, Any]) -> bool:
    """Whether a builder can clamp every layer's file times to SOURCE_DATE_EPOCH (`rewrite-timestamp`, BuildKit
    0.13+) and hand the image over as a docker archive: any driver of that BuildKit; the engine's own (`docker`
    driver) only with the containerd image store, since the classic store takes no docker archive from a build.
    Docker 20.10's own builder (BuildKit 0.8) cannot."""
    if driver != "docker":
        return buildkit_release(buildkit) >= REWRITE_TIMESTAMPS
    if not containerd_store(docker_info):
        return False
    engine = buildkit_release(str(docker_info.get("ServerVersion", "")))
    return buildkit_release(buildkit) >= REWRITE_TIMESTAMPS or engine >= ENGINE_WITH_BUILDKIT_0_13


def containerd_store(docker_info: Mapping[str, Any]) -> bool:
    """Whether the engine keeps images in containerd (then its own BuildKit can export a cache)."""
    status = docker_info.get("DriverStatus") or []
    return any(CONTAINERD_STORE in " ".join(map(str, pair)) for pair in status)


def builder(name: str | None, docker_info: Mapping[str, Any]) -> Builder:
    """Inspect the builder `name` (else the current one) and say whether it can export a registry cache."""
    done = proc.run(["docker", "buildx", "inspect", *([name] if name else [])], timeout=60)
    if not done.ok:
        msg = f"buildx builder {name or '(current)'} cannot be used: {done.tail(2)}"
        raise ConfigError(msg, hint="`docker buildx ls` lists the builders; create one with "
                                    "`docker buildx create --name NAME --driver docker-container`")
    driver, buildkit = driver_of(done.output), buildkit_of(done.output)
    rewrites = rewrites_timestamps(driver, buildkit, docker_info)
    if driver != "docker" or containerd_store(docker_info):
        return Builder(name, driver, exports_cache=True, buildkit=buildkit, rewrites_timestamps=rewrites)
    version = docker_info.get("ServerVersion", "?")
    why = (f"the `docker` driver of Docker engine {version} with its classic image store cannot export a "
           "registry cache (it can import one); enable the containerd image store "
           '(`"features": {"containerd-snapshotter": true}` in /etc/docker/daemon.json, Docker 24+) or build '
           "with a docker-container builder (`docker buildx create --name NAME --driver docker-container`, "
           "then `--builder NAME`)")
    return Builder(name, driver, exports_cache=False, why_not=why, buildkit=buildkit, rewrites_timestamps=rewrites)


def registry_host(ref: str) -> str:
    """The registry part of an image reference (Docker's rule: a first part with '.', ':' or 'localhost')."""
    first, sep, _ = ref.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else "registry-1.docker.io"


def unreachable(ref: str, timeout: float = 5.0) -> str | None:
    """Why the registry of `ref` cannot be reached, or None. Any HTTP answer of its /v2/ (401 too) counts:
    the engine and buildx bring their own credentials. Loopback registries may speak plain HTTP."""
    host = registry_host(ref)
    schemes = ("https", "http") if host.split(":")[0] in LOOPBACK else ("https",)
    problem = "no answer"
    for scheme in schemes:
        try:
            with urllib.request.urlopen(f"{scheme}://{host}/v2/", timeout=timeout):
                return None
        except urllib.error.HTTPError as answer:
            answer.close()
            return None   # it answered (401 asks for credentials the builders have)
        # http.client's own errors too: a server that answers something other than HTTP (BadStatusLine)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            problem = str(getattr(exc, "reason", exc))
    return f"registry {host} did not answer ({problem})"


def cache_tag(cell_id: str) -> str:
    """A cell id as a tag: tags allow [A-Za-z0-9_.-], 128 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", cell_id)[:128]


@dataclass(frozen=True)
class CachePlan:
    """What each build does with the shared cache."""

    cache: Cache
    exports: bool

    def args(self, cell_id: str, related: Sequence[str] = ()) -> list[str]:
        """buildx flags for one cell: import its own ref and those of `related` cells; export its own."""
        refs = [f"{self.cache.ref}:{cache_tag(c)}" for c in dict.fromkeys([cell_id, *related])]
        args = [x for ref in refs for x in ("--cache-from", f"type=registry,ref={ref}")]
        if self.exports:
            to = (f"type=registry,ref={refs[0]},mode={self.cache.mode},compression={self.cache.compression},"
                  "ignore-error=true")   # a failed export warns in the log; the image is still good
            args += ["--cache-to", to]
        return args

    def base_ref(self, name: str, digest: str) -> str:
        """Where a bootstrapped base is shared, so that every runner builds on the same image."""
        return f"{self.cache.ref}:base-{cache_tag(name)}-{digest}"


def plan(cache: Cache | None, build_with: Builder) -> tuple[CachePlan | None, list[str]]:
    """The cache plan for this run, and what to tell the user about it."""
    if cache is None:
        return None, []
    problem = unreachable(cache.ref)
    if problem:
        return None, [f"build cache {cache.ref} left out: {problem}; building without the shared cache"]
    notes = []
    exports = cache.export and build_with.exports_cache
    if cache.export and not build_with.exports_cache:
        notes.append(f"build cache {cache.ref}: importing only; {build_with.why_not}")
    return CachePlan(cache, exports), notes
