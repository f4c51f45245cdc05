"""The GPU stages around a real server: server, first-generation (stdlib only).

The host judges both; the probe only starts and stops the server. `server` copies the host's tiny model
(weights and config.json, fresh every run) into its work folder, adds the tokenizer, starts
`python -m sglang.launch_server` on it and hands over: one line names the port, the server's process
and the stop file (core.SERVE_PREFIX). Then it waits. The host polls readiness through that port, sends
the first generation and compares the tokens with its own reference decode; once done it creates the
stop file. The probe then stops the server and reports what only it sees: the server's log and its last
lines, whether warm caches were used, how cleanly the server stopped. A server that exits while the host
watches is announced at once (core.SERVER_EXIT_PREFIX), so the host need not wait for its deadline.
`first-generation` is made by the host from the server's reply: the probe records it as skipped.

A probe run alone (no stop file, nobody to observe the server) skips both stages: nothing the probe
could print about a server it judged itself would count. The pure decision function
(unrecognized_flags) is unit-tested on its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from . import core, server, warmcheck

HERE = os.path.dirname(os.path.abspath(__file__))
NETCUT = os.path.join(HERE, "netcut.py")
JIT_MARKERS = re.compile(r"ninja|nvcc|Compiling|JIT|jit_kernel", re.I)
UNKNOWN_FLAGS = re.compile(r"error: unrecognized arguments: (.+)")
# What SGLang logs once its warm-up request passed (0.5.10 to 0.5.23): the end of the warm-cache watch's
# window ("nothing compiles at start"). It delimits that window only; readiness is the host's to judge.
STARTED_LINE = "The server is fired up and ready to roll"
# What the host may take after readiness: the generation request (120 s), the chat request (120 s), slack.
AFTER_READY_S = 300.0
_LIVE: Dict[str, Any] = {}          # the running server, stopped at exit whatever happens
_WATCHED: Dict[str, warmcheck.Watch] = {}   # the server's warm watch, judged at its turn (settle_warm)


def _flag(args: List[str], name: str) -> Optional[str]:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def unrecognized_flags(lines: List[str]) -> Optional[str]:
    """The flags argparse refused, when the server exited because of them."""
    for line in lines:
        match = UNKNOWN_FLAGS.search(line)
        if match:
            return match.group(1).strip()
    return None


def _model(ctx: core.Context) -> str:
    """The model folder the server loads: a user's model as it is, else the host's weights plus a tokenizer
    made here (the tokenizer decides nothing: the host sends and compares token ids)."""
    if ctx.model_path:
        return ctx.model_path
    if not ctx.model_dir or not os.path.isfile(os.path.join(ctx.model_dir, "model.safetensors")):
        msg = f"the host's tiny model is missing (no model.safetensors in {ctx.model_dir})"
        raise core.StageFailed(msg)
    out = os.path.join(ctx.workdir, "tiny-llama")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(ctx.model_dir, out)
    done = core.sh([sys.executable, os.path.join(HERE, "tinymodel.py"), "tokenizer", out], timeout=600)
    if done.returncode != 0:
        msg = "could not make the tiny model's tokenizer in the image"
        raise core.StageFailed(msg, log=done.stdout)
    return out


def _wait_for_host(srv: server.Server, stop_file: str, deadline_s: float, watch: Optional[warmcheck.Watch],
                   halt: threading.Event) -> "tuple[Optional[int], Optional[Dict[str, Any]], bool]":
    """Until the host creates `stop_file` (exit code None), the server exits (its code, announced at once),
    a stage beside it fails (`halt`: the last value True) or the deadline; and what the warm-cache watch saw
    up to the server's own "started" line."""
    end, watched = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        if watch is not None and watched is None and any(STARTED_LINE in line for line in list(srv.tail)):
            watched = watch.stop()
        if os.path.exists(stop_file):
            # in host mode as root the stop file lies in a folder of the verifier's that the probe may not
            # change (verify/identity.py): it stays there, and the verifier removes it at the next run
            with contextlib.suppress(OSError):
                os.remove(stop_file)
            return None, watched, False
        code = srv.proc.poll()
        if code is not None:
            core.emit({"code": code}, core.SERVER_EXIT_PREFIX)
            return code, watched, False
        if halt.is_set():
            return None, watched, True
        time.sleep(0.2)
    return srv.proc.poll(), watched, False


def settle_warm(ctx: core.Context, result: Dict[str, Any]) -> None:
    """The server's warm start judged at its turn, when kernel-smoke's checks beside it have their results (and
    have said what they compiled into the caches): only a profile the image baked is held to "nothing compiles",
    on an arch it baked, and a compile there is a warning naming the kernels (the claim is false, the server
    works); another profile compiles at first start, as the bake report says, and its compiles are kept as
    evidence. What changed while a check ran is the check's warning, not the server's (apart_from_checks)."""
    watch = _WATCHED.pop("server", None)
    evidence = result.get("evidence") or {}
    warm = evidence.get("warm")
    if watch is None or not warm or not warm["profile_baked"]:
        return
    warm.update(warmcheck.apart_from_checks(warm, watch.compiled, set(ctx.compiled_by_checks)))
    found = warmcheck.cold_start(warm, str(result.get("arch") or (ctx.gpu or {}).get("arch") or "an unknown arch"))
    warm.update({k: v for k, v in found.items() if k != "warnings"})
    evidence.update({k: v for k, v in found.items() if k == "warnings"})


