"""`nox -s verify -- IMAGE`: run the verification ladder inside any image (or, with --host, in a
Python environment on this machine), classify failures, print the verdict and save the results.

verify_image() is what the build pipeline calls per cell; every failure inside it (no such image,
no Python, a hung stage, a container killed mid-stage) is a stage result, never an exception, so
the run goes on with the next cell.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docker.errors import APIError, ImageNotFound
from pydantic import ValidationError

from . import classify, container, matrix, proc, results
from .config import CUDA_FLAVOURS, LABEL_PREFIX, Profile
from .errors import ConfigError, FatalError
from .hostrun import versions_from
from .matrix import Cell
from .probe import __main__ as probe_main  # registers every stage, as in the image
from .probe import core
from .results import BuildResult, CellResult, ImageInfo, StageResult, Status

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ARCHS = ("sm_90a", "sm_100a", "sm_120a")
del probe_main


def planned_stages(stages: Sequence[str] | None) -> list[str]:
    """The stages that will run, in ladder order (all registered ones by default)."""
    wanted = list(stages) if stages else list(core.ORDER)
    unknown = [s for s in wanted if s not in core.REGISTRY]
    if unknown:
        msg = f"unknown stage(s): {', '.join(unknown)}"
        raise ConfigError(msg, hint="known stages, in order: " + ", ".join(n for n in core.ORDER if n in core.REGISTRY))
    return [s for s in core.ORDER if s in wanted]


def image_facts(image: str) -> ImageInfo:
    """Size, labels and id of a local image (ImageNotFound when it is not there)."""
    found = container.client().images.get(image)
    return ImageInfo(ref=image, id=found.id, size_bytes=found.attrs.get("Size"), labels=dict(found.labels or {}))


def _probe_args(archs: Sequence[str], lane_cuda: str | None, stages: Sequence[str], stage_timeout: float,
                server_args: Sequence[str], server_env: Mapping[str, str] | None, mode: str) -> list[str]:
    args = ["--archs", ",".join(archs), "--stages", ",".join(stages), "--stage-timeout", str(stage_timeout),
            "--mode", mode, "--server-args", json.dumps(list(server_args)),
            "--server-env", json.dumps(dict(server_env or {}))]
    return args + (["--lane-cuda", lane_cuda] if lane_cuda else [])


def verify_image(image: str, *, archs: Sequence[str], lane_cuda: str | None, logs: Path,
                 stages: Sequence[str] | None = None, stage_timeout: float = 900,
                 container_options: Mapping[str, Any] | None = None, server_args: Sequence[str] = (),
                 server_env: Mapping[str, str] | None = None, run_id: str = "manual",
                 cell_id: str = "adhoc") -> list[StageResult]:
    """Run the ladder inside `image`; the full output goes to logs/<cell_id>/probe.log."""
    return _verify(image, archs=archs, lane_cuda=lane_cuda, log_file=logs / cell_id / "probe.log", stages=stages,
                   stage_timeout=stage_timeout, container_options=container_options, server_args=server_args,
                   server_env=server_env, run_id=run_id, cell_id=cell_id)


def verify_cell(image: str, cell: Cell, *, logs: Path, stages: Sequence[str] | None = None,
                profile: Profile | None = None, run_id: str = "manual",
                container_options: Mapping[str, Any] | None = None) -> list[StageResult]:
    """verify_image for a matrix cell (its archs, lane and server profile); logs is the cell's folder."""
    profile = profile or Profile()
    return _verify(image, archs=cell.archs, lane_cuda=cell.lane.cuda_version, log_file=logs / "probe.log",
                   stages=stages, stage_timeout=max(900.0, float(profile.timeout_s)),
                   container_options=container_options, server_args=profile.args, server_env=profile.env,
                   run_id=run_id, cell_id=cell.id)


