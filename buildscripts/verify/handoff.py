"""The host's side of the server hand-over (probe/serving.py).

The probe starts the server and prints one line naming its port, its process and a stop file; from
then on the host works alone: it reaches the port itself (through the runner's `Reach`), checks whether
the server's network namespace has a route out, polls readiness, sends the first generation and
compares the tokens with its own reference decode, and finally tells the probe to stop (creates the
stop file). This runs in a thread beside the runner's reading of the probe's output, which goes on
feeding lines: a line saying the server died, or the end of the output, ends the polling at once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..probe.core import SERVE_PREFIX, SERVER_EXIT_PREFIX
from ..probe.server import Readiness
from . import netns, observe
from .gpus import Handed
from .observe import Endpoint

if TYPE_CHECKING:   # numpy and safetensors (host_model.py) load where a model is made, not when the CLI starts
    from .host_model import TinyModel

UNBACKED = "gpu-claim-unbacked"        # failure classes (data/failures.yaml)
UNOBSERVED = "server-unobserved"


@dataclass(frozen=True)
class Handover:
    """What the probe's serve line says: where its server listens and how to tell the probe to stop."""

    port: int
    pid: int                # in the probe's own pid namespace
    host: str
    stop_file: str
    log: str

    @classmethod
    def parse(cls, line: str) -> Handover | None:
        try:
            raw = json.loads(line[len(SERVE_PREFIX):])
            port, pid = int(raw["port"]), int(raw["pid"])
            found = cls(port, pid, str(raw.get("host") or "127.0.0.1"), str(raw["stop_file"]), str(raw.get("log", "")))
        except (ValueError, KeyError, TypeError):
            return None
        return found if 0 < port < 65536 and pid > 0 else None


class Unreachable(Exception):
    """The host cannot reach the server the probe says it started (the reason is the message)."""


class Reach(Protocol):
    """How one runner reaches the server the probe started, and tells the probe to stop."""

    def endpoint(self, handover: Handover) -> Endpoint: ...

    def stop(self, handover: Handover) -> None: ...


@dataclass
class Observation:
    """What the host saw of the server, all of it by itself."""

    handover: Handover
    endpoint: str | None = None
    network: dict[str, Any] = field(default_factory=dict)
    readiness: Readiness | None = None
    generation: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None             # why the first generation failed
    generation_s: float = 0.0              # the host's requests after readiness
    refused: str | None = None             # why the host did not (or could not) look at the server at all
    refused_class: str | None = None
    stop_problem: str | None = None


def network_evidence(namespace: str | None, cut_problem: str | None) -> dict[str, Any]:
    """Whether anything could leave the server's network namespace, as the host finds it there."""
    try:
        route = netns.route_out(namespace)
    except OSError as exc:
        return {"cut": False, "checked_by": "host",
                "warning": f"the network could not be cut or checked: {exc}; downloads at start were possible"}
    if route is None:
        return {"cut": True, "checked_by": "host", "detail": "no route out of the server's network namespace"}
    why = cut_problem or "the server's network namespace has a route out"
    return {"cut": False, "checked_by": "host", "route": route,
            "warning": f"the network could not be cut ({why}): downloads at start were possible"}


class Handoff:
    """Feed it every line of the probe's output; it observes the server when the probe hands one over."""

    def __init__(self, reach: Reach, handed: Handed, model: TinyModel | None, *, ready_deadline_s: float,
                 cut_problem: str | None = None) -> None:
        self.reach, self.handed, self.model = reach, handed, model
        self.ready_deadline_s, self.cut_problem = ready_deadline_s, cut_problem
        self.exit_code: int | None = None
        self.ended = False
        self.observation: Observation | None = None
        self._thread: threading.Thread | None = None

    def feed(self, line: str) -> bool:
        """True for a line of the hand-over (not the probe's output proper)."""
        if line.startswith(SERVE_PREFIX):
            handover = Handover.parse(line)
            if handover is not None and self._thread is None:
                self._thread = threading.Thread(target=self._observe, args=(handover, time.monotonic()),
                                                name="observe-server", daemon=True)
                self._thread.start()
            return True
        if line.startswith(SERVER_EXIT_PREFIX):
            try:
                self.exit_code = int(json.loads(line[len(SERVER_EXIT_PREFIX):])["code"])
            except (ValueError, KeyError, TypeError):
                self.exit_code = -1
            return True
        return False

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def finish(self) -> Observation | None:
        """After the probe's output ended: the observation (waits for the host's last request)."""
        self.ended = True
        if self._thread is not None:
            self._thread.join()
        return self.observation

    def _gone(self) -> int | None:
        return self.exit_code if self.exit_code is not None else (-1 if self.ended else None)

    def _observe(self, handover: Handover, started: float) -> None:
        seen = Observation(handover)
        try:
            self._look(seen, started)
        except Unreachable as exc:
            seen.refused, seen.refused_class = f"the host cannot reach the server: {exc}", UNOBSERVED
        except Exception as exc:  # any surprise is this stage's failure, never a crash of the run
            seen.refused = f"the host could not observe the server: {type(exc).__name__}: {exc}"
            seen.refused_class = UNOBSERVED
        finally:
            self.observation = seen
            try:
                self.reach.stop(handover)
            except Exception as exc:  # the probe then stops at its own deadline
                seen.stop_problem = f"{type(exc).__name__}: {exc}"

    def _look(self, seen: Observation, started: float) -> None:
        if not self.handed.gpus:
            seen.refused = (f"the probe started a server, but the host handed it no GPU ({self.handed.why_none}): "
                            "the host does not observe it")
            seen.refused_class = UNBACKED
            return
        endpoint = self.reach.endpoint(seen.handover)
        seen.endpoint = endpoint.shown()
        seen.readiness = observe.readiness(endpoint, started=started, deadline_s=self.ready_deadline_s,
                                           gone=self._gone)
        # Looked at once the server has run (a server cuts its own network as it starts: probe/netcut.py).
        seen.network = network_evidence(endpoint.netns, self.cut_problem)
        if not seen.readiness.ready or self.model is None:
            return
        asked = time.monotonic()
        try:
            observe.generate(endpoint, self.model.reference, seen.generation)
            observe.chat(endpoint, seen.generation)
        except observe.Refused as exc:
            seen.problem = str(exc)
        seen.generation_s = round(time.monotonic() - asked, 2)

