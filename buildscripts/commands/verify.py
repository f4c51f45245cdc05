"""`nox -s verify -- IMAGE | --host | --lxc CTID | --lxc-name NAME`: run the verification ladder inside any
image, in a Python environment on this machine, or in place in a running LXC container; classify failures,
print the verdict and save the results, sealed with this verifier's key (trust/keys.py). `IMAGE` as
`REPO@sha256:…` (or with `--pull`) is pulled by digest first and recorded as that digest: what a GPU job of
a staging build does (verify/pulled.py)."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from .. import arguments, log
from ..errors import ConfigError, RunFailed
from ..verify.asked import KEEP_ENV, SHM_SIZE, Asked, Place
from ..workspace import Workspace, checked_name

if TYPE_CHECKING:
    from ..lxc.target import Target
    from ..results import CellResult, StageResult
    from ..verify.carry import Offered

ABOUT = "the ladder on an image, on this Python (--host) or in LXC (--lxc)"


@dataclass(frozen=True, kw_only=True)
class Options(Asked):
    """What `verify` takes besides what every verification asks (`Asked`: stages, targets, profile, GPU, ...)."""

    place: Place                            # an image, this machine's Python, or an LXC container
    out: Path                               # the results JSON (default: runs/RUN_ID/results.json)
    cell_id: str | None = None              # names the result (default: the image's cell label, else adhoc)
    trust_keys: tuple[Path, ...] = ()       # also trusted: an LXC container's source verdict, a --cpu-record's seal
    cpu_records: tuple[Offered, ...] = ()   # the build runner's records whose CPU stages may stand for ours


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from .. import disk
    from ..matrix import load
    from ..registry import references
    from ..verify.plan import stages_argument

    ap = _parser()
    a = ap.parse_args(list(argv))
    if a.here:
        a = _here(a, env)
    in_place_ = a.host or a.lxc is not None or a.lxc_name is not None
    if not in_place_ and not a.image:
        ap.error("give an IMAGE, or --host / --lxc CTID / --lxc-name NAME to verify in place")
    if in_place_ and a.image:
        ap.error("give an IMAGE or a place to verify in (--host, --lxc, --lxc-name), not both")
    if in_place_ and a.pull:
        ap.error("--pull goes with an IMAGE by digest (REPO@sha256:…), not with --host or --lxc")
    target = check_arguments(a)
    _needs_the_build_extra(container=not in_place_)
    run_id = a.run_id or time.strftime("%Y%m%d-%H%M%S-verify")
    out = a.out or ws.run_dir(run_id) / "results.json"
    # Before the ladder (minutes to an hour): its results must have somewhere to go.
    disk.check_writable(out, "--out", "pass --out PATH of a results file in a folder you can write")
    stages = stages_argument(a.stages)
    place = Place(image=a.image, pull=bool(a.image and (a.pull or references.by_digest(a.image))), host=a.host,
                  target=target, python=a.python)
    return Options(ws=ws, matrix=load(ws.matrix), env=env, run_id=run_id, place=place, out=out, cell_id=a.cell_id,
                   stages=tuple(stages) if stages else None, profile=a.profile, gpu=a.gpu,
                   archs=tuple(a.archs.split(",")) if a.archs else None, lane_cuda=a.lane_cuda,
                   stage_timeout=a.stage_timeout, shm_size=a.shm_size, keep_containers=env.get(KEEP_ENV) == "1",
                   trust_keys=tuple(a.trust_key), cpu_records=_cpu_records(a, place))


def _cpu_records(a: argparse.Namespace, place: Place) -> tuple[Offered, ...]:
    """The build runner's records given with --cpu-record, read before the pull; none with --rerun-cpu. They are
    held to the digest verified, so they go with an image by digest only: a run in place verifies no image."""
    from ..verify import carry

    if not a.cpu_record:
        return ()
    if not place.pull:
        msg = ("--cpu-record holds the build runner's record to the image digest verified here: "
               f"{'a run in place verifies no image' if place.image is None else f'{place.image} is no digest'}")
        raise ConfigError(msg, hint="verify the staged image by digest (REPO@sha256:…, or --pull), or leave "
                                    "--cpu-record out: the CPU stages then run here")
    if a.rerun_cpu:
        log.info("--rerun-cpu: every CPU stage runs here, --cpu-record is set aside")
        return ()
    return carry.read(a.cpu_record)


def _needs_the_build_extra(*, container: bool) -> None:
    """The ladder's host side draws the tiny model and decodes it itself (numpy, safetensors), and runs an image in
    a container through testcontainers: the `build` extra of the package. A user's install without it hears so
    before the ladder, not from a traceback at the server stages."""
    import importlib.util

    wanted = ("numpy", "safetensors", *(("testcontainers",) if container else ()))
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        msg = f"verify needs {', '.join(missing)}, which this install lacks (the package's `build` extra)"
        raise ConfigError(msg, hint="pipx install 'sglang-images[build]' (or: pipx inject sglang-images "
                                    f"{' '.join(missing)}); from a clone, nox -s verify brings them")


def _parser() -> argparse.ArgumentParser:
    from ..verify.plan import DEFAULT_ARCHS, MIN_STAGE_TIMEOUT

    ap = argparse.ArgumentParser(prog="nox -s verify --", description=__doc__)
    ap.add_argument("image", nargs="?", help="image reference or id (any image with a python3); REPO@sha256:… is "
                                             "pulled by that digest first")
    ap.add_argument("--pull", action="store_true",
                    help="pull IMAGE by digest before verifying it, and refuse a tag (what CI's GPU jobs pass)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--here", action="store_true",
                       help="the ladder on this machine as `here` reads it: IMAGE in a container where Docker hands "
                            "GPUs to containers; without IMAGE, this machine's python3 in place (on a host, or inside "
                            "an LXC or Proxmox container)")
    where.add_argument("--host", action="store_true", help="verify a Python environment here, not an image")
    where.add_argument("--lxc", metavar="CTID", help="verify in place in a running Proxmox container (pct)")
    where.add_argument("--lxc-name", metavar="NAME", help="verify in place in a running LXC container (lxc-attach)")
    ap.add_argument("--lxc-path", type=arguments.path_argument, default=None,
                    help="with --lxc-name: LXC's container folder when it is not /var/lib/lxc (lxc-attach -P)")
    ap.add_argument("--python", type=arguments.path_text,
                    help="with --host: the interpreter to verify (default: this one); with --lxc: "
                         "the container's interpreter, e.g. a venv's (default: python3)")
    ap.add_argument("--archs", help="comma-separated targets (default: the image's label, else "
                                    f"{','.join(DEFAULT_ARCHS)})")
    ap.add_argument("--lane-cuda", help="CUDA major.minor torch must be built for, e.g. 13.0 (default: image label)")
    ap.add_argument("--stages", help="comma-separated stages (default: all, in ladder order)")
    ap.add_argument("--stage-timeout", type=float, default=None,
                    help=f"seconds per stage (default: {MIN_STAGE_TIMEOUT:.0f}, or the profile's timeout_s when "
                         "longer)")
    ap.add_argument("--cell-id", help="name for this result (default: the image's cell label, else adhoc); a cell "
                                      "of matrix.yaml also gives its targets, lane and expected failure")
    ap.add_argument("--run-id", default=None, help="run folder name under runs/ (default: time-based)")
    ap.add_argument("--out", type=arguments.path_argument, help="results JSON (default: runs/RUN_ID/results.json)")
    arguments.add_verification(ap, profile=Options.profile, gpu=Options.gpu)
    ap.add_argument("--shm-size", default=SHM_SIZE, type=arguments.shm_size_argument,
                    help=f"/dev/shm of the verification container, as docker's --shm-size (default {SHM_SIZE}); "
                         "64m is Docker's default")
    ap.add_argument("--trust-key", action="append", default=[], type=arguments.path_argument, metavar="PUB",
                    help="also trust this public key: with --lxc for the source image's verdicts, with --cpu-record "
                         "for the build runner's seal")
    ap.add_argument("--cpu-record", action="append", default=[], type=arguments.path_argument, metavar="RESULTS",
                    help="the build runner's results.json of this digest (repeatable): its sealed record's CPU stages "
                         "stand for this run's, which then runs the GPU stages only; a record that does not hold "
                         "(another digest or cell, a key not trusted, a CPU stage not passed) is said, and the CPU "
                         "stages run here")
    ap.add_argument("--rerun-cpu", action="store_true",
                    help="run every CPU stage here even when --cpu-record is given")
    return ap


def _here(a: argparse.Namespace, env: Mapping[str, str]) -> argparse.Namespace:
    """--here made into today's modes from what `here` reads of this machine: a container of IMAGE when Docker
    hands GPUs to containers, else (no IMAGE) host mode with this machine's python3, which inside an LXC or Proxmox
    container is the ladder in place. Said on the console, so the record's mode is never a surprise."""
    import shutil

    from ..here import facts, reading

    machine = reading.read(facts.live(env))
    if a.image:
        problem = (machine.docker.problem if machine.docker else
                   reading.Problem("docker", "there is no docker program here", "install Docker and the NVIDIA "
                                   "Container Toolkit, or run `verify --here` without IMAGE inside the container"))
        if problem is not None or machine.docker is None or not machine.docker.runtime:
            said = problem.said if problem else "Docker here hands no GPU to containers"
            msg = f"verify --here {a.image}: {said}"
            raise ConfigError(msg, hint=problem.fix if problem else "install the NVIDIA Container Toolkit")
        log.info(f"verify --here: {a.image} in a container ({machine.runtime_words()})")
        return argparse.Namespace(**{**vars(a), "here": False})
    python = a.python or shutil.which("python3", path=env.get("PATH"))
    if python is None:
        msg = "verify --here: no python3 on PATH to verify in place"
        raise ConfigError(msg, hint="pass --python PATH of the interpreter that runs SGLang here")
    log.info(f"verify --here: {python} in place ({machine.runtime_words()})")
    return argparse.Namespace(**{**vars(a), "here": False, "host": True, "python": python})


