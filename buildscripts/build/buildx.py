"""Layered builds with the `docker buildx` CLI (the SDK's build has no BuildKit: docker-py #2230).

One `buildx build --target cell` per cell; the Dockerfile's named stages (pyenv, torch, sglang,
toolkit, cudahome-*) are shared by every cell with equal inputs through BuildKit's cache. A cell
whose candidate tag (a hash of all its build inputs) already exists is not built again at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hostenv, proc
from ..errors import ConfigError
from ..lock import LockPaths
from ..matrix import Cell
from ..matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from ..matrix.schema import LABEL_PREFIX
from ..results import BuildResult, ImageInfo, Status
from ..workspace import Workspace
from . import imagesize
from .base import BaseImage, owner_labels

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

# What a warm cell's bake runs beside its recorded manifest (images/warm/, copied in by the Dockerfile): inputs of
# the cell, as the manifest is.
WARM_SCRIPTS = ("bake.py", "repeatable.py")


@dataclass(frozen=True)
class Recipe:
    """The project files every cell is built from (inside the build context, the project root)."""

    context: Path
    dockerfile: Path
    toolkit_script: Path
    lxc_init: Path
    empty_lock: Path
    bootstrap_lock: Path
    cell_files: Path
    lean: tuple[Path, ...] = ()  # what keeps every install layer lean: removals, fatbin pruner, bytecode
    warm: Path | None = None     # images/warm: bake.py and one recorded manifest per SGLang version
    # Another platform's image (linux/arm64): its Dockerfile and the scripts of its native install stages
    cross: tuple[Path, ...] = ()

    @classmethod
    def of(cls, ws: Workspace) -> Recipe:
        return cls(context=ws.root, dockerfile=ws.images / "Dockerfile",
                   toolkit_script=ws.images / "toolkit" / "assemble-cuda-home.sh",
                   lxc_init=ws.images / "lxc" / "init.sh",
                   empty_lock=ws.images / "toolkit" / "empty.txt", bootstrap_lock=ws.locks / "bootstrap.txt",
                   cell_files=ws.cache / "cells",
                   lean=(ws.images / "lean" / "finish-layer.sh", ws.images / "lean" / "lean.sh",
                         ws.images / "lean" / "recipe.txt", ws.images / "lean" / "prune_fatbins.py",
                         ws.images / "lean" / "fatbin_rewrite.py", ws.images / "lean" / "imports.txt",
                         ws.root / "buildscripts" / "probe" / "fatbin.py",
                         ws.root / "buildscripts" / "probe" / "pruned.py", ws.images / "bytecode.py",
                         ws.images / "toolkit" / "dpkg-excludes"),
                   warm=ws.images / "warm",
                   cross=(ws.images / "Dockerfile.cross", ws.images / "cross" / "install-layer.sh",
                          ws.images / "cross" / "subtract.py", ws.images / "cross" / "compile_layer.py"))

    def dockerfile_for(self, cell: Cell) -> Path:
        """linux/amd64's images come from images/Dockerfile; another platform's from images/Dockerfile.cross, whose
        installs run natively on the build machine (the amd64 path, and so its cache, stays as it was)."""
        return self.dockerfile if cell.platform == DEFAULT_PLATFORM or not self.cross else self.cross[0]

    def warm_manifest(self, cell: Cell) -> Path | None:
        """The recorded start-up kernels of the cell's SGLang, when its toolkit bakes them and a start of at
        least one of its warm profiles was recorded; otherwise the image has no warm layer (and no claim)."""
        if not cell.toolkit.warm or self.warm is None or warm_skipped(cell):
            return None
        path = self.warm / f"sglang-{cell.sglang.version}.json"
        if not path.is_file():
            return None
        try:
            recorded = json.loads(path.read_text()).get("profiles", {})
        except (OSError, ValueError) as exc:
            msg = f"{path} is not a readable start-up manifest: {exc}"
            hint = "restore it from git, or record the start again (docs/warm-manifest.md)"
            raise ConfigError(msg, hint=hint) from exc
        return path if any(p in recorded for p in cell.toolkit.warm_profiles) else None


def warm_skipped(cell: Cell) -> str | None:
    """Why the cell's image bakes no kernel caches although its toolkit asks for them (None: nothing stops it)."""
    if cell.toolkit.warm and cell.platform != DEFAULT_PLATFORM:
        return (f"no baked kernel caches for {cell.platform} yet: compiling them under emulation takes too long, "
                "so the first server start compiles them")
    return None


