"""Stage registry, ordering, prerequisites and the result format of the probe (stdlib only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

RESULT_PREFIX = "@@probe-result "
# The server hand-over (serving.py): the probe names its server's port and waits; the host observes it.
SERVE_PREFIX = "@@probe-serve "             # {"port", "pid", "host", "stop_file", "log"}
SERVER_EXIT_PREFIX = "@@probe-server-exit "  # {"code"}: the server died while the host was watching
PASSED, FAILED, SKIPPED, ABORTED = "passed", "failed", "skipped", "aborted"


@dataclass
class Context:
    """What every stage may read. `results` holds the outcomes of stages run so far, by name."""

    archs: List[str]                      # target archs, e.g. ["sm_90a", "sm_100a", "sm_120a"]
    # Archs the image is not built for whose support is still audited and compiled for: what they lack
    # is a warning, never a failure (e.g. sm_103a for B300, sm_121a for GB10).
    also_archs: List[str] = field(default_factory=list)
    lane_cuda: Optional[str] = None       # CUDA major.minor the torch lane promises, e.g. "13.0"
    mode: str = "container"               # "container", "host" or "lxc": where the probe runs
    workdir: str = "/tmp/probe"
    stage_timeout: float = 900.0
    server_args: List[str] = field(default_factory=list)
    server_env: Dict[str, str] = field(default_factory=dict)
    server_profile: str = "default"       # the profile's name: baked caches are claimed per profile
    server_skip: Optional[str] = None     # why the host will not have this profile's server started here
    model_path: Optional[str] = None      # a user model, served as it is
    model_dir: Optional[str] = None       # the host's tiny model (weights, config): the probe adds a tokenizer
    stop_file: Optional[str] = None       # the host creates it when it has observed the server
    cut_network: bool = False             # start the server with no route out (netcut.py)
    serve_host: str = "127.0.0.1"         # the address the server listens on
    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    gpu: Optional[Dict[str, Any]] = None  # filled by gpu-visible: {"name", "arch", "driver", ...}
    # Set when a stage failed while a later one ran beside it (run_all): that one stops early (aborted).
    halt: threading.Event = field(default_factory=threading.Event, repr=False)
    # Files that changed in the image's baked caches while one of kernel-smoke's checks ran: its own warning names
    # them, and the server's warm start, judged at its turn (its settle), leaves them out where the server's
    # session ran no compiler.
    compiled_by_checks: Set[str] = field(default_factory=set, repr=False)

    def every_arch(self) -> List[str]:
        """The targets, then the archs only audited (each once)."""
        return list(dict.fromkeys([*self.archs, *self.also_archs]))

    def passed(self, name: str) -> bool:
        return self.results.get(name, {}).get("status") == PASSED


class StageFailed(Exception):
    """Raised by a stage to fail with evidence and a log excerpt."""

    def __init__(self, reason: str, evidence: Optional[Dict[str, Any]] = None, log: str = "") -> None:
        super().__init__(reason)
        self.reason, self.evidence, self.log = reason, evidence or {}, log


class StageSkipped(Exception):
    """Raised by a stage that cannot run here (e.g. needs a GPU); never counts as passed."""


class StageStopped(Exception):
    """Raised by a stage stopped early because a stage beside it failed: aborted, with what it had seen."""

    def __init__(self, reason: str, evidence: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(reason)
        self.evidence = evidence or {}


@dataclass
class Stage:
    name: str
    func: Callable[[Context], Dict[str, Any]]  # returns evidence; raises StageFailed/StageSkipped
    needs: Tuple[str, ...] = ()
    gpu: bool = False
    # Run by run_all on a passed result at the stage's turn, when every stage before it, and any it ran beside,
    # has its result: what the stage judges from their findings (the server's warm start, serving.py).
    settle: Optional[Callable[["Context", Dict[str, Any]], None]] = None


REGISTRY: Dict[str, Stage] = {}
ORDER = ["facts", "import", "flavour", "arch-audit", "toolchain", "jit-compile",
         "gpu-visible", "kernel-smoke", "nccl-allreduce", "server", "first-generation"]


StageFunc = Callable[[Context], Dict[str, Any]]


def stage(name: str, needs: Tuple[str, ...] = (), gpu: bool = False,
          settle: Optional[Callable[[Context, Dict[str, Any]], None]] = None) -> Callable[[StageFunc], StageFunc]:
    def register(func: StageFunc) -> StageFunc:
        REGISTRY[name] = Stage(name, func, needs, gpu, settle)
        return func
    return register


def run_stage(ctx: Context, st: Stage) -> Dict[str, Any]:
    result: Dict[str, Any] = {"name": st.name, "status": PASSED, "duration_s": 0.0, "evidence": {},
                              "where": f"{ctx.mode} ({'gpu' if ctx.gpu else 'cpu'})"}
    # No GPU here (gpu-visible skipped or not run): every GPU stage is SKIPPED with that reason,
    # before prerequisites are looked at; a *failed* gpu-visible aborts them like any prerequisite.
    if st.gpu and not ctx.gpu and ctx.results.get("gpu-visible", {}).get("status") in (None, SKIPPED):
        why = ctx.results.get("gpu-visible", {}).get("reason") or "no GPU visible"
        result.update(status=SKIPPED, reason=f"needs a GPU: {why}")
        return result
    missing = [n for n in st.needs if not ctx.passed(n)]
    if missing:
        result.update(status=ABORTED, reason="prerequisite did not pass: " + ", ".join(missing))
        return result
    started = time.monotonic()
    try:
        result["evidence"] = st.func(ctx) or {}
    except StageSkipped as exc:
        result.update(status=SKIPPED, reason=str(exc))
    except StageStopped as exc:
        result.update(status=ABORTED, reason=str(exc), evidence=exc.evidence)
    except StageFailed as exc:
        result.update(status=FAILED, reason=exc.reason, evidence=exc.evidence, log_excerpt=exc.log[-6000:])
    except Exception as exc:  # a bug or surprise inside the stage is a failed stage, not a crashed probe
        result.update(_crashed(exc))
    result["duration_s"] = round(time.monotonic() - started, 2)
    if ctx.gpu and (st.gpu or st.name == "gpu-visible"):  # gpu-visible found it: it ran on it too
        result["where"] = f"{ctx.mode} (gpu)"
        result.update(gpu=ctx.gpu.get("name"), arch=ctx.gpu.get("arch"))
    return result


def _crashed(exc: Exception) -> Dict[str, Any]:
    """What a result says of an exception nobody meant to raise (called in its `except`: the traceback is its)."""
    return {"status": FAILED, "reason": f"{type(exc).__name__}: {exc}", "log_excerpt": traceback.format_exc()[-6000:]}


def run_all(ctx: Context, names: List[str], out: Optional[str] = None) -> List[Dict[str, Any]]:
    """The stages in ORDER, their results emitted in that order (the host accepts no other); the server may run
    beside the GPU checks before it (beside_server)."""
    results: List[Dict[str, Any]] = []
    planned = [n for n in ORDER if n in names]
    beside: Dict[str, "Beside"] = {}
    for name in planned:
        if name == beside_server(ctx, planned):
            beside["server"] = Beside(ctx, REGISTRY["server"], name)
        res = beside.pop(name).result() if name in beside else run_stage(ctx, REGISTRY[name])
        settle = REGISTRY[name].settle
        if settle is not None and res["status"] == PASSED:
            try:
                settle(ctx, res)
            except Exception as exc:  # as in run_stage: a bug in a judgement fails the stage, not the probe
                res.update(_crashed(exc))
        if res["status"] == FAILED and beside:
            ctx.halt.set()   # the verdict is lost: the stage beside stops rather than spend the GPU's time
        ctx.results[name] = res
        results.append(res)
        emit(res)
        if out:
            with open(out, "w") as fh:
                json.dump(results, fh, indent=1)
    return results


# The server's start is the longest GPU stage and reads no other GPU stage's result: with one GPU it starts when
# kernel-smoke does and runs beside kernel-smoke and nccl-allreduce (their ops are small; the server's KV pool is
# bounded by the profile's --max-total-tokens). A failure of either stops it (aborted); a failure of the server
# lets them finish, so the first failure in ORDER, and its class, is the one a run one stage at a time reports.
# With several GPUs the stages run one after the other: the all-reduce and a tensor-parallel server would share
# NCCL's transports and /dev/shm, and what one measured would be the other's.
SERVER_BESIDE = ("kernel-smoke", "nccl-allreduce")


def beside_server(ctx: Context, planned: List[str]) -> Optional[str]:
    """The planned stage the server starts beside, or None (it runs in its turn)."""
    if "server" not in planned or not ctx.gpu or int(ctx.gpu.get("count") or 1) > 1:
        return None
    return next((n for n in SERVER_BESIDE if n in planned), None)


class Beside:
    """One stage run in a thread while the stages before it run; its result is taken in its turn."""

    def __init__(self, ctx: Context, st: Stage, started_with: str) -> None:
        self._result: Dict[str, Any] = {}
        self.started_with = started_with
        self._thread = threading.Thread(target=self._run, args=(ctx, st), name=f"beside-{st.name}", daemon=True)
        self._thread.start()

    def _run(self, ctx: Context, st: Stage) -> None:
        self._result = run_stage(ctx, st)

    def result(self) -> Dict[str, Any]:
        self._thread.join()
        self._result.setdefault("evidence", {})["started_beside"] = self.started_with
        return self._result


_EMITTING = threading.Lock()   # a stage beside another prints too: whole lines, never interleaved


def emit(result: Dict[str, Any], prefix: str = RESULT_PREFIX) -> None:
    line = prefix + json.dumps(result, default=str) + "\n"
    with _EMITTING:
        sys.stdout.write(line)
        sys.stdout.flush()


def sh(argv: List[str], timeout: float, env: Optional[Dict[str, str]] = None,
       cwd: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
    """Run a command with a timeout; output (stdout+stderr) in .stdout. Never raises on exit codes."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=timeout, env=full_env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        reason = f"timed out after {timeout:.0f}s: {' '.join(argv)[:200]}"
        raise StageFailed(reason, log=out) from None
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, stdout=f"{argv[0]}: not found")


def side_by_side(jobs: Dict[str, Callable[[], Any]], most: Optional[int] = None) -> Dict[str, Any]:
    """Each job's result by name, the jobs run in threads side by side (`most` at a time: all by default).
    The jobs wait on compiler processes, so threads suffice; an exception in a job is raised here."""
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=most or len(jobs)) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def python_snippet(code: str, timeout: float,
                   env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """Run `code` in a fresh interpreter of the image (so one crash cannot take the probe down)."""
    return sh([sys.executable, "-c", code], timeout=timeout, env=env)
