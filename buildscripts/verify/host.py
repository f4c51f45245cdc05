"""The host runner: the probe in a Python environment of this machine (a venv, a GPU test machine without
Docker), not in a container. Its output is read by the same reader as a container's (output.py).

The server the probe starts there runs in a network namespace of its own (probe/netcut.py) when this
process can join one (root): no route out, and the host reaches its port from inside. `ProcessReach`
finds that server by pid and by this verification's marker in its environment (and, in host mode, by the
identity's uid), so that a probe cannot point the host at some other server of the machine; it serves the
LXC runner too. `verify_as_identity` is a whole host-mode run as root: the identity, the verifier's own
decision whether the run may be sealed (apart.py), and the clean-up's report (cleanup.py).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import proc
from ..handed_env import handed_environment
from ..results import StageResult
from . import apart, identity, netns, probe_source
from .access import Who
from .handoff import Handoff, Handover, Unreachable
from .identity import Sandbox
from .observe import Endpoint
from .output import from_process
from .runner import VERIFY_ENV, Options, Outcome, verify

if TYPE_CHECKING:
    from .host_model import TinyModel

FIND_S = 5.0   # how long the host looks for the server's process: one read while it execs shows no marker for a moment
LOOPBACK = "127.0.0.1"


def marker() -> str:
    """NAME=VALUE that this verification's probe (and the server it starts) carry in their environment."""
    return f"{VERIFY_ENV}={uuid.uuid4().hex}"


class ProcessReach:
    """The server a probe started on this machine or in an LXC container here: by its pid in the probe's
    pid namespace and this verification's marker, reached in its own network namespace (or ours)."""

    def __init__(self, mark: str, stop: Callable[[Handover], None], *, enter: bool, uid: int | None = None,
                 address: str | None = None) -> None:
        """`uid`: the server must run as it (host mode's identity); `address`: where the server listens, as the
        host knows it (None: the probe's word, for an LXC container's own address)."""
        self.mark, self._stop, self.enter, self.uid, self.address = mark, stop, enter, uid, address

    def endpoint(self, handover: Handover) -> Endpoint:
        pid = self._found(handover.pid)
        if pid is None:
            whose = f" running as uid {self.uid}" if self.uid is not None else ""
            msg = f"no process {handover.pid} of this verification{whose} runs on this machine"
            raise Unreachable(msg)
        if self.enter:   # opened at every connection: the namespace netcut moves the server into once it runs
            return Endpoint(LOOPBACK, handover.port, netns.of_process(pid))
        host = self.address or (handover.host if handover.host not in ("", "0.0.0.0", "::") else LOOPBACK)
        return Endpoint(host, handover.port)

    def _found(self, inner_pid: int) -> int | None:
        """netns.host_pid, looked for again for FIND_S: a process read while it execs (netcut turning into the
        server, on a loaded machine) shows no environment, so no marker, for a moment."""
        deadline = time.monotonic() + FIND_S
        while (pid := netns.host_pid(inner_pid, self.mark, uid=self.uid)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return pid

    def stop(self, handover: Handover) -> None:
        self._stop(handover)


class HostRunner:
    """`python` with `env` on top of this process's environment, less its secrets (handed_env.handed_environment;
    its PYTHONPATH is kept after the project's, so a staged site folder stays importable). With a `sandbox`
    (as root: identity.py) the probe and all it starts run as that identity, in a network namespace of its own,
    their files in its home; the stop file and the model stay in a folder of the verifier's that the identity
    can read but not change."""

    mode = "host"

    def __init__(self, python: str, env: Mapping[str, str], workdir: Path, sandbox: Sandbox | None = None) -> None:
        self.python, self.env, self.workdir, self.sandbox = python, dict(env), workdir, sandbox

    def handed_path(self) -> str:
        """The import path handed to the code under test besides the probe's copy."""
        return self.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))

    def environment(self, source: Path, extra: Mapping[str, str]) -> dict[str, str]:
        """What the code under test runs with: the handed part of the verifier's environment and `env`, the
        identity's own, the probe's copy (`source`) before the handed import path, and `extra`."""
        path = os.pathsep.join(filter(None, [str(source), self.handed_path()]))
        own = self.sandbox.environment() if self.sandbox else {}
        return {**handed_environment({**os.environ, **self.env}), **own, "PYTHONPATH": path,
                "PYTHONDONTWRITEBYTECODE": "1", **extra}

    def run(self, options: Options, model: TinyModel | None) -> Outcome:
        plan, mark, box = options.plan, marker(), self.sandbox
        control = self.workdir / "control" if box else self.workdir   # the verifier's: stop file, model
        cut_problem = netns.problem()
        stop = control / "stop"
        control.mkdir(parents=True, exist_ok=True)
        stop.unlink(missing_ok=True)
        extra = ["--workdir", str(box.home if box else self.workdir), "--stop-file", str(stop)]
        if model is not None:
            extra += ["--model-dir", str(model.write(control / "model"))]
        if cut_problem is None and box is None:
            extra.append("--cut-network")   # a sandbox has a network namespace of its own from the start
        reach = ProcessReach(mark, lambda _: stop.touch(), enter=cut_problem is None, uid=box.uid if box else None,
                             address=LOOPBACK)   # the probe is told to serve on loopback: the host asks nobody
        handoff = Handoff(reach, options.handed, model, ready_deadline_s=plan.stage_timeout, cut_problem=cut_problem)
        name, _, value = mark.partition("=")
        env = self.environment(probe_source.copy_to(control / "src"), {name: value})
        argv = [self.python, "-m", probe_source.PACKAGE, *plan.probe_args("host"), *extra]
        done = proc.run(box.command(argv) if box else argv, log=options.log_file, env=env, inherit_env=False,
                        timeout=len(plan.stages) * plan.deadline, keep_lines=100000, on_line=handoff.feed)
        observation = handoff.finish()
        return Outcome(from_process(done, plan.stages, plan.stage_timeout, python=self.python, mode=self.mode),
                       observation)


@dataclass(frozen=True)
class HostRun:
    """A host-mode run's stages, what the host noted about it, and why its record must not be sealed (None: it
    may be)."""

    stages: list[StageResult]
    notes: list[str]
    unsealed: str | None


def verify_as_identity(python: str, env: Mapping[str, str], workdir: Path, options: Options) -> HostRun:
    """The plan run by `python` as an identity of its own (root only). Whether the record may be sealed is the
    verifier's own decision, from what it hands on and what it can stat (apart.py), made before the code under
    test starts, and from the clean-up after it (cleanup.py); the code under test is asked nothing."""
    with identity.sandbox(workdir) as lease:   # every process of it is gone, its files swept, when this ends
        runner = HostRunner(python, env, workdir, lease.box)
        before = (identity.why_unsealed(python)
                  or apart.why_shared(python, runner.handed_path().split(os.pathsep))
                  or apart.why_writable(Who(lease.box.uid, lease.box.gid), keep=[workdir]))
        stages = verify(runner, options)
    cleaned = lease.cleaned
    after = cleaned.why_unsealed() if cleaned else "the clean-up after the run did not report"
    unsealed = "; ".join(why for why in (before, after) if why) or None
    notes = [*(cleaned.notes() if cleaned else []), *([f"not sealed: {unsealed}"] if unsealed else [])]
    return HostRun(stages, notes, unsealed)