def inputs_hash(cell: Cell, base: BaseImage, locks: LockPaths, recipe: Recipe,
                native: BaseImage | None = None, compression: str = "gzip") -> str:
    """Content hash of everything the cell's image is built from: its candidate tag. `native`: the build machine's
    base that another platform's install stages run on (its id is an input of those layers). `compression`: the
    layers' (zstd makes another image of the same files: other blobs, another manifest digest)."""
    h = hashlib.sha256()
    if compression != "gzip":   # gzip's hash is the one every image built before the option has
        h.update(b"layers\0" + compression.encode() + b"\0")
    manifest = recipe.warm_manifest(cell)
    warm = (manifest, *(manifest.parent / script for script in WARM_SCRIPTS)) if manifest else ()
    dockerfile = recipe.dockerfile_for(cell)
    cross = recipe.cross[1:] if dockerfile != recipe.dockerfile else ()
    if native is not None and cross:
        h.update(b"native\0" + native.id.encode() + b"\0")
    for path in (dockerfile, recipe.toolkit_script, recipe.lxc_init, recipe.bootstrap_lock, locks.lane,
                 locks.sglang, locks.toolkit or recipe.empty_lock, *recipe.lean, *warm, *cross):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(json.dumps(cell_metadata(cell, base, ""), sort_keys=True).encode())
    # pip recipe and cuda_home, not only apt; of the pip recipes only the cell's own flavour's, so that a recipe
    # for a new CUDA flavour rebuilds no image of the others
    own = {flavour: pins for flavour, pins in cell.toolkit.pip.items() if flavour == cell.lane.cuda}
    h.update(cell.toolkit.model_copy(update={"pip": own}).model_dump_json().encode())
    return h.hexdigest()[:12]


def cell_metadata(cell: Cell, base: BaseImage, inputs: str) -> dict[str, str]:
    meta = {f"{LABEL_PREFIX}.{k}": v for k, v in cell.axes().items()}
    meta[f"{LABEL_PREFIX}.base.id"] = base.id
    meta[f"{LABEL_PREFIX}.toolkit.apt"] = " ".join(cell.toolkit.apt)
    if cell.platform != DEFAULT_PLATFORM:   # amd64's labels (and so its inputs) predate the platform axis
        meta[f"{LABEL_PREFIX}.platform"] = cell.platform
    if inputs:
        meta[f"{LABEL_PREFIX}.inputs"] = inputs
        meta["org.opencontainers.image.title"] = f"SGLang {cell.sglang.version} ({cell.id})"
    return meta


@contextmanager
def build_secrets(env: Mapping[str, str]) -> Iterator[list[str]]:
    """`--secret` flags for the host CA bundle and index settings, from files that die with the build."""
    ca = hostenv.ca_bundle(env)
    index = hostenv.index_settings(env)
    with tempfile.TemporaryDirectory(prefix="sglang-secrets-") as tmp:
        index_env = Path(tmp) / "index.env"
        lines = [f"export {key}={shlex.quote(value)}" for key, value in sorted(index.build_env().items())]
        index_env.write_text("\n".join(lines) + "\n")
        index_env.chmod(0o600)
        ca_file = Path(tmp) / "ca.crt"
        if ca:
            shutil.copyfile(ca, ca_file)
        else:
            ca_file.write_text("")
        yield ["--secret", f"id=ca,src={ca_file}", "--secret", f"id=index,src={index_env}"]


