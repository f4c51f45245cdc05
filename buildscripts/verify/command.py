"""`nox -s verify -- IMAGE | --host | --lxc CTID | --lxc-name NAME`: run the verification ladder inside any
image, in a Python environment on this machine, or in place in a running LXC container; classify failures,
print the verdict and save the results, sealed with this verifier's key (trust/keys.py). `IMAGE` as
`REPO@sha256:…` (or with `--pull`) is pulled by digest first and recorded as that digest: what a GPU job of
a staging build does (verify/pulled.py)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .. import arguments, disk, engine, log, results
from ..errors import ConfigError, RunFailed
from ..lxc.privileged import why_unsealed
from ..lxc.target import Target, cell_labels
from ..matrix import Matrix, load, platforms
from ..matrix.schema import LABEL_PREFIX, MAX_TIMEOUT_S, Profile
from ..matrix.spellings import arch_problem
from ..refs import FORMS, reference_problem
from ..registry import references
from ..results import BuildResult, CellResult, ImageInfo, RunResults, StageResult, Status, cell_record
from ..results.notes import measured, warnings
from ..trust import keys, seal, sources, verdicts
from ..trust.seen import History
from ..workspace import PROJECT_ROOT, Workspace, checked_name, path_argument, path_text
from . import gpus, identity, provision, pulled, reuse, tp
from .container import KEEP_ENV
from .host import HostRunner
from .lxcrunner import LxcRunner
from .one_image import axes_from_labels, check_image, image_facts, matrix_cell
from .plan import DEFAULT_ARCHS, MIN_STAGE_TIMEOUT, Plan, lane_from_labels, stage_timeout, stages_argument
from .runner import Options, verify

MAX_STAGE_TIMEOUT = float(MAX_TIMEOUT_S)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="nox -s verify --", description=__doc__)
    ap.add_argument("image", nargs="?", help="image reference or id (any image with a python3); REPO@sha256:… is "
                                             "pulled by that digest first")
    ap.add_argument("--pull", action="store_true",
                    help="pull IMAGE by digest before verifying it, and refuse a tag (what CI's GPU jobs pass)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--host", action="store_true", help="verify a Python environment here, not an image")
    where.add_argument("--lxc", metavar="CTID", help="verify in place in a running Proxmox container (pct)")
    where.add_argument("--lxc-name", metavar="NAME", help="verify in place in a running LXC container (lxc-attach)")
    ap.add_argument("--lxc-path", type=path_argument, default=None,
                    help="with --lxc-name: LXC's container folder when it is not /var/lib/lxc (lxc-attach -P)")
    ap.add_argument("--python", type=path_text,
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
    ap.add_argument("--out", type=path_argument, help="results JSON (default: runs/RUN_ID/results.json)")
    arguments.add_verification(ap)
    ap.add_argument("--shm-size", default=gpus.SHM_SIZE, type=gpus.shm_size_argument,
                    help=f"/dev/shm of the verification container, as docker's --shm-size (default {gpus.SHM_SIZE}); "
                         "64m is Docker's default")
    ap.add_argument("--trust-key", action="append", default=[], type=path_argument, metavar="PUB",
                    help="with --lxc: also trust the source image's verdicts signed by this public key")
    a = ap.parse_args(list(argv))
    in_place = a.host or a.lxc is not None or a.lxc_name is not None
    if not in_place and not a.image:
        ap.error("give an IMAGE, or --host / --lxc CTID / --lxc-name NAME to verify in place")
    if in_place and a.image:
        ap.error("give an IMAGE or a place to verify in (--host, --lxc, --lxc-name), not both")
    if in_place and a.pull:
        ap.error("--pull goes with an IMAGE by digest (REPO@sha256:…), not with --host or --lxc")
    check_arguments(a)
    return a


def check_arguments(a: argparse.Namespace) -> None:
    """Every argument problem is found here, before the matrix is read or the engine contacted."""
    if a.run_id is not None:
        checked_name(a.run_id, "--run-id")
    if a.lxc is not None:
        Target.pct(a.lxc, flag="--lxc")
    if a.lxc_name is not None:
        Target.named(a.lxc_name, flag="--lxc-name")
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
    stages_argument(a.stages)
    if a.stage_timeout is not None and not (0 < a.stage_timeout <= MAX_STAGE_TIMEOUT):  # NaN compares False
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


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws, env = ws or Workspace.at(), env or {}
    a = parse(argv)
    run_id = a.run_id or time.strftime("%Y%m%d-%H%M%S-verify")
    run_dir = ws.run_dir(run_id)
    out = a.out or run_dir / "results.json"
    # Before the ladder (minutes to an hour): its results must have somewhere to go.
    disk.check_writable(out, "--out", "pass --out PATH of a results file in a folder you can write")
    archs = a.archs.split(",") if a.archs else None
    stages = stages_argument(a.stages)
    started = results.now()
    matrix = load(ws.matrix)  # read once: the profile, and the cell an image or container belongs to
    profile = matrix.profile(a.profile)
    unsealed = _why_unsealed(a, env)
    # the key that seals the record: a bad one is said now, not after the ladder; none is read for a run that
    # vouches for nothing (host mode with no boundary between the code under test and the keys)
    signing = None if unsealed else keys.signing_key(env)
    if a.host:
        here = matrix.spec.targets(_host_platform()).also_audit
        cell, shared = _verify_host(a, run_dir, run_id, archs, stages, profile, env, here)
        unsealed = unsealed or shared
    elif a.lxc is not None or a.lxc_name is not None:
        cell = _verify_lxc(a, run_dir, run_id, archs, stages, profile, matrix)
    else:
        cell = _verify_image(a, run_dir, run_id, archs, stages, profile, matrix, env)
    run = RunResults(run_id=run_id, started=started, finished=results.now(), matrix=str(ws.matrix),
                     matrix_digest=results.matrix_digest(matrix.spec))
    named = matrix_cell(matrix, cell.cell_id)   # a record of a matrix cell counts while its definition holds
    cell = seal.record(run, cell, None if unsealed else signing, out, definition=named.definition if named else None)
    if unsealed:
        log.warn(f"{cell.cell_id}: the record is not sealed, so it vouches for nothing: {unsealed}")
    if cell.image.subject:   # verified by digest: the verdict of each GPU arch, signed for the promote job
        verdicts.sign_verdicts(cell, out.parent, image=cell.image.subject, matrix=ws.matrix,
                               probe=reuse.probe_digest(), env=env)
    show(cell)
    log.info(f"results: {out}; probe log: {run_dir / cell.cell_id / 'probe.log'}")
    if a.lxc is not None or a.lxc_name is not None:
        _say_source(_lxc_target(a), keys.trusted(ws.root, env, a.trust_key), env)
    if results.is_unexpected(cell.verdict):
        msg = f"{cell.image.ref}: {cell.verdict.value} ({cell.verdict_reason})"
        raise RunFailed(msg, hint="see the table above and the probe log")
    return 0


def _verify_image(a: argparse.Namespace, run_dir: Path, run_id: str, archs: list[str] | None,
                  stages: list[str] | None, profile: Profile, matrix: Matrix, env: Mapping[str, str]) -> CellResult:
    client = engine.connect()
    source = (pulled.pull(client, a.image, env, log_file=run_dir / "pull.log")
              if a.pull or references.by_digest(a.image) else None)
    image = source.id if source and source.id else a.image   # by id from here: nothing can move under it
    facts = image_facts(client, image)   # once: the checks here, the plan and the record use them
    labels = facts.labels
    # The image's cell label names its log folder: an image is input too, and may carry any text there.
    checked_name(labels.get(f"{LABEL_PREFIX}.cell", "adhoc"), f"the cell label of {a.image}")
    # a tensor-parallel profile spans every GPU of the runner
    given = provision.find(client, a.gpu, all_gpus=tp.wants_all_gpus(profile), shm_size=a.shm_size)
    provision.say(given.discovery)
    # --cell-id naming a matrix cell: verified as that cell (its axes, targets, lane and expectation), e.g. an
    # image built elsewhere for it; its label may name another, and the gate compares axes with the matrix.
    named = matrix_cell(matrix, a.cell_id) if a.cell_id else None
    cell = check_image(client, image, logs=run_dir, cell=named, matrix=matrix, archs=archs, lane_cuda=a.lane_cuda,
                       stages=stages, stage_timeout=stage_timeout(profile, a.stage_timeout), run_id=run_id,
                       options=given.options, handed=given.handed, cut_problem=given.cut_problem, profile=profile,
                       profile_name=a.profile, keep=env.get(KEEP_ENV) == "1", pulled=source, facts=facts)
    return cell.model_copy(update={"cell_id": a.cell_id or labels.get(f"{LABEL_PREFIX}.cell", "adhoc")})


def _why_unsealed(a: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """Why this run's record must not be sealed (verify/identity.py), or None, as far as it is known before the
    run. Host mode not as root is refused: there is no other identity to give the code under test, which could
    read, or plant, the keys of the user it runs as."""
    del env
    if a.host:
        if not identity.is_root():
            msg = (f"verify --host as uid {os.geteuid()} would run the code under test as this user, who can read "
                   "this user's keys, and plant one where a verifier would later take it")
            raise ConfigError(msg, hint="run it as root (the code under test then runs as an identity of its own), "
                                        "or verify an image in a container (`nox -s verify -- IMAGE`)")
        return identity.why_unsealed(a.python or sys.executable)
    if a.lxc is not None or a.lxc_name is not None:
        return why_unsealed(_lxc_target(a))
    return None


def _verify_host(a: argparse.Namespace, run_dir: Path, run_id: str, archs: list[str] | None,
                 stages: list[str] | None, profile: Profile, env: Mapping[str, str],
                 also_archs: Sequence[str]) -> tuple[CellResult, str | None]:
    """The record of a run as an identity of its own (root only: `_why_unsealed`), and why it must not be
    sealed after all when the interpreter under test shares an import folder with the verifier."""
    cell_id = checked_name(a.cell_id or "host", "cell id")
    python = a.python or sys.executable
    plan = Plan.make(archs=archs or DEFAULT_ARCHS, lane_cuda=a.lane_cuda, stages=stages,
                     stage_timeout=stage_timeout(profile, a.stage_timeout), profile=profile, profile_name=a.profile,
                     also_archs=also_archs)
    workdir, options = run_dir / cell_id / "work", Options(
        plan=plan, log_file=run_dir / cell_id / "probe.log", run_id=run_id, cell_id=cell_id,
        handed=gpus.on_host(_host_gpus(), {**os.environ, **env}))
    workdir.mkdir(parents=True, exist_ok=True)
    problem = identity.unreachable({"the interpreter": Path(python), "the probe": PROJECT_ROOT / "buildscripts",
                                    "the run's folder": workdir})
    if problem:
        msg = f"the code under test runs as an identity of its own, which cannot reach {problem}"
        raise ConfigError(msg, hint="let others read and pass into it (chmod o+rX), or place it elsewhere")
    with identity.sandbox(workdir) as box:   # every process of it is gone when this ends
        runner = HostRunner(python, env, workdir, box)
        shared = identity.shared_with_verifier(runner.import_path())
        found = verify(runner, options)
    cell = cell_record(cell_id, targets=plan.archs, build=BuildResult(status=Status.PASSED, reason="existing image"),
                       image=ImageInfo(ref="host", id=f"host:{python}"), stages=found, run_id=run_id)
    return cell, shared


def _host_platform() -> str:
    """The platform of this host (in place, host and LXC runs are this machine's platform)."""
    here = platforms.host()
    return here.oci if here else platforms.DEFAULT


def _verify_lxc(a: argparse.Namespace, run_dir: Path, run_id: str, archs: list[str] | None,
                stages: list[str] | None, profile: Profile, matrix: Matrix) -> CellResult:
    """In place, in a running LXC container: its own Python, the environment a login shell has there, its GPU
    when the container has one. The cell's coordinates come from /etc/sglang-images/cell.json, which every
    image of this project carries (and an export keeps)."""
    target = _lxc_target(a)
    labels = cell_labels(target)
    label_lane, label_archs = lane_from_labels(labels)
    plan = Plan.make(archs=archs or label_archs or DEFAULT_ARCHS, lane_cuda=a.lane_cuda or label_lane,
                     stages=stages, stage_timeout=stage_timeout(profile, a.stage_timeout), profile=profile,
                     profile_name=a.profile, also_archs=matrix.spec.targets(_host_platform()).also_audit)
    image_cell = labels.get(f"{LABEL_PREFIX}.cell", "")
    # Its own row in reports (a run in place is not a run of the image), named after the image's cell.
    cell_id = checked_name(a.cell_id or f"{image_cell or 'lxc'}@{target.tool}-{target.ident}", "cell id")
    cell = matrix_cell(matrix, image_cell)   # the cell's declared expected failure applies in place too
    found = verify(LxcRunner(target, a.python or "python3"),
                   Options(plan=plan, log_file=run_dir / cell_id / "probe.log", run_id=run_id, cell_id=cell_id,
                           handed=gpus.on_host(_host_gpus(), {})))
    where = f"lxc:{target.tool}:{target.ident}"
    return cell_record(cell_id, axes=cell.axes() if cell else axes_from_labels(labels), targets=plan.archs,
                       expected=cell.expected_failure() if cell else None,
                       build=BuildResult(status=Status.PASSED, reason=f"in place: {target.shown}"),
                       image=ImageInfo(ref=where, id=where, labels=labels), stages=found, run_id=run_id)


def _lxc_target(a: argparse.Namespace) -> Target:
    return Target.pct(a.lxc) if a.lxc is not None else Target.named(a.lxc_name, lxc_path=a.lxc_path)


def _say_source(target: Target, trusted: Sequence[keys.PublicKey], env: Mapping[str, str]) -> None:
    """The signed verdict of the image the container records as its source (its config, on the host): a run
    in place verifies the container as it is now, the verdict says what the image it came from earned."""
    try:
        config: str | None = target.config_path().read_text(errors="replace")
    except OSError:
        config = None
    status, detail = sources.source_verdict(config, trusted, env, History.at(env))
    if status == "pass":
        log.info(f"source image: {detail}")
    else:
        log.warn(f"source image: {detail}")


def _host_gpus() -> gpus.Discovery:
    """This machine's GPUs (host and LXC mode: the probe runs here, with what the machine has)."""
    found = gpus.discover(None)
    provision.say(found)
    return found


def _detail(stage: StageResult) -> str:
    if stage.failure_class:
        return (f"[bold]{escape(stage.failure_class)}[/]: {escape(stage.reason or '')}\n"
                f"[dim]hint: {escape(stage.hint or '')}[/]")
    if stage.name == "import":
        modules = stage.evidence.get("modules", {})
        return escape(", ".join(f"{k} {v}" for k, v in modules.items()))
    return escape(stage.reason or "")


def show(cell: CellResult) -> None:
    table = Table(title=escape(f"{cell.cell_id}  ({cell.image.ref})"), show_lines=False)
    for column in ("stage", "status", "seconds", "detail"):
        table.add_column(column, overflow="fold")
    for stage in cell.stages:
        table.add_row(escape(stage.name), log.MARK.get(stage.status.value, "?") + " " + stage.status.value,
                      f"{stage.duration_s:.1f}", _detail(stage))
    log.console.print(table)
    for name, text in warnings(cell):
        log.console.print(f"[yellow]warning from {escape(name)}:[/] {escape(text)}")
    for what, value in measured(cell):
        log.console.print(f"[dim]{escape(what)}: {escape(value)}[/]")
    total = sum(s.duration_s for s in cell.stages)
    log.console.print(f"verdict: [bold]{cell.verdict.value}[/] - {escape(cell.verdict_reason or '')} "
                      f"[dim](stages {total:.0f}s)[/]")
