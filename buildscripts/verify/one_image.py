"""Verifying an image: the ladder inside a container of it, its facts attached, and (for `verify IMAGE`
and the tests) the judged record of the cell it belongs to.

verify_image() is what the build pipeline calls per cell, with the request provisioning made of it
(request.py); every failure inside it (no such image, no Python, a hung stage, a container killed mid-stage)
is a stage result, never an exception, so the run goes on with the next cell. The image's facts are read from
the engine once per cell: a caller that has them (`image_facts`, or the build's) puts them in the request
instead of having each step ask again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from ..build import emulation
from ..build.buildx import image_info
from ..matrix.schema import LABEL_PREFIX
from ..matrix.tagtemplates import AXIS_FIELDS
from ..results import BuildResult, CellResult, Given, ImageInfo, StageResult, Status, cell_record
from . import carry, emulated
from .container import ContainerRunner
from .output import failed
from .request import VerificationRequest
from .runner import verify

if TYPE_CHECKING:
    import docker


def image_facts(client: docker.DockerClient, image: str) -> ImageInfo:
    """Size, labels and id of a local image; without an id (and with nothing else) when the engine has none."""
    from docker.errors import ImageNotFound  # the SDK where the engine is reached, not at import (cli.py)

    try:
        found = client.images.get(image)
    except ImageNotFound:
        return ImageInfo(ref=image)
    return image_info(found, image)


def verify_image(client: docker.DockerClient, image: str, request: VerificationRequest) -> list[StageResult]:
    """Run the request's plan inside `image`; the full output goes to its log file; the facts stage carries the
    image's facts (the request's, else read here). The container gets the request's docker options; the GPUs they
    hand it are the only GPU facts its results may carry; a network it keeps is said with why."""
    info = request.facts if request.facts is not None else image_facts(client, image)
    if info.id is None:
        return [failed("image", f"image {image} not found in the local engine", "image-missing")]
    request.log_file.parent.mkdir(parents=True, exist_ok=True)
    request.log_file.write_text(f"# image {image} ({info.id}), cell {request.cell_id}, run {request.run_id}\n")
    cpu = emulated.foreign(info.labels)
    if cpu is not None:   # another CPU's image: its CPU stages under QEMU, no GPU of this host (verify/emulated.py)
        emulation.require(cpu)
        options, handed = emulated.no_gpu(cpu, request.provision.options)
        request = replace(request, plan=emulated.slower(request.plan),
                          provision=replace(request.provision, options=options, handed=handed))
    stages = verify(ContainerRunner(image, request.provision.options, cut_problem=request.provision.cut_problem),
                    request.runner_options())
    if cpu is not None:
        stages = emulated.mark(stages, cpu)
    image_evidence = info.model_dump(exclude_none=True)
    return [s.model_copy(update={"evidence": {**s.evidence, "image": image_evidence}}) if s.name == "facts" else s
            for s in stages]


def check_image(client: docker.DockerClient, image: str, request: VerificationRequest) -> CellResult:
    """verify_image + judge in one call (what `verify IMAGE` and end-to-end tests use): the judged record of the
    request's cell (its axes and declared expected failure; else what the image's labels say), with where the
    image came from by digest (`request.pulled`, verify/pulled.py) recorded with it. The CPU stages the request
    carries from the build runner's record (verify/carry.py) are not run again: they join the record as they are."""
    local = request.facts if request.facts is not None else image_facts(client, image)
    info = local
    if request.pulled is not None:
        info = local.model_copy(update=request.pulled.model_dump(include={"ref", "repository", "digest",
                                                                          "platform_digest"}))
    carried = request.carried
    left = carry.without(request.plan, carried)
    found = verify_image(client, image, replace(request, facts=local, plan=left)) if left.stages else []
    build = (BuildResult(status=Status.PASSED, reason="existing image") if info.id
             else BuildResult(status=Status.FAILED, reason=f"image {image} not found"))
    return cell_record(request.cell_id, given(request, info.labels), build=build, image=info,
                       stages=carry.merged(found, carried), carried=carried.entry if carried else None,
                       notes=request.notes)


def given(request: VerificationRequest, labels: Mapping[str, str]) -> Given:
    """What the record of a verification is given: the request's cell (its axes and declared expected failure;
    else the axes the image's `labels` declare), the targets it was planned for, its run."""
    cell = request.cell
    return Given(axes=cell.axes() if cell else axes_from_labels(labels), targets=request.plan.archs,
                 expected=cell.expected_failure() if cell else None, run_id=request.run_id)


def axes_from_labels(labels: Mapping[str, str]) -> dict[str, str] | None:
    """The cell coordinates an image declares in this project's labels (every build writes them; an image
    made elsewhere may carry them too), or None when any is missing: then no good tag can be named."""
    found = {name: labels.get(f"{LABEL_PREFIX}.{name}") for name in AXIS_FIELDS}
    return {k: v for k, v in found.items() if v is not None} if all(found.values()) else None