@core.stage("server", needs=("gpu-visible",), gpu=True, settle=settle_warm)
def launch_server(ctx: core.Context) -> Dict[str, Any]:
    if ctx.server_skip:   # the host's decision (e.g. a tensor-parallel profile given one GPU)
        raise core.StageSkipped(ctx.server_skip)
    if not ctx.stop_file:
        msg = ("the host observes the server through its port: run the probe through `verify` (which hands it a "
               "model and a stop file), not alone")
        raise core.StageSkipped(msg)
    os.makedirs(ctx.workdir, exist_ok=True)
    model = _model(ctx)
    atexit.register(_stop_live)  # before anything starts: no server outlives the probe
    args = list(ctx.server_args)
    port = int(_flag(args, "--port") or server.free_port())
    host_args = [] if "--host" in args else ["--host", ctx.serve_host]
    port_args = [] if "--port" in args else ["--port", str(port)]
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, *host_args, *port_args, *args]
    launched = [sys.executable, NETCUT, "--", *argv] if ctx.cut_network else argv
    claim = warmcheck.load_claim()
    watch = warmcheck.Watch(warmcheck.watched_dirs(claim, dict(os.environ, **ctx.server_env))).start() \
        if claim else None
    srv = server.start(launched, port, os.path.join(ctx.workdir, f"server-{port}.log"), env=ctx.server_env)
    _LIVE["server"] = srv
    core.emit({"port": port, "pid": srv.proc.pid, "host": _flag(args, "--host") or ctx.serve_host,
               "stop_file": ctx.stop_file, "log": srv.log_path}, core.SERVE_PREFIX)
    exit_code, watched, halted = _wait_for_host(srv, ctx.stop_file, ctx.stage_timeout + AFTER_READY_S, watch,
                                                ctx.halt)
    if halted:
        if watch is not None and watched is None:
            watch.stop()
        _stopped_beside(srv)
    evidence: Dict[str, Any] = {"argv": argv[1:], "env": ctx.server_env, "model": model,
                                "tiny_model": not ctx.model_path, "log": srv.log_path,
                                "network_cut_asked": ctx.cut_network}
    if watch is not None and claim is not None:
        evidence["warm"] = {"report": claim["path"], "profile": ctx.server_profile,
                            "profile_baked": warmcheck.covers(claim, ctx.server_profile),
                            "declared_at_start": warmcheck.declared(claim, ctx.server_profile),
                            "archs": claim.get("archs", []),
                            "first_start": claim.get("first_start", []), **(watched or watch.stop())}
    excerpt = server.failure_excerpt(srv)
    evidence["shutdown"] = _stop_live()
    evidence["jit_log_lines"] = sum(1 for line in srv.tail if JIT_MARKERS.search(line))
    evidence["log_tail"] = excerpt      # the host's excerpt when it finds the server not ready
    if exit_code is not None:
        refused = unrecognized_flags(list(srv.tail))
        if refused:  # a profile written for another SGLang: it says nothing about this image
            raise core.StageSkipped("this SGLang does not know the server profile's flag(s) %s: the profile "
                                    "does not apply to this image" % refused)
        why = f"server process exited with code {exit_code} after {time.monotonic() - srv.started:.0f}s"
        trace = server.last_traceback(list(srv.tail))
        if trace:
            why += ": " + trace.strip().splitlines()[-1][:300]
        raise core.StageFailed(why, evidence, excerpt)
    if watch is not None:
        _WATCHED["server"] = watch   # judged at the server's turn (settle_warm), after the checks beside it
    return evidence


def _stopped_beside(srv: server.Server) -> None:
    """A stage beside the server failed: stop it, tell the host at once (it stops polling), and abort."""
    shutdown = _stop_live()
    code = srv.proc.poll()
    core.emit({"code": -1 if code is None else code}, core.SERVER_EXIT_PREFIX)
    msg = (f"stopped after {time.monotonic() - srv.started:.0f}s: a GPU check beside it failed (the first "
           "failure is that stage's)")
    raise core.StageStopped(msg, {"log": srv.log_path, "shutdown": shutdown})


def _stop_live() -> Optional[Dict[str, Any]]:
    srv = _LIVE.pop("server", None)
    return server.stop(srv) if srv is not None else None


@core.stage("first-generation", needs=("server",), gpu=True)
def first_generation(ctx: core.Context) -> Dict[str, Any]:
    msg = "made by the host from the server's reply (its own request, compared with its own reference decode)"
    raise core.StageSkipped(msg)
