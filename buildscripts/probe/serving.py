"""The GPU stages around a real server: server, first-generation (stdlib only).

`server` starts `python -m sglang.launch_server` (on the ladder's tiny model unless one is given) and
polls it to a deadline, while the CPU reference decode runs beside it; `first-generation` compares the
server's greedy tokens with that reference, asks one chat completion and stops the server cleanly.
The server is handed from one stage to the next in _LIVE. The pure decision functions
(compare_tokens, unrecognized_flags) are unit-tested on their own.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import core, server, warmcheck

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "bormo dimnir hinfa irfa"  # chosen so every CPU greedy step has a margin > 0.37
NEW_TOKENS = 16
NEAR_TIE = 0.2                     # logit margin under which bf16 rounding may pick the other token
JIT_MARKERS = re.compile(r"ninja|nvcc|Compiling|JIT|jit_kernel", re.I)
_LIVE: Dict[str, Any] = {}          # the running server, handed from `server` to `first-generation`


# ----------------------------------------------------------------------------------------- server

def _flag(args: List[str], name: str) -> Optional[str]:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def _make_tiny_model(ctx: core.Context) -> str:
    out = os.path.join(ctx.workdir, "tiny-llama")
    done = core.sh([sys.executable, os.path.join(HERE, "tinymodel.py"), "make", out], timeout=600)
    if done.returncode != 0:
        msg = "could not make the tiny test model in the image"
        raise core.StageFailed(msg, log=done.stdout)
    return out


def _start_reference(ctx: core.Context, model: str) -> None:
    """The CPU decode runs while the server starts; first-generation collects it."""
    path = os.path.join(ctx.workdir, "reference.json")
    argv = [sys.executable, os.path.join(HERE, "tinymodel.py"), "reference", model, "--prompt", PROMPT,
            "--max-new-tokens", str(NEW_TOKENS)]
    with open(path, "w") as out:
        _LIVE["reference"] = (subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="")), path)


UNKNOWN_FLAGS = re.compile(r"error: unrecognized arguments: (.+)")


def unrecognized_flags(lines: List[str]) -> Optional[str]:
    """The flags argparse refused, when the server exited because of them."""
    for line in lines:
        match = UNKNOWN_FLAGS.search(line)
        if match:
            return match.group(1).strip()
    return None


@core.stage("server", needs=("gpu-visible",), gpu=True)
def launch_server(ctx: core.Context) -> Dict[str, Any]:
    os.makedirs(ctx.workdir, exist_ok=True)
    model = ctx.model_path or _make_tiny_model(ctx)
    atexit.register(_stop_live)  # before anything starts: no reference decode or server outlives the probe
    if not ctx.model_path:
        _start_reference(ctx, model)
    args = list(ctx.server_args)
    port = int(_flag(args, "--port") or server.free_port())
    host_args = [] if "--host" in args else ["--host", "127.0.0.1"]
    port_args = [] if "--port" in args else ["--port", str(port)]
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model,
            *host_args, *port_args, *args]
    claim = warmcheck.load_claim()
    watch = warmcheck.Watch(warmcheck.watched_dirs(claim, dict(os.environ, **ctx.server_env))).start() \
        if claim else None
    srv = server.start(argv, port, os.path.join(ctx.workdir, f"server-{port}.log"), env=ctx.server_env)
    ready = server.wait_ready(srv, "/health_generate", deadline_s=ctx.stage_timeout)
    jit_lines = sum(1 for line in srv.tail if JIT_MARKERS.search(line))
    evidence = {"argv": argv[1:], "env": ctx.server_env, "model": model, "tiny_model": not ctx.model_path,
                "log": srv.log_path, "jit_log_lines": jit_lines, **ready.as_evidence()}
    if watch is not None and claim is not None:
        evidence["warm"] = {"report": claim["path"], "profile": ctx.server_profile,
                            "profile_baked": warmcheck.covers(claim, ctx.server_profile),
                            "declared_at_start": warmcheck.declared(claim, ctx.server_profile),
                            "first_start": claim.get("first_start", []), **watch.stop()}
    if not ready.ready:
        excerpt = server.failure_excerpt(srv)
        evidence["shutdown"] = server.stop(srv)
        _stop_live()  # the reference decode is not needed any more
        if ready.exit_code is not None:
            why = (f"server process exited with code {ready.exit_code} after {ready.waited_s:.0f}s, "
                   "before it was ready")
        else:
            why = (f"server not ready within {ctx.stage_timeout:.0f}s "
                   f"(readiness timeout; last answer {ready.last_answer})")
        refused = unrecognized_flags(list(srv.tail)) if ready.exit_code is not None else None
        if refused:  # a profile written for another SGLang: it says nothing about this image
            raise core.StageSkipped("this SGLang does not know the server profile's flag(s) %s: the profile "
                                    "does not apply to this image" % refused)
        trace = server.last_traceback(list(srv.tail))
        if trace:
            why += ": " + trace.strip().splitlines()[-1][:300]
        raise core.StageFailed(why, evidence, excerpt)
    # Only a profile the image baked is held to "nothing compiles"; another one compiles at first start,
    # as the bake report says, and its compiles are kept as evidence.
    warm = evidence.get("warm")
    cold = warmcheck.verdict(warm, tuple(warm["declared_at_start"])) if warm and warm["profile_baked"] else None
    if cold:  # warm caches claimed, yet the start compiled: the claim is false (the server did come up)
        evidence["shutdown"] = server.stop(srv)
        _stop_live()
        raise core.StageFailed(cold, evidence)
    _LIVE["server"] = srv
    return evidence


def _stop_live() -> Optional[Dict[str, Any]]:
    srv = _LIVE.pop("server", None)
    ref = _LIVE.pop("reference", None)
    if ref is not None and ref[0].poll() is None:
        ref[0].kill()
    return server.stop(srv) if srv is not None else None


# ------------------------------------------------------------------------------- first-generation

def compare_tokens(gpu: List[int], ref: List[int], margins: List[float],
                   near_tie: float = NEAR_TIE) -> Tuple[bool, str]:
    """Greedy GPU tokens against the CPU reference; a divergence only counts after a clear margin."""
    # zip() without strict=: the probe also runs on Pythons older than 3.10
    for i, (got, want) in enumerate(zip(gpu, ref)):  # noqa: B905
        if got != want:
            if margins[i] < near_tie:
                return True, (f"equal for {i} tokens, then a near-tie (CPU margin {margins[i]:.3f} < "
                              f"{near_tie}) went the other way; later tokens not compared")
            return False, (f"GPU token {i} is {got}, the CPU reference chose {want} with a clear margin "
                           f"({margins[i]:.3f}): a kernel computes wrong results")
    if len(gpu) < len(ref):
        return False, f"GPU returned {len(gpu)} tokens, the reference {len(ref)}"
    return True, f"all {len(ref)} tokens equal"


def _output_ids(answer: Dict[str, Any]) -> List[int]:
    if isinstance(answer.get("output_ids"), list):
        return [int(t) for t in answer["output_ids"]]
    logprobs = answer.get("meta_info", {}).get("output_token_logprobs") or []
    return [int(entry[1]) for entry in logprobs]


def _reference() -> Dict[str, Any]:
    proc, path = _LIVE.pop("reference")
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        msg = "the CPU reference decode did not finish in 600s"
        raise core.StageFailed(msg) from None
    with open(path) as fh:
        text = fh.read()
    found = [ln for ln in text.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not found:
        msg = "the CPU reference decode (transformers) failed"
        raise core.StageFailed(msg, log=text)
    result: Dict[str, Any] = json.loads(found[-1])
    return result


def _generate(base: str, evidence: Dict[str, Any]) -> List[int]:
    body = {"text": PROMPT, "return_logprob": True,
            "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}}
    code, text = server.http(base + "/generate", body, timeout=120)
    if code != 200:
        msg = f"POST /generate answered {code}: {text[:300]}"
        raise core.StageFailed(msg, evidence)
    answer = json.loads(text)
    ids = _output_ids(answer)
    meta = answer.get("meta_info", {})
    evidence["generate"] = {"text": answer.get("text"), "output_ids": ids,
                            "prompt_tokens": meta.get("prompt_tokens"),
                            "e2e_latency": meta.get("e2e_latency")}
    if not ids:
        msg = "POST /generate returned no tokens"
        raise core.StageFailed(msg, evidence)
    return ids


def _chat(base: str, evidence: Dict[str, Any]) -> None:
    code, text = server.http(base + "/v1/models", timeout=30)
    model = json.loads(text)["data"][0]["id"] if code == 200 else "default"
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8, "temperature": 0}
    code, text = server.http(base + "/v1/chat/completions", body, timeout=120)
    if code != 200:
        msg = f"POST /v1/chat/completions answered {code}: {text[:300]}"
        raise core.StageFailed(msg, evidence)
    answer = json.loads(text)
    usage = answer.get("usage") or {}
    evidence["chat"] = {"content": answer["choices"][0]["message"].get("content"), "usage": usage}
    if not usage.get("completion_tokens"):
        msg = "/v1/chat/completions generated no tokens"
        raise core.StageFailed(msg, evidence)


@core.stage("first-generation", needs=("server",), gpu=True)
def first_generation(ctx: core.Context) -> Dict[str, Any]:
    srv = _LIVE["server"]
    evidence: Dict[str, Any] = {"server_log": srv.log_path}
    try:
        _generate_and_check(srv, evidence)
        _chat(srv.base_url, evidence)
    except core.StageFailed as exc:
        exc.log = exc.log or server.failure_excerpt(srv)  # the server's side of the failure
        raise
    finally:
        evidence["shutdown"] = _stop_live()
    if not evidence["shutdown"]["clean"]:
        msg = f"unclean shutdown: the server left processes or port {srv.port} behind"
        raise core.StageFailed(msg, evidence)
    return evidence


def _generate_and_check(srv: server.Server, evidence: Dict[str, Any]) -> None:
    ids = _generate(srv.base_url, evidence)
    if "reference" not in _LIVE:
        evidence["reference"] = {"verdict": "no CPU reference for a user model; output checked non-empty"}
        return
    ref = _reference()
    ok, detail = compare_tokens(ids, ref["output_ids"], ref["margins"])
    evidence["reference"] = {"output_ids": ref["output_ids"], "margins": ref["margins"],
                             "prompt_tokens": len(ref["prompt_ids"]), "verdict": detail}
    if not ok:
        msg = f"generation mismatch: {detail}"
        raise core.StageFailed(msg, evidence)