def _verify(image: str, *, archs: Sequence[str], lane_cuda: str | None, log_file: Path,
            stages: Sequence[str] | None, stage_timeout: float, container_options: Mapping[str, Any] | None,
            server_args: Sequence[str], server_env: Mapping[str, str] | None, run_id: str,
            cell_id: str) -> list[StageResult]:
    planned = planned_stages(stages)
    try:
        info = image_facts(image)
    except ImageNotFound:
        return [_failed("image", f"image {image} not found in the local engine", "image-missing")]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text(f"# image {image} ({info.id}), cell {cell_id}, run {run_id}\n")
    args = _probe_args(archs, lane_cuda, planned, stage_timeout, server_args, server_env, "container")
    try:
        with container.probe_container(image, run_id=run_id, cell_id=cell_id, options=container_options) as (
                started, keepalive):
            if started is None:
                with log_file.open("a") as fh:
                    fh.write(f"# cannot start a keep-alive in the image: {keepalive}\n")
                return [_failed("probe", f"no Python interpreter in the image: {keepalive}", "no-python",
                                log=keepalive)]
            run = container.run_probe(started, "python3", args, planned=planned, stage_timeout=stage_timeout,
                                      log_file=log_file)
    except APIError as exc:  # the engine refused the container itself: a result for this cell, not a crash
        why = str(exc.explanation or exc)
        with log_file.open("a") as fh:
            fh.write(f"# the engine could not start a container: {why}\n")
        return [_failed("container", f"the engine could not start a container from {image}: {why[:300]}",
                        "container-start-failed", log=why)]
    stages_out = interpret(run, planned, stage_timeout)
    for i, stage in enumerate(stages_out):
        if stage.name == "facts":
            evidence = {**stage.evidence, "image": info.model_dump(exclude_none=True)}
            stages_out[i] = stage.model_copy(update={"evidence": evidence})
    return stages_out


def interpret(run: container.ProbeRun, planned: Sequence[str], stage_timeout: float) -> list[StageResult]:
    """A probe run -> one classified StageResult per planned stage (hung, died and missing ones included)."""
    out = []
    for raw in run.results:
        if raw.get("name") not in planned:
            continue
        try:
            out.append(StageResult.model_validate({k: v for k, v in raw.items() if k in StageResult.model_fields}))
        except ValidationError as exc:  # a malformed result line: the stage counts as not reported
            out.append(_failed(str(raw["name"]), f"the probe reported a malformed result: {exc.errors()[0]['msg']}",
                               None, log=json.dumps(raw, default=str)[:2000]))
    done = {s.name for s in out}
    rest = [s for s in planned if s not in done]
    tail = "\n".join(line for line in run.output if not line.startswith(container.RESULT_PREFIX))[-4000:]
    if rest:
        current, why, cls = rest[0], "", None
        if run.hung_stage:
            limit = stage_timeout + container.grace(stage_timeout)
            why, cls = f"probe timed out: no result within {limit:.0f}s", "probe-timeout"
        elif run.container_exit is not None:
            exit_ = run.container_exit
            why = (f"container exited with status {exit_['status']} during this stage"
                   + (" (out of memory)" if exit_.get("oom_killed") else ""))
            cls = "container-died"
        elif not out and run.exit_code not in (0, None):
            current = "probe"
            why = f"the probe could not run ({run.python} exited with status {run.exit_code})"
        else:
            why = f"the probe ended (status {run.exit_code}) before this stage reported"
        out.append(_failed(current, why, cls, log=tail))
        out += [StageResult(name=s, status=Status.ABORTED, reason=f"not run: {current} did not finish")
                for s in rest[1:]]
    return [classify.label(s) for s in out]


def _failed(name: str, reason: str, failure_class: str | None, *, log: str = "") -> StageResult:
    stage = StageResult(name=name, status=Status.FAILED, reason=reason, log_excerpt=log[-4000:] or None,
                        where="host")
    if failure_class:
        stage = stage.model_copy(update={"failure_class": failure_class, "hint": classify.hint_for(failure_class)})
    return classify.label(stage)


