"""The `verify` command: python -m buildscripts verify IMAGE | --host [options] -> table, verdict, JSON."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from docker.errors import ImageNotFound
from rich.table import Table

from . import container, gpus, log, matrix, results, verify
from .config import LABEL_PREFIX
from .errors import ConfigError, RunFailed
from .results import CellResult, ImageInfo, RunResults, StageResult

ROOT = Path(__file__).resolve().parent.parent


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="nox -s verify --", description=__doc__)
    ap.add_argument("image", nargs="?", help="image reference or id (any image with a python3)")
    ap.add_argument("--host", action="store_true", help="verify a Python environment here, not an image")
    ap.add_argument("--python", default=sys.executable, help="with --host: the interpreter to verify")
    ap.add_argument("--archs", help="comma-separated targets (default: the image's label, else sm_90a,sm_100a,sm_120a)")
    ap.add_argument("--lane-cuda", help="CUDA major.minor torch must be built for, e.g. 13.0 (default: image label)")
    ap.add_argument("--stages", help="comma-separated stages (default: all, in ladder order)")
    ap.add_argument("--stage-timeout", type=float, default=900.0, help="seconds per stage (default 900)")
    ap.add_argument("--cell-id", help="name for this result (default: the image's cell label, else adhoc)")
    ap.add_argument("--run-id", default=None, help="run folder name under runs/ (default: time-based)")
    ap.add_argument("--out", type=Path, help="results JSON (default: runs/RUN_ID/results.json)")
    ap.add_argument("--profile", default="default", help="server profile from matrix.yaml (GPU stages)")
    ap.add_argument("--gpu", type=int, default=0, help="index of the GPU the GPU stages run on")
    a = ap.parse_args(list(argv))
    if not a.host and not a.image:
        ap.error("give an IMAGE, or --host to verify this Python environment")
    return a


def run(argv: Sequence[str]) -> int:
    a = parse(argv)
    run_id = a.run_id or time.strftime("%Y%m%d-%H%M%S-verify")
    run_dir = ROOT / "runs" / run_id
    archs = a.archs.split(",") if a.archs else None
    stages = a.stages.split(",") if a.stages else None
    started = results.now()
    spec = matrix.load(ROOT / "matrix.yaml")
    profile = spec.spec.profiles.get(a.profile)
    if profile is None:
        msg = f"no server profile {a.profile!r} in matrix.yaml (known: {', '.join(spec.spec.profiles)})"
        raise ConfigError(msg, hint="pass --profile with one of those names")
    if a.host:
        cell_id = a.cell_id or "host"
        found = verify.verify_host(archs=archs or verify.DEFAULT_ARCHS, lane_cuda=a.lane_cuda, logs=run_dir,
                                   stages=stages, stage_timeout=a.stage_timeout, python=a.python, cell_id=cell_id,
                                   server_args=profile.args, server_env=profile.env)
        cell = verify.cell_result(ImageInfo(ref="host", id=f"host:{a.python}"), found, cell_id=cell_id,
                                  run_id=run_id)
    else:
        try:
            labels = verify.image_facts(a.image).labels
        except ImageNotFound:
            labels = {}
        cell_id = a.cell_id or labels.get(f"{LABEL_PREFIX}.cell", "adhoc")
        found_gpus = gpus.discover(container.client().info())
        options = gpus.container_options(found_gpus, gpu=a.gpu if found_gpus.usable_in_containers else None)
        log.info(found_gpus.summary())
        cell = verify.check_image(a.image, logs=run_dir, archs=archs, lane_cuda=a.lane_cuda, stages=stages,
                                  stage_timeout=a.stage_timeout, run_id=run_id, container_options=options,
                                  profile=profile)
        cell = cell.model_copy(update={"cell_id": cell_id})
    out = a.out or run_dir / "results.json"
    results.save(RunResults(run_id=run_id, started=started, finished=results.now(), cells=[cell]), out)
    show(cell)
    log.info(f"results: {out}; probe log: {run_dir / cell_id / 'probe.log'}")
    if results.is_unexpected(cell.verdict):
        msg = f"{a.image or 'host'}: {cell.verdict.value} ({cell.verdict_reason})"
        raise RunFailed(msg, hint="see the table above and the probe log")
    return 0


def _detail(stage: StageResult) -> str:
    if stage.failure_class:
        return f"[bold]{stage.failure_class}[/]: {stage.reason or ''}\n[dim]hint: {stage.hint or ''}[/]"
    if stage.name == "import":
        modules = stage.evidence.get("modules", {})
        return ", ".join(f"{k} {v}" for k, v in modules.items())
    return stage.reason or ""


def show(cell: CellResult) -> None:
    table = Table(title=f"{cell.cell_id}  ({cell.image.ref})", show_lines=False)
    for column in ("stage", "status", "seconds", "detail"):
        table.add_column(column, overflow="fold")
    for stage in cell.stages:
        table.add_row(stage.name, log.MARK.get(stage.status.value, "?") + " " + stage.status.value,
                      f"{stage.duration_s:.1f}", _detail(stage))
    log.console.print(table)
    total = sum(s.duration_s for s in cell.stages)
    log.console.print(f"verdict: [bold]{cell.verdict.value}[/] - {cell.verdict_reason} "
                      f"[dim](stages {total:.0f}s)[/]")