def build_args(cell: Cell, base: BaseImage, locks: LockPaths, cell_json: Path, recipe: Recipe,
               native: BaseImage | None = None) -> list[str]:
    def rel(path: Path) -> str:
        return str(path.resolve().relative_to(recipe.context))

    args = {
        "BASE_IMAGE": base.ref,
        "LANE_LOCK": rel(locks.lane),
        "LANE_CUDA": cell.lane.cuda,  # the lean recipe's lines for one CUDA flavour
        "TARGET_ARCHS": ",".join(cell.archs),  # GPU machine code for other archs is pruned
        "SGLANG_LOCK": rel(locks.sglang),
        "TOOLKIT_LOCK": rel(locks.toolkit or recipe.empty_lock),
        "TOOLKIT_APT": " ".join(cell.toolkit.apt),
        "CUDA_HOME_MODE": "true" if cell.toolkit.cuda_home else "false",
        "CELL_JSON": rel(cell_json),
    }
    if recipe.dockerfile_for(cell) != recipe.dockerfile:
        if native is None:
            msg = f"{cell.id} is a {cell.platform} cell: its install stages need the build machine's own base"
            raise ConfigError(msg, hint="add a base of this machine's platform to matrix.yaml `bases:`")
        args.update({"NATIVE_IMAGE": native.ref, "WHEEL_PLATFORM": cell.base.platform,
                     "PYTHON_VERSION": cell.base.python})
    manifest = recipe.warm_manifest(cell)
    if manifest is not None:
        args.update({"WARM_MODE": "true", "WARM_MANIFEST": rel(manifest), "WARM_ARCHS": ",".join(cell.archs),
                     "WARM_PROFILES": ",".join(cell.toolkit.warm_profiles)})
    return [x for k, v in args.items() for x in ("--build-arg", f"{k}={v}")]


@dataclass(frozen=True)
class CellInputs:
    """What one cell's image is built from: the cell, its base (for another platform's cell also `native`, the
    build machine's own base its installs run on), its locks and the project's recipe."""

    cell: Cell
    base: BaseImage
    locks: LockPaths
    recipe: Recipe
    native: BaseImage | None = None


def source_date_epoch(client: docker.DockerClient, base_ref: str) -> int:
    """The SOURCE_DATE_EPOCH of a cell's build: its base image's creation time, which for a bootstrapped base is
    its mirror state's date (build/rootfs.py), so that the same inputs give the same stamp on every runner."""
    created = str(client.images.get(base_ref).attrs.get("Created", ""))
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", created)
    if match is None:
        msg = f"the base image {base_ref} has no readable creation time ({created!r})"
        raise ConfigError(msg, hint="rebuild the base, or name another one in matrix.yaml")
    return int(datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())


@dataclass(frozen=True)
class Output:
    """Where a build's image goes: the builder's default (the engine's image store), or with `epoch` a docker
    archive whose every layer's file times BuildKit clamped to that SOURCE_DATE_EPOCH, loaded afterwards."""

    args: tuple[str, ...] = ()
    archive: Path | None = None


@contextmanager
def reproducible_output(epoch: int | None, folder: Path, compression: str = "gzip") -> Iterator[Output]:
    """The output flags for a build stamped with `epoch` (None: the builder's default, as Docker 20.10 builds), its
    layers compressed with `compression` (zstd only where stamped: a BuildKit >= 0.13 builder, pipeline.prepare).

    `rewrite-timestamp` cannot go to the engine's own image store: BuildKit refuses it with `unpack`, which
    Docker's exporter always sets ("conflicts with unpack", moby/buildkit#4057), so the image is written as a
    docker archive and loaded. Provenance is left out: its attestation records the build's own times."""
    if epoch is None:
        yield Output()
        return
    # zstd is named only by OCI media types (Docker's own would be a non-standard `tar.zstd`)
    layers = "" if compression == "gzip" else f",compression={compression},force-compression=true,oci-mediatypes=true"
    with tempfile.TemporaryDirectory(prefix="sglang-image-", dir=folder) as tmp:
        archive = Path(tmp) / "image.tar"
        yield Output(("--build-arg", f"SOURCE_DATE_EPOCH={epoch}", "--provenance=false", "--output",
                      f"type=docker,dest={archive},rewrite-timestamp=true{layers}"), archive)


