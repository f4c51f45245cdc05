"""The disk a build leaves behind, by kind, and keeping it bounded.

Three kinds grow with every run: the engine's images (each cell's candidate, and every candidate its
inputs have since superseded), BuildKit's cache (layers no image holds any more, cache mounts: apt lists,
uv's wheels) and the run folders (logs, results). After a run the build
  - removes the candidate tags that the cells it just built have superseded (same cell, other inputs:
    an image whose inputs changed is never used again; a good tag on it keeps it), unless
    `--keep-superseded`;
  - prunes BuildKit's cache down to `--cache-keep` (default 20 GB, least recently used first; `none`
    leaves it unbounded), after each cell it really built too.
Before a cell it will really build, on a disk with less than ROOM_FOR_A_BUILD free, the build prunes the cache
no image holds whole (`make_room`): the bound is for what a run leaves behind; within a run short of disk, the
next build comes first (a cold arm64 cell on an x86_64 builder holds some 25 GB while it builds).
A disk check that finds too little room names exactly what these would free, with the commands.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log, proc
from ..errors import ConfigError
from ..matrix.schema import LABEL_PREFIX
from .base import OWNER_LABEL

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

DEFAULT_CACHE_KEEP = "20GB"
# What a cold cell may hold while it builds, and a margin for what runs beside it: the arm64 cell on the 2-core x86_64
# builder took 24.6 and 26.5 GB in two cold runs (its image, the install stages it copies from, the aarch64 wheels it
# downloads; an amd64 cell about half that). At 30 GB the second run, which found 30.7 GB free, pruned nothing and
# ended its arm64 cell with 4.1 GB left (benchmarks/ci-run-results.md).
ROOM_FOR_A_BUILD = 40 * 10**9
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(GB|MB|GiB|MiB)$", re.I)
_UNIT = {"gb": 10**9, "mb": 10**6, "gib": 1024**3, "mib": 1024**2}


def cache_keep(value: str) -> int | None:
    """Bytes of BuildKit cache to keep from `--cache-keep` ("20GB", "500MB", "none": no bound)."""
    if value.strip().lower() == "none":
        return None
    match = _SIZE.match(value.strip())
    if not match:
        msg = f"--cache-keep {value!r} is not a size"
        raise ConfigError(msg, hint="give a size such as 20GB or 500MB, or `none` to leave the cache unbounded")
    return int(float(match[1]) * _UNIT[match[2].lower()])


@dataclass(frozen=True)
class Footprint:
    images: int          # bytes of image layers in the engine (each layer once)
    build_cache: int     # BuildKit cache no image holds (what pruning can free)
    runs: int            # run folders: logs and results

    def line(self) -> str:
        return (f"images {self.images / 1e9:.1f} GB, BuildKit cache {self.build_cache / 1e9:.1f} GB, "
                f"run folders {self.runs / 1e9:.2f} GB")


def measure(client: docker.DockerClient, runs: Path) -> Footprint:
    df = client.df()
    cache = sum(int(c.get("Size", 0)) for c in df.get("BuildCache") or [] if not c.get("Shared"))
    return Footprint(images=int(df.get("LayersSize", 0)), build_cache=cache, runs=_tree_size(runs))


def _tree_size(root: Path) -> int:
    if not root.is_dir():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


CandidateTag = Callable[[str, str], str]   # (cell id, inputs hash) -> its candidate reference


def superseded(client: docker.DockerClient, current: dict[str, str], tag_of: CandidateTag,
               owner: str | None = None) -> list[tuple[str, Image]]:
    """(candidate tag, image) of every candidate whose cell is a key of `current` (cell id -> the inputs hash
    it has now) and whose inputs differ: builds no run will use again. Only images of the same `owner`
    (the owner label, see build/base.py; None: images without one): never another test session's or job's."""
    found = []
    for image in client.images.list(filters={"label": f"{LABEL_PREFIX}.inputs"}):
        labels = image.labels or {}
        cell, inputs = labels.get(f"{LABEL_PREFIX}.cell", ""), labels.get(f"{LABEL_PREFIX}.inputs", "")
        if labels.get(OWNER_LABEL) != owner:
            continue
        if cell in current and inputs != current[cell] and (tag := tag_of(cell, inputs)) in image.tags:
            found.append((tag, image))
    return found


def remove_superseded(client: docker.DockerClient, found: Iterable[tuple[str, Image]]) -> int:
    """Untag each superseded candidate (its image goes with its last tag); the images' sizes, added up (an
    upper bound: layers they share with kept images stay)."""
    import docker.errors  # the SDK where the engine is reached, not when the CLI starts (cli.py)

    freed = 0
    for tag, image in found:
        last = len(image.tags) == 1
        try:
            client.images.remove(tag)
        except docker.errors.APIError as exc:   # a container still uses it, say: it stays
            log.warn(f"kept superseded {tag}: {exc.explanation}")
            continue
        freed += int(image.attrs.get("Size", 0)) if last else 0
        log.info(f"removed superseded candidate {tag}" + ("" if last else " (the tag only: the image has others)"))
    return freed


def prune_cache(keep: int | None, builder: str | None) -> None:
    """BuildKit's cache no image holds down to `keep` bytes, least recently used first; None: no bound.
    (BuildKit's `--keep-storage` counts only those records: an image's own layers are never pruned.)"""
    if keep is None:
        return
    docker_cli = proc.which("docker", hint="install the Docker CLI")
    argv = [docker_cli, "buildx", "prune", "--force", "--keep-storage", f"{-(-keep // 10**6)}mb",  # MB, rounded up
            *(["--builder", builder] if builder else [])]
    done = proc.run(argv, timeout=1800)
    if not done.ok:
        log.warn(f"the BuildKit cache was not pruned ({done.tail(3)}); prune it by hand: {proc.quote(argv)}")


def make_room(path: str | None, keep: int | None, builder: str | None, driver: str,
              needed: int = ROOM_FOR_A_BUILD) -> None:
    """Before a build: when the disk under `path` has less than `needed` free, BuildKit's cache that no image
    holds is pruned whole (download caches, the install stages of cells already built). Only the `docker`
    driver's cache counts an image's layers as held, so only there do the cells already built stay cache hits;
    another builder keeps its bound. Nothing is pruned for `--cache-keep none` or an engine whose disk is not
    this machine's (`path` None)."""
    if path is None or keep is None or driver != "docker":
        return
    free = shutil.disk_usage(path).free
    if free >= needed:
        return
    prune_cache(0, builder)
    after = shutil.disk_usage(path).free
    if after - free >= 10**9:   # on a disk that stays short, later cells find nothing to say
        log.info(f"disk: {free / 1e9:.1f} GB free before a build that wants {needed / 1e9:.0f} GB: the BuildKit "
                 f"cache no image holds was pruned ({after / 1e9:.1f} GB free now)")


