"""The server and first-generation results, made by the host from its own observation (handoff.py).

The probe's report of the server can only make the server stage worse (it failed, it was stopped because
a GPU check beside it failed, the profile does not apply; a false warm-cache claim is its warning); it can
never make it pass: the stage passes when the host got 200 from the readiness path, and first-generation
when the host's own request returned the tokens of the host's own reference decode. A probe that reports a
server stage without handing the server over fails it. A server that failed to start with its network cut,
after trying to download something, names the URL in the reason (and its class in the hint).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..results import StageResult, Status
from . import classify
from .handoff import UNOBSERVED, Observation

if TYPE_CHECKING:   # numpy and safetensors (host_model.py) load where a model is made, not when the CLI starts
    from .host_model import TinyModel

OFFLINE = "offline-download"   # the failure class (data/failures.yaml) of a download tried with no route out
_URL = r"https?://[^\s'\"<>()\[\],]+"
# Words of a download that failed for want of a network (requests/urllib3, urllib, huggingface_hub,
# FlashInfer's cubin loader); the URL is on that line, split into host and path by urllib3, or named by
# an earlier line (FlashInfer logs "Fetching NAME from URL" first).
_NET_FAILURE = re.compile(r"Network is unreachable|Temporary failure in name resolution|Name or service not known|"
                          r"Failed to establish a new connection|Max retries exceeded|urlopen error|"
                          r"couldn't connect to|Could not resolve host|NameResolutionError|ConnectionError|"
                          r"attempt \d+ failed|Download failed|LocalEntryNotFoundError|No route to host", re.I)
_POOL = re.compile(r"HTTP(S?)ConnectionPool\(host='([^']+)', port=(\d+)\): Max retries exceeded with url: (\S+)")
HOST_KEYS = ("seconds_to_http", "seconds_to_ready", "exit_code", "timed_out", "last_answer", "waited_s", "ready")


def attempted_download(text: str) -> str | None:
    """The URL of the first download in `text` that failed for want of a network, or None."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not _NET_FAILURE.search(line):
            continue
        pool = _POOL.search(line)
        if pool:
            secure, host, port, path = pool.groups()
            default = "443" if secure else "80"
            return f"http{secure and 's'}://{host}{'' if port == default else ':' + port}{path}"
        for earlier in reversed(lines[max(0, i - 20): i + 1]):
            found = [str(url) for url in re.findall(_URL, earlier)]
            if found:
                return found[-1].rstrip(".:;")
    return None


def _failed(probe: StageResult, reason: str, evidence: dict[str, Any], log: str | None,
            failure_class: str | None = None) -> StageResult:
    stage = probe.model_copy(update={"status": Status.FAILED, "reason": reason, "evidence": evidence,
                                     "log_excerpt": log, "failure_class": failure_class,
                                     "hint": classify.hint_for(failure_class) if failure_class else None})
    return classify.label(stage)


def _offline(stage: StageResult, observation: Observation) -> StageResult:
    """A server failure with the network cut and a failed download in its log: the URL in reason and hint."""
    if stage.status is not Status.FAILED or not observation.network.get("cut"):
        return stage
    url = attempted_download("\n".join(filter(None, (stage.reason, stage.log_excerpt))))
    if url is None:
        return stage
    hint = f"It tried {url}. " + (classify.hint_for(OFFLINE) or "")
    return stage.model_copy(update={"reason": f"{stage.reason}; with no route out, the server tried to download {url}",
                                    "failure_class": OFFLINE, "hint": hint})