def check_arguments(a: argparse.Namespace) -> Target | None:
    """Every argument problem is found here, before the matrix is read or the engine contacted; the LXC container
    named, when one is."""
    from ..lxc.target import Target
    from ..matrix.schema import MAX_TIMEOUT_S
    from ..matrix.spellings import arch_problem
    from ..refs import FORMS, reference_problem
    from ..results import CPU_STAGES
    from ..verify import pulled
    from ..verify.plan import stages_argument

    if a.run_id is not None:
        checked_name(a.run_id, "--run-id")
    target = (Target.pct(a.lxc, flag="--lxc") if a.lxc is not None
              else Target.named(a.lxc_name, lxc_path=a.lxc_path, flag="--lxc-name") if a.lxc_name is not None
              else None)
    if a.lxc_path is not None and a.lxc_name is None:
        msg = "--lxc-path is LXC's container folder: it goes with --lxc-name"
        raise ConfigError(msg, hint="Proxmox containers (--lxc CTID) are found by pct itself")
    if a.cell_id is not None:
        checked_name(a.cell_id, "--cell-id")
    if a.image is not None:
        problem = reference_problem(a.image)
        if problem:
            msg = f"IMAGE {problem}"
            raise ConfigError(msg, hint=f"give an image as {FORMS}, or an image id (`docker images` lists them)")
        if a.pull:
            pulled.pinned(a.image)  # a tag is refused here, before the engine is asked anything
    if a.python is not None and not a.python.strip():
        msg = "--python '' names no interpreter"
        raise ConfigError(msg, hint="give the interpreter's path, e.g. --python /opt/venv/bin/python, or leave "
                                    "--python out (with --host: this one; with --lxc: python3)")
    stages = stages_argument(a.stages)
    if a.cpu_record and stages and not a.rerun_cpu and not set(stages) & set(CPU_STAGES):
        # a record stands for CPU stages this run asks for: with none asked it goes unused, and a run of the GPU
        # stages alone claims nothing (verdict `built`, nothing signed): GPU time spent for no verdict
        msg = f"--cpu-record carries CPU stages, and --stages {a.stages} asks for none: the record would go unused"
        raise ConfigError(msg, hint="leave --stages out: the record's CPU stages then stand for this run's and only "
                                    "the GPU stages run here (or leave --cpu-record out)")
    if a.stage_timeout is not None and not (0 < a.stage_timeout <= MAX_TIMEOUT_S):  # NaN compares False
        msg = f"--stage-timeout {a.stage_timeout} is not a number of seconds up to a day"
        raise ConfigError(msg, hint="give a positive number, e.g. --stage-timeout 900")
    arguments.check_gpu(a.gpu)
    if a.archs is not None:
        problems = [p for p in map(arch_problem, a.archs.split(",")) if p]
        if problems:
            msg = f"--archs: {problems[0]}"
            raise ConfigError(msg, hint="e.g. --archs sm_90a,sm_100a")
    if a.lane_cuda is not None and not re.fullmatch(r"[0-9]{1,2}\.[0-9]{1,2}", a.lane_cuda):
        msg = f"--lane-cuda {a.lane_cuda!r} is not a CUDA major.minor"
        raise ConfigError(msg, hint="e.g. --lane-cuda 13.0")
    return target


