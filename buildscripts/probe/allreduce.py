"""The nccl-allreduce stage: one process per visible GPU, an NCCL all-reduce of a known tensor, the exact
sum checked on every rank (stdlib only; the ranks run the image's own torch and the NCCL it ships).

A server with tensor parallelism fails in containers in ways one GPU never shows (a /dev/shm too small
for NCCL's segments, P2P/IPC refused between GPUs); this shows them in seconds, before the server, with
NCCL's own words (NCCL_DEBUG=WARN) in the log excerpt for the classifier. The ranks meet through a file in
the work folder and NCCL bootstraps over loopback (the server runs with no route out, so nothing here may
need one). Like the server in host and LXC mode (netcut.py), the ranks run in a network namespace of their
own with loopback up, where the probe may make one: a container whose own loopback is down (an LXC
container nothing brought `lo` up in) then fails neither stage; where none can be made and loopback is down
here, the failure says so (data/failures.yaml: no-loopback). The whole stage has one deadline: a rank that
hangs is killed with the others, and the stage
fails as a hang. With one GPU it runs world size 1: NCCL loads and makes a communicator, nothing more,
and its evidence says so. The pure parts (expected, judge) are unit-tested, the rank program on CPU with
gloo (which says nothing about NCCL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from . import core, netcut, shm, threads

T = TypeVar("T")

JSON_PREFIX = "@@json "
ELEMENTS = 1 << 20          # 4 MiB of float32: past NCCL's small-message paths; sums of 8 ranks stay exact
BACKEND_ENV = "PROBE_ALLREDUCE_BACKEND"   # "gloo" runs the rank program on CPU (tests only)
HANG = "nccl-allreduce hung"              # the words of a timed-out run (data/failures.yaml: nccl-hang)
NO_LOOPBACK = "the loopback interface (lo) is down where the ranks ran"   # data/failures.yaml: no-loopback
# NCCL's own words on failure, and loopback for its bootstrap, unless the caller chose otherwise.
NCCL_DEFAULTS = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo"}

RANK_PROGRAM = r"""
import datetime, json, os, sys
rank, world = int(os.environ["PROBE_RANK"]), int(os.environ["PROBE_WORLD"])
backend, n = os.environ.get("PROBE_ALLREDUCE_BACKEND", "nccl"), int(os.environ["PROBE_ELEMENTS"])
out = {"rank": rank, "world_size": world, "backend": backend}
try:
    import torch
    import torch.distributed as dist
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    else:
        device = torch.device("cpu")
    out["torch"] = torch.__version__
    dist.init_process_group(backend, init_method="file://" + os.environ["PROBE_RENDEZVOUS"], rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=float(os.environ["PROBE_TIMEOUT"])))
    x = torch.arange(n, dtype=torch.float32, device=device) + rank
    dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    # Every element is world * i + (0 + 1 + ... + world-1): integers below 2**24, so float32 holds them exactly.
    expected = torch.arange(n, dtype=torch.float32, device=device) * world + world * (world - 1) // 2
    wrong = int((x != expected).sum())
    out.update(elements=n, wrong=wrong, first=float(x[0]), last=float(x[-1]), ok=wrong == 0)
    dist.destroy_process_group()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
print("@@json " + json.dumps(out), flush=True)
sys.exit(0 if out.get("ok") else 1)
"""


def expected(world: int, index: int) -> float:
    """The value every rank must hold at `index` after the all-reduce (rank r contributed index + r)."""
    return float(world * index + world * (world - 1) // 2)


def _result(output: str) -> Optional[Dict[str, Any]]:
    lines = [ln for ln in output.splitlines() if ln.startswith(JSON_PREFIX)]
    return json.loads(lines[-1][len(JSON_PREFIX):]) if lines else None


def judge(ranks: List[Dict[str, Any]], world: int, elements: int = ELEMENTS) -> Optional[str]:
    """Why the all-reduce failed, from every rank's report, or None when every rank holds the exact sum."""
    missing = [r["rank"] for r in ranks if r.get("result") is None]
    if missing:
        return f"rank(s) {', '.join(map(str, missing))} printed no result (exit codes " \
               f"{', '.join(str(r.get('exit_code')) for r in ranks if r.get('result') is None)})"
    errors = [f"rank {r['rank']}: {r['result']['error']}" for r in ranks if r["result"].get("error")]
    if errors:
        return errors[0]
    for r in ranks:
        got = r["result"]
        if got.get("wrong") or got.get("first") != expected(world, 0) \
                or got.get("last") != expected(world, elements - 1):
            return (f"rank {r['rank']} holds a wrong sum: {got.get('wrong')} of {elements} elements differ "
                    f"(first {got.get('first')}, expected {expected(world, 0)})")
    return None


def in_own_network(start: Callable[[], T]) -> Tuple[T, Dict[str, Any]]:
    """start() in a thread that first moves into a fresh network namespace with loopback up (netcut.cut, as
    the server's): the processes it starts stay in that namespace while this process does not move. Where none
    can be made (no CAP_SYS_ADMIN, as in a default Docker container), start() runs in this namespace. Also:
    (what happened, whether loopback is up where start() ran)."""

    def run() -> Tuple[T, Dict[str, Any]]:
        try:
            why = netcut.cut()
        except OSError as exc:   # a namespace of its own, but its loopback stayed down
            why = f"loopback could not be brought up in a namespace of its own: {exc}"
        network: Dict[str, Any] = {"own_namespace": why is None, "loopback_up": netcut.loopback_up()}
        if why:
            network["why_not"] = why
        return start(), network

    return threads.run_in_thread(run, "allreduce-netns")