def advice(client: docker.DockerClient, runs: Path, current: dict[str, str], tag_of: CandidateTag) -> str:
    """What to prune for room, each with its command and what it frees (the disk check's hint); when the
    engine cannot say (a disk-usage query already running, say), the plain commands."""
    import docker.errors

    try:
        return _advice(client, runs, current, tag_of)
    except docker.errors.DockerException:
        return "free space: `docker image prune`, `docker buildx prune --force` (the engine could not list sizes now)"


def _advice(client: docker.DockerClient, runs: Path, current: dict[str, str], tag_of: CandidateTag) -> str:
    now = measure(client, runs)
    lines = [f"this engine holds {now.line()}"]
    stale = superseded(client, current, tag_of)
    if stale:
        size = sum(int(image.attrs.get("Size", 0)) for _tag, image in {t[1].id: t for t in stale}.values())
        lines.append(f"superseded candidates (~{size / 1e9:.1f} GB): docker rmi " + " ".join(t for t, _ in stale))
    if now.build_cache:
        lines.append(f"BuildKit cache ({now.build_cache / 1e9:.1f} GB no image holds): docker buildx prune --force "
                     "(the next build downloads its wheels again)")
    free = shutil.disk_usage(runs if runs.exists() else Path("/")).free
    if now.runs > free // 10:
        lines.append(f"old run folders ({now.runs / 1e9:.1f} GB) under {runs}")
    return "\n".join(lines)
