"""Verifying an image: the ladder inside a container of it, its facts attached, and (for `verify IMAGE`
and the tests) the judged record of the cell it belongs to.

verify_image() is what the build pipeline calls per cell; every failure inside it (no such image, no
Python, a hung stage, a container killed mid-stage) is a stage result, never an exception, so the run
goes on with the next cell. The image's facts are read from the engine once per cell: a caller that has
them (`image_facts`, or the build's) passes them down as `facts` instead of having each step ask again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
from docker.errors import ImageNotFound

from ..build import emulation
from ..build.buildx import image_info
from ..matrix import Cell, Matrix
from ..matrix.schema import LABEL_PREFIX, Profile
from ..matrix.tagtemplates import AXIS_FIELDS
from ..results import BuildResult, CellResult, ImageInfo, StageResult, Status, cell_record
from . import emulated
from .container import ContainerRunner
from .gpus import Handed
from .output import failed
from .plan import DEFAULT_ARCHS, MIN_STAGE_TIMEOUT, Plan, lane_from_labels
from .runner import Options, verify


def image_facts(client: docker.DockerClient, image: str) -> ImageInfo:
    """Size, labels and id of a local image; without an id (and with nothing else) when the engine has none."""
    try:
        found = client.images.get(image)
    except ImageNotFound:
        return ImageInfo(ref=image)
    return image_info(found, image)


def verify_image(client: docker.DockerClient, image: str, plan: Plan, *, log_file: Path, run_id: str = "manual",
                 cell_id: str = "adhoc", options: Mapping[str, Any] | None = None, handed: Handed | None = None,
                 cut_problem: str | None = None, keep: bool = False,
                 facts: ImageInfo | None = None) -> list[StageResult]:
    """Run the plan inside `image`; the full output goes to `log_file`; the facts stage carries the image's
    `facts` (read here unless given). `options` are the container's docker `run` options; `handed` the GPUs
    they give it (the only GPU facts its results may carry); `cut_problem` why the container keeps a network,
    when it does."""
    info = facts if facts is not None else image_facts(client, image)
    if info.id is None:
        return [failed("image", f"image {image} not found in the local engine", "image-missing")]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text(f"# image {image} ({info.id}), cell {cell_id}, run {run_id}\n")
    cpu = emulated.foreign(info.labels)
    if cpu is not None:   # another CPU's image: its CPU stages under QEMU, no GPU of this host (verify/emulated.py)
        emulation.require(cpu)
        options, handed = emulated.no_gpu(cpu, options)
        plan = emulated.slower(plan)
    stages = verify(ContainerRunner(image, options, cut_problem=cut_problem),
                    Options(plan=plan, log_file=log_file, handed=handed or Handed(), run_id=run_id, cell_id=cell_id,
                            keep=keep))
    if cpu is not None:
        stages = emulated.mark(stages, cpu)
    image_evidence = info.model_dump(exclude_none=True)
    return [s.model_copy(update={"evidence": {**s.evidence, "image": image_evidence}}) if s.name == "facts" else s
            for s in stages]


def check_image(client: docker.DockerClient, image: str, *, logs: Path, cell: Cell | None = None,
                matrix: Matrix | None = None, archs: Sequence[str] | None = None, lane_cuda: str | None = None,
                stages: Sequence[str] | None = None, stage_timeout: float = MIN_STAGE_TIMEOUT, run_id: str = "manual",
                options: Mapping[str, Any] | None = None, handed: Handed | None = None,
                cut_problem: str | None = None, profile: Profile | None = None,
                profile_name: str = "default", keep: bool = False, pulled: ImageInfo | None = None,
                facts: ImageInfo | None = None) -> CellResult:
    """verify_image + judge in one call (what `verify IMAGE` and end-to-end tests use). The targets come
    from `archs`, else `cell`, else the cell of `matrix` the image's labels name, else the labels,
    else the defaults; so does the lane and the declared expected failure. `pulled`: where the image came
    from by digest (verify/pulled.py), recorded with it. `facts`: as verify_image."""
    local = facts if facts is not None else image_facts(client, image)
    info = local
    if pulled is not None:
        info = local.model_copy(update=pulled.model_dump(include={"ref", "repository", "digest", "platform_digest"}))
    label_lane, label_archs = lane_from_labels(info.labels)
    cell_id = cell.id if cell else info.labels.get(f"{LABEL_PREFIX}.cell", "adhoc")
    cell = cell or (matrix_cell(matrix, cell_id) if matrix else None)
    plan = Plan.make(archs=archs or (cell.archs if cell else None) or label_archs or DEFAULT_ARCHS,
                     lane_cuda=lane_cuda or (cell.lane.cuda_version if cell else None) or label_lane,
                     stages=stages, stage_timeout=stage_timeout, profile=profile, profile_name=profile_name,
                     also_archs=cell.also_audit if cell else matrix.spec.targets().also_audit if matrix else ())
    found = verify_image(client, image, plan, log_file=logs / cell_id / "probe.log", run_id=run_id,
                         cell_id=cell_id, options=options, handed=handed, cut_problem=cut_problem, keep=keep,
                         facts=local)
    build = (BuildResult(status=Status.PASSED, reason="existing image") if info.id
             else BuildResult(status=Status.FAILED, reason=f"image {image} not found"))
    return cell_record(cell_id, axes=cell.axes() if cell else axes_from_labels(info.labels), targets=plan.archs,
                       expected=cell.expected_failure() if cell else None, build=build, image=info, stages=found,
                       run_id=run_id)


def axes_from_labels(labels: Mapping[str, str]) -> dict[str, str] | None:
    """The cell coordinates an image declares in this project's labels (every build writes them; an image
    made elsewhere may carry them too), or None when any is missing: then no good tag can be named."""
    found = {name: labels.get(f"{LABEL_PREFIX}.{name}") for name in AXIS_FIELDS}
    return {k: v for k, v in found.items() if v is not None} if all(found.values()) else None


def matrix_cell(matrix: Matrix, cell_id: str) -> Cell | None:
    """The cell of matrix.yaml an image was built for (so its declared expected failure applies)."""
    return matrix.cell(cell_id)