def run_ranks(world: int, workdir: str, timeout: float, env: Dict[str, str], elements: int = ELEMENTS,
              program: str = RANK_PROGRAM, own_network: bool = True) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Start `world` rank processes at once (in a network namespace of their own when `own_network` and the
    probe can make one), wait for all of them until `timeout`, kill what is left. Each entry: rank, exit_code
    (None when killed), seconds, output, result (its JSON line or None); and the network they ran in."""
    os.makedirs(workdir, exist_ok=True)
    rendezvous = os.path.join(workdir, "allreduce-rendezvous")
    if os.path.exists(rendezvous):
        os.remove(rendezvous)   # a stale file from an earlier run would join the ranks to nobody
    started = time.monotonic()

    def start() -> List[Any]:
        procs = []
        for rank in range(world):
            rank_env = dict(os.environ, **NCCL_DEFAULTS)
            rank_env.update(env)
            rank_env.update(PROBE_RANK=str(rank), PROBE_WORLD=str(world), PROBE_ELEMENTS=str(elements),
                            PROBE_RENDEZVOUS=rendezvous, PROBE_TIMEOUT=str(max(1.0, timeout - 5)),
                            PYTHONUNBUFFERED="1")
            log = open(os.path.join(workdir, f"allreduce-rank{rank}.log"), "w+")  # noqa: SIM115 - closed below
            procs.append((rank, log, subprocess.Popen([sys.executable, "-c", program], stdout=log,
                                                      stderr=subprocess.STDOUT, env=rank_env,
                                                      start_new_session=True)))
        return procs

    if own_network:
        procs, network = in_own_network(start)
    else:
        procs = start()
        network = {"own_namespace": False, "loopback_up": netcut.loopback_up(), "why_not": "not asked"}
    ranks: List[Dict[str, Any]] = []
    for rank, _, proc in procs:
        try:
            code: Optional[int] = proc.wait(timeout=max(0.1, started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        entry: Dict[str, Any] = {"rank": rank, "exit_code": code, "seconds": round(time.monotonic() - started, 2)}
        ranks.append(entry)
    for (_, log, proc), done in [(procs[i], ranks[i]) for i in range(len(procs))]:  # the image's Python may be <3.10
        if proc.poll() is None:
            _kill(proc)
        log.seek(0)
        done["output"] = log.read()
        log.close()
        done["result"] = _result(done["output"])
    return ranks, network


def _kill(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait(timeout=10)


def loopback_note(network: Dict[str, Any]) -> str:
    """What a failure adds when NCCL had no loopback to bootstrap over ("" when it had one)."""
    if network.get("loopback_up") is not False:
        return ""
    why = network.get("why_not")
    return f"; {NO_LOOPBACK}" + (f" (and no network namespace of their own could be made: {why})" if why else "")


def _excerpt(ranks: List[Dict[str, Any]]) -> str:
    return "\n".join(f"== rank {r['rank']} (exit {r['exit_code']})\n{r['output'][-3000:]}" for r in ranks)


@core.stage("nccl-allreduce", needs=("gpu-visible",), gpu=True)
def nccl_allreduce(ctx: core.Context) -> Dict[str, Any]:
    world = int((ctx.gpu or {}).get("count") or 1)
    timeout = min(ctx.stage_timeout, 300.0)
    env = {k: v for k, v in ctx.server_env.items() if k.startswith("NCCL_")}  # the server's NCCL settings too
    ranks, network = run_ranks(world, os.path.join(ctx.workdir, "allreduce"), timeout, env)
    shared = shm.measure()
    evidence: Dict[str, Any] = {
        "world_size": world, "elements": ELEMENTS, "shm": shared, "env": {**NCCL_DEFAULTS, **env},
        "network": network,
        "ranks": [{k: v for k, v in r.items() if k != "output"} for r in ranks],
        "what_it_shows": ("NCCL init and a trivial all-reduce on one GPU (no transport between GPUs)"
                          if world == 1 else f"an NCCL all-reduce across {world} GPUs, exact on every rank")}
    small = shm.warning(shared, ctx.mode) if world > 1 else None
    if small:
        evidence["warnings"] = [small]
    hung = [r["rank"] for r in ranks if r["exit_code"] is None]
    if hung:
        hang = (f"{HANG}: rank(s) {', '.join(map(str, hung))} of {world} did not finish within {timeout:.0f}s "
                "and were killed")
        raise core.StageFailed(hang + loopback_note(network), evidence, _excerpt(ranks))
    why = judge(ranks, world)
    if why:
        msg = f"NCCL all-reduce across {world} GPU(s) failed: {why}"
        raise core.StageFailed(msg + loopback_note(network), evidence, _excerpt(ranks))
    first = ranks[0]["result"]
    evidence.update(nccl=first.get("nccl"), torch=first.get("torch"), backend=first.get("backend"))
    if first.get("backend") != "nccl":   # tests run the program with gloo: never a pass for NCCL
        msg = f"the ranks ran {first.get('backend')}, not NCCL: this says nothing about NCCL"
        raise core.StageSkipped(msg)
    return evidence