def verify_host(*, archs: Sequence[str], lane_cuda: str | None, logs: Path, stages: Sequence[str] | None = None,
                stage_timeout: float = 900, server_args: Sequence[str] = (),
                server_env: Mapping[str, str] | None = None, python: str = sys.executable,
                cell_id: str = "host", env: Mapping[str, str] | None = None) -> list[StageResult]:
    """Run the ladder in a Python environment of this machine (`python`), not in a container."""
    planned = planned_stages(stages)
    log_file = logs / cell_id / "probe.log"
    args = _probe_args(archs, lane_cuda, planned, stage_timeout, server_args, server_env, "host")
    workdir = logs / cell_id / "work"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = proc.run([python, "-m", "buildscripts.probe", *args, "--workdir", str(workdir)], log=log_file,
                    timeout=len(planned) * (stage_timeout + container.grace(stage_timeout)),
                    env={"PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}, keep_lines=100000)
    lines = done.output.splitlines()
    raws = [json.loads(ln[len(container.RESULT_PREFIX):]) for ln in lines if ln.startswith(container.RESULT_PREFIX)]
    run = container.ProbeRun(results=raws, output=lines, exit_code=done.returncode, python=python,
                             hung_stage=next((s for s in planned if s not in {r.get('name') for r in raws}), "probe")
                             if done.timed_out else None)
    return interpret(run, planned, stage_timeout)


def lane_from_labels(labels: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """(lane CUDA, archs) from the labels this project's builds put on an image."""
    flavour = labels.get(f"{LABEL_PREFIX}.cuda")
    return CUDA_FLAVOURS.get(flavour or ""), labels.get(f"{LABEL_PREFIX}.archs", "").split()


def cell_result(image: ImageInfo, stages: Sequence[StageResult], *, cell_id: str, run_id: str,
                axes: Mapping[str, str] | None = None, expected: Mapping[str, str] | None = None) -> CellResult:
    """A judged CellResult for an image that exists (built in this run or not)."""
    build = BuildResult(status=Status.PASSED, reason="existing image" if image.id else "no image")
    if not image.id:
        build = BuildResult(status=Status.FAILED, reason=f"image {image.ref} not found")
    cell = CellResult(cell_id=cell_id, axes=dict(axes or {}), expected=dict(expected) if expected else None,
                      build=build, image=image, stages=list(stages), versions=versions_from(stages),
                      run_id=run_id, finished=results.now())
    verdict, why = results.judge(cell)
    return cell.model_copy(update={"verdict": verdict, "verdict_reason": why})


def check_image(image: str, *, logs: Path, cell: Cell | None = None, archs: Sequence[str] | None = None,
                lane_cuda: str | None = None, stages: Sequence[str] | None = None, stage_timeout: float = 900,
                run_id: str = "manual", container_options: Mapping[str, Any] | None = None,
                profile: Profile | None = None) -> CellResult:
    """verify_image + judge in one call (what an end-to-end test asserts on). With `cell`, its archs,
    lane, axes and expected failure are used; otherwise the image's labels, then the defaults."""
    try:
        info = image_facts(image)
    except ImageNotFound:
        info = ImageInfo(ref=image)
    label_lane, label_archs = lane_from_labels(info.labels)
    cell_id = cell.id if cell else info.labels.get(f"{LABEL_PREFIX}.cell", "adhoc")
    cell = cell or _matrix_cell(cell_id)
    stage_results = verify_image(
        image, archs=archs or (cell.archs if cell else None) or label_archs or DEFAULT_ARCHS,
        lane_cuda=lane_cuda or (cell.lane.cuda_version if cell else None) or label_lane, logs=logs,
        stages=stages, stage_timeout=stage_timeout, run_id=run_id, cell_id=cell_id,
        container_options=container_options, server_args=profile.args if profile else (),
        server_env=profile.env if profile else None)
    expected = ({"stage": ",".join(cell.expected.stages), "class": cell.expected.failure_class or "",
                 "reason": cell.expected.reason} if cell and cell.expected else None)
    return cell_result(info, stage_results, cell_id=cell_id, run_id=run_id,
                       axes=cell.axes() if cell else None, expected=expected)


def _matrix_cell(cell_id: str) -> Cell | None:
    """The cell of matrix.yaml an image was built for (so its declared expected failure applies)."""
    try:
        spec = matrix.load(ROOT / "matrix.yaml")
    except FatalError:
        return None
    return next((c for c in spec.cells if c.id == cell_id), None)


def main(argv: Sequence[str]) -> int:
    from .verify_cli import run
    return run(argv)