def build_cell(what: CellInputs, *, tag: str, inputs: str, client: docker.DockerClient, log_file: Path,
               env: Mapping[str, str], timeout: float = 3600, extra_args: Sequence[str] = (),
               epoch: int | None = None, compression: str = "gzip") -> tuple[BuildResult, ImageInfo]:
    """Build one cell's image under its candidate `tag` (skipped when that tag already exists); `inputs` is the
    hash of `what` (inputs_hash). `extra_args`: the builder and shared-cache flags (build/cache.py). `epoch`: the
    SOURCE_DATE_EPOCH to clamp every layer's file times to, where the builder can (cache.Builder); `compression`: the
    layers' there."""
    import docker.errors  # the SDK where the engine is reached, not when the CLI starts (cli.py)

    try:
        image = client.images.get(tag)
        return BuildResult(status=Status.PASSED, cached=True, reason="candidate tag exists: inputs unchanged",
                           log=str(log_file)), image_info(image, tag)
    except docker.errors.ImageNotFound:
        pass
    cell, recipe = what.cell, what.recipe
    labels = cell_metadata(cell, what.base, inputs)
    cell_json = recipe.cell_files / f"{cell.id}.json"
    cell_json.parent.mkdir(parents=True, exist_ok=True)
    cell_json.write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")
    started = time.monotonic()
    platform = [] if cell.platform == DEFAULT_PLATFORM else ["--platform", cell.platform]
    with build_secrets(env) as secrets, reproducible_output(epoch, recipe.cell_files, compression) as output:
        argv = [
            "docker", "buildx", "build", "--progress=plain", *platform, "--target", "cell", "--tag", tag,
            "--file", str(recipe.dockerfile_for(cell)), *secrets,
            *build_args(cell, what.base, what.locks, cell_json, recipe, what.native), *extra_args, *output.args,
            *(x for k, v in sorted({**labels, **owner_labels(env)}.items()) for x in ("--label", f"{k}={v}")),
            str(recipe.context),
        ]
        done = proc.run(argv, log=log_file, timeout=timeout, env={"DOCKER_BUILDKIT": "1"})
        if done.ok and output.archive is not None:
            done = proc.run(["docker", "load", "--input", str(output.archive)], log=log_file, timeout=timeout)
    duration = round(time.monotonic() - started, 1)
    layers = layer_times(log_file)
    if not done.ok:
        why = "timed out" if done.timed_out else f"buildx exited {done.returncode}"
        return BuildResult(status=Status.FAILED, duration_s=duration, reason=f"{why}: {last_error(done.output)}",
                           log=str(log_file), layers=layers), ImageInfo()
    image = client.images.get(tag)
    return BuildResult(status=Status.PASSED, duration_s=duration, log=str(log_file), layers=layers,
                       cached=all(v == 0 for v in layers.values()), reason=warm_skipped(cell)), image_info(image, tag)


def image_info(image: Image, tag: str) -> ImageInfo:
    """The facts of a local image, named `tag`: id, size, labels, bytes per Dockerfile stage (the one reading of
    them, for the build's record and verify's `image_facts`)."""
    attrs = image.attrs
    return ImageInfo(ref=tag, id=str(image.id), size_bytes=int(attrs.get("Size", 0)),
                     labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
                     layers=imagesize.layer_sizes(image.history()))


_STEP = re.compile(r"^#(\d+) \[(?P<stage>[\w.-]+) +\d+/\d+\] (?P<what>.*)$")
_DONE = re.compile(r"^#(\d+) (?:DONE (?P<secs>[\d.]+)s|(?P<cached>CACHED))")


def layer_times(log_file: Path) -> dict[str, float]:
    """Seconds spent per Dockerfile stage, from buildx's plain progress output (0 when cached)."""
    if not log_file.exists():
        return {}
    stage_of: dict[str, str] = {}
    times: dict[str, float] = {}
    for line in log_file.read_text(errors="replace").splitlines():
        if m := _STEP.match(line):
            stage_of[line.split()[0]] = m["stage"]
            times.setdefault(m["stage"], 0.0)
        elif line.endswith(" exporting to image"):  # writing layers into the image store
            stage_of[line.split()[0]] = "export"
            times.setdefault("export", 0.0)
        elif (m := _DONE.match(line)) and (stage := stage_of.get(line.split()[0])):
            times[stage] = round(times[stage] + float(m["secs"] or 0), 1)
    return times


def last_error(output: str) -> str:
    """The most telling line of a failed build (BuildKit prints `ERROR:`/`error:` lines last)."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.search(r"\berror\b|ERROR|failed to", line, re.I):
            return line.strip()[-300:]
    return lines[-1][-300:] if lines else "no output"