def server_stage(probe: StageResult, observation: Observation | None) -> StageResult:
    if probe.where == "host":    # the host's own failure: the probe hung, died or never reported
        return probe
    if observation is None:
        if probe.status is not Status.PASSED:
            return probe         # skipped, aborted or failed by the probe: it claimed nothing
        return _failed(probe, "the probe reported the server stage as passed but never handed the server's "
                              "port to the host", probe.evidence, None, UNOBSERVED)
    own = {k: v for k, v in probe.evidence.items() if k not in (*HOST_KEYS, "log_tail", "shutdown")}
    evidence = {**own, "observed_by": "host", "endpoint": observation.endpoint, "network": observation.network,
                **(observation.readiness.as_evidence() if observation.readiness else {})}
    if "warning" in observation.network:
        evidence["warning"] = observation.network["warning"]
    log = probe.log_excerpt or probe.evidence.get("log_tail")
    if probe.status is Status.ABORTED:   # stopped by the probe because a GPU check beside it failed
        return probe.model_copy(update={"evidence": evidence})
    if observation.refused:
        return _failed(probe, observation.refused, evidence, log, observation.refused_class)
    ready = observation.readiness
    assert ready is not None   # set whenever the host did not refuse
    if ready.ready:
        if probe.status is Status.PASSED:
            return probe.model_copy(update={"evidence": evidence, "reason": None})
        return classify.label(probe.model_copy(update={"evidence": evidence}))  # the probe's own failure stands
    if probe.status in (Status.FAILED, Status.SKIPPED):   # the probe saw why (its exit, an unknown flag)
        stage = probe.model_copy(update={"evidence": evidence, "log_excerpt": log})
        return _offline(classify.label(stage), observation)
    if ready.exit_code is not None:
        reason = f"server process exited (the probe ended) after {ready.waited_s:.0f}s, before it was ready"
    else:
        reason = (f"server not ready within {ready.waited_s:.0f}s (readiness timeout; the host polled "
                  f"{observation.endpoint}; last answer {ready.last_answer})")
    return _offline(_failed(probe, reason, evidence, log), observation)


def after_skipped(reason: str | None) -> str:
    """Why the first generation is skipped when the server was, in one wording for the probe's and the host's skips."""
    return f"the server was skipped: {reason}"


def generation_stage(probe: StageResult, server: StageResult | None, probe_server: StageResult | None,
                     observation: Observation | None, model: TinyModel | None) -> StageResult:
    if probe.where == "host":
        return probe
    if server is None or server.status is not Status.PASSED:
        if probe.status is Status.PASSED:
            return _failed(probe, "the probe reported a first generation that the host never observed",
                           probe.evidence, None, UNOBSERVED)
        if server is not None and server.status is Status.SKIPPED and probe.status is Status.SKIPPED:
            return probe   # no GPU here: skipped with its reason, like every GPU stage (never "aborted")
        if server is not None and server.status is Status.SKIPPED and probe.status is Status.ABORTED:
            # the server was not to run here (a tp profile on one GPU, a profile this SGLang does not know)
            return probe.model_copy(update={"status": Status.SKIPPED, "reason": after_skipped(server.reason),
                                            "evidence": {}})
        why = f"prerequisite did not pass: server ({server.status.value if server else 'not run'})"
        return probe.model_copy(update={"status": Status.ABORTED, "reason": why, "evidence": {}})
    assert observation is not None and probe_server is not None   # a passed server stage is the host's observation
    shutdown = probe_server.evidence.get("shutdown")    # how the probe stopped the server after the host was done
    evidence: dict[str, Any] = {"observed_by": "host", **observation.generation,
                                "model": model.evidence() if model else None, "shutdown": shutdown}
    probe = probe.model_copy(update={"duration_s": observation.generation_s})
    if observation.problem:
        return _failed(probe, observation.problem, evidence, probe_server.evidence.get("log_tail"))
    if not isinstance(shutdown, dict) or not shutdown.get("clean", False):
        return _failed(probe, f"unclean shutdown: the server left processes or port {observation.handover.port} "
                              "behind", evidence, None)
    if model is None:   # the host made no weights for this run, so nothing it saw can be compared
        return _failed(probe, "the host made no tiny model for this run: there was no reference to compare the "
                              "generation with", evidence, None, UNOBSERVED)
    return probe.model_copy(update={"status": Status.PASSED, "reason": None, "evidence": evidence})


def merge(stages: Sequence[StageResult], observation: Observation | None, model: TinyModel | None) -> list[StageResult]:
    """The stages with server and first-generation replaced by the host's results."""
    out: list[StageResult] = []
    probe_server = server = None
    for stage in stages:
        if stage.name == "server":
            probe_server, server = stage, server_stage(stage, observation)
            stage = server
        elif stage.name == "first-generation":
            stage = generation_stage(stage, server, probe_server, observation, model)
        out.append(stage)
    return out