def run(options: Options) -> int:
    from .. import results
    from ..verify import places

    verifier = places.verifier(options.place)
    request = verifier.request(options, places.Named(cell_id=options.cell_id, out=options.out,
                                                     trust_keys=options.trust_keys, cpu_records=options.cpu_records))
    cell = verifier.record(request)
    show(cell)
    log.info(f"results: {options.out}; probe log: {request.log_file}")
    verifier.after(request)
    if results.is_unexpected(cell.verdict):
        msg = f"{cell.image.ref}: {cell.verdict.value} ({cell.verdict_reason})"
        raise RunFailed(msg, hint="see the table above and the probe log")
    return 0


def _detail(stage: StageResult) -> str:
    if stage.failure_class:
        return (f"[bold]{escape(stage.failure_class)}[/]: {escape(stage.reason or '')}\n"
                f"[dim]hint: {escape(stage.hint or '')}[/]")
    if stage.name == "import":
        modules = stage.evidence.get("modules", {})
        return escape(", ".join(f"{k} {v}" for k, v in modules.items()))
    return escape(stage.reason or "")


def show(cell: CellResult) -> None:
    from rich.table import Table

    from ..results.notes import measured, warnings

    table = Table(title=escape(f"{cell.cell_id}  ({cell.image.ref})"), show_lines=False)
    for column in ("stage", "status", "seconds", "detail"):
        table.add_column(column, overflow="fold")
    for stage in cell.stages:
        carried = " (carried)" if stage.carried_from else ""   # ran on the build runner: verify/carry.py
        table.add_row(escape(stage.name), log.MARK.get(stage.status.value, "?") + " " + stage.status.value + carried,
                      f"{stage.duration_s:.1f}", _detail(stage))
    log.console.print(table)
    for name, text in warnings(cell):
        log.console.print(f"[yellow]warning from {escape(name)}:[/] {escape(text)}")
    origin = next((s.carried_from for s in cell.stages if s.carried_from), None)
    if origin:
        log.console.print(f"[dim]CPU stages {escape(origin)}[/]")
    for what, value in measured(cell):
        log.console.print(f"[dim]{escape(what)}: {escape(value)}[/]")
    total = sum(s.duration_s for s in cell.stages)
    log.console.print(f"verdict: [bold]{cell.verdict.value}[/] - {escape(cell.verdict_reason or '')} "
                      f"[dim](stages {total:.0f}s)[/]")
