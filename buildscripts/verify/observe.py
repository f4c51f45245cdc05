"""The host's own look at a server the probe started: readiness through its port, the first generation
asked and checked by the host (token ids in, token ids out, compared with the host's reference decode),
and one chat completion. Nothing here reads what the probe says about the server.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..probe.server import Readiness, poll_ready
from . import netns

if TYPE_CHECKING:   # numpy and safetensors (host_model.py) load where a model is made, not when the CLI starts
    from .reference import Decode

READY_PATH = "/health_generate"   # SGLang: 200 only once a warm-up generation has passed
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Endpoint:
    """Where the host reaches the server: an address, as seen from a network namespace (None: the host's)."""

    host: str
    port: int
    netns: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def shown(self) -> str:
        return self.url + (f" inside the network namespace {self.netns}" if self.netns else "")

    def request(self, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int | None, str]:
        """(status, body) of a GET (a JSON POST when `body` is given); (None, why) when nothing answered."""
        connection = _Connection(self, timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            connection.request("GET" if body is None else "POST", path, body=data,
                               headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            return answer.status, answer.read().decode(errors="replace")
        except (OSError, http.client.HTTPException) as exc:   # refused, reset, timed out, cut mid-answer
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()


class _Connection(http.client.HTTPConnection):
    def __init__(self, endpoint: Endpoint, timeout: float) -> None:
        super().__init__(endpoint.host, endpoint.port, timeout=timeout)
        self.endpoint = endpoint

    def connect(self) -> None:
        self.sock = netns.connect(self.endpoint.netns, (self.endpoint.host, self.endpoint.port), self.timeout or 5.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def readiness(endpoint: Endpoint, *, started: float, deadline_s: float, gone: Callable[[], int | None],
              interval_s: float = 1.0) -> Readiness:
    """Poll READY_PATH until 200, `gone()` names an exit code (the server or the probe ended), or the deadline."""
    return poll_ready(lambda timeout: endpoint.request(READY_PATH, timeout=timeout), gone, started=started,
                      deadline_s=deadline_s, interval_s=interval_s)


class Refused(Exception):
    """The server answered the host's request badly: the first generation fails with this reason."""


def output_ids(answer: dict[str, Any]) -> list[int]:
    """The generated token ids of a /generate answer: `output_ids` (SGLang 0.5.10 to 0.5.23 return it for a
    request that is not streamed), else the ids in its output logprobs."""
    if isinstance(answer.get("output_ids"), list):
        return [int(t) for t in answer["output_ids"]]
    logprobs = (answer.get("meta_info") or {}).get("output_token_logprobs") or []
    return [int(entry[1]) for entry in logprobs]


def compare_tokens(got: list[int], want: Decode) -> str | None:
    """None when the server's greedy tokens are the reference's; else where and how they differ. The
    reference path has a clear margin at every step (tinymodel.MIN_MARGIN), so any difference counts."""
    for i, (token, expected) in enumerate(zip(got, want.output_ids, strict=False)):
        if token != expected:
            return (f"GPU token {i} is {token}, the host's reference decode chose {expected} with a clear margin "
                    f"({want.margins[i]:.3f}, logit spread {want.spreads[i]:.2f}): a kernel computes wrong results")
    if len(got) != len(want.output_ids):
        return f"the server returned {len(got)} tokens, the reference {len(want.output_ids)}"
    return None


def _post(endpoint: Endpoint, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON object a POST answered with 200; anything else is Refused, in the server's words."""
    code, text = endpoint.request(path, body, timeout=REQUEST_TIMEOUT_S)
    if code != 200:
        msg = f"POST {path} answered {code if code is not None else 'nothing'}: {text[:300]}"
        raise Refused(msg)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        msg = f"POST {path} answered no JSON object: {text[:300]}"
        raise Refused(msg)
    return answer


def generate(endpoint: Endpoint, reference: Decode, evidence: dict[str, Any]) -> None:
    """The host's first generation: the reference prompt as token ids, greedy, a fixed length."""
    from .host_model import NEW_TOKENS

    prompt = list(reference.prompt_ids)
    answer = _post(endpoint, "/generate", {
        "input_ids": prompt, "return_logprob": True,
        "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}})
    try:
        ids = output_ids(answer)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        msg = f"POST /generate answered no readable token ids: {json.dumps(answer)[:300]}"
        raise Refused(msg) from None
    meta = answer.get("meta_info") or {}
    evidence["generate"] = {"prompt_ids": prompt, "output_ids": ids, "text": answer.get("text"),
                            "prompt_tokens": meta.get("prompt_tokens"), "e2e_latency": meta.get("e2e_latency")}
    if not ids:
        msg = "POST /generate returned no tokens"
        raise Refused(msg)
    detail = compare_tokens(ids, reference)
    evidence["reference"] = {"output_ids": list(reference.output_ids), "verdict": detail or
                             f"all {len(ids)} tokens equal"}
    if detail:
        msg = f"generation mismatch: {detail}"
        raise Refused(msg)


def chat(endpoint: Endpoint, evidence: dict[str, Any]) -> None:
    """One chat completion (the image's tokenizer and chat template make the prompt): tokens must come back."""
    code, text = endpoint.request("/v1/models", timeout=30)
    try:
        model = json.loads(text)["data"][0]["id"] if code == 200 else "default"
    except (ValueError, KeyError, IndexError, TypeError):
        model = "default"
    answer = _post(endpoint, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "bormo dimnir hinfa irfa"}], "max_tokens": 8,
        "temperature": 0})
    try:
        usage = answer.get("usage") or {}
        evidence["chat"] = {"content": answer["choices"][0]["message"].get("content"), "usage": usage}
    except (KeyError, IndexError, TypeError, AttributeError):
        msg = f"POST /v1/chat/completions answered no completion: {json.dumps(answer)[:300]}"
        raise Refused(msg) from None
    if not usage.get("completion_tokens"):
        msg = "/v1/chat/completions generated no tokens"
        raise Refused(msg)
