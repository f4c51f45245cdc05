"""The container runner: the probe inside an image, one labelled container per verification, always removed.

The container runs a keep-alive (the image's own python3, else `sleep`); the probe package and the
host's tiny model are copied in with put_archive (nothing is installed into the image) and the probe
executed with `docker exec`, its output streamed line by line so that a container killed mid-stage still
leaves the stages done so far, and fed to the host's observer of the server (handoff.py), which reaches
the server through the container's network namespace (`network_mode: none`: no route out) and stops the
probe with a put_archive of the stop file. A stage that produces no result within its deadline ends the
probe (the container is killed) unless the host itself is at the server; a dead container is reported
with its exit status and last log lines.

A run killed outright (SIGKILL, a lost machine) cannot remove its container in `finally`, and the
keep-alive would hold it (and a GPU) forever. So each container is labelled with the host and the
process that owns it, and the next verification on that host first removes every container of ours
whose owner process is gone (`reap_orphans`); containers kept on request are left alone.
"""

from __future__ import annotations

import io
import os
import queue
import re
import shlex
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import log
from . import netns
from .handoff import Handoff, Handover, Unreachable
from .observe import Endpoint
from .output import ProbeRun, failed, interpret
from .plan import grace
from .probe_source import PROBE_SOURCE
from .runner import Options, Outcome

if TYPE_CHECKING:   # the docker SDK and testcontainers are imported where the engine is reached (cli.py)
    import docker
    from testcontainers.core.container import DockerContainer

    from .host_model import TinyModel

PROBE_ROOT = "/opt/probe"                  # the package lands in /opt/probe/probe
MODEL_ROOT = f"{PROBE_ROOT}/model"          # the host's tiny model (weights, config)
STOP_FILE = f"{PROBE_ROOT}/stop"            # created by the host once it has observed the server
LABEL_RUN, LABEL_CELL = "sglang-images.run", "sglang-images.cell"
# Who owns a container: host name and "PID START" (the start time tells a reused pid from the owner).
LABEL_HOST, LABEL_OWNER, LABEL_KEPT = "sglang-images.host", "sglang-images.owner-process", "sglang-images.kept"
KEEPALIVES = (["python3", "-c", "import time; time.sleep(1e9)"], ["sleep", "infinity"])
NOT_FOUND_RE = re.compile(r"executable file not found|no such file or directory", re.I)


def probe_archive(source: Path = PROBE_SOURCE, model: TinyModel | None = None) -> bytes:
    """A tar of the probe package (its .py files) rooted at PROBE_ROOT, with the host's tiny model in
    MODEL_ROOT when there is one."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("opt", "opt/probe", "opt/probe/probe", *(["opt/probe/model"] if model else [])):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path in sorted(source.glob("*.py")):
            tar.add(str(path), arcname=f"opt/probe/probe/{path.name}")
        for name, data in (model.files() if model else {}).items():
            info = tarfile.TarInfo(f"opt/probe/model/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def network_plan(client: docker.DockerClient) -> tuple[dict[str, Any], str | None]:
    """(docker `run` network options, why the server's network cannot be cut or None).

    A container with `network_mode: none` has loopback only: the server starts with no route out, and the
    host reaches its port by joining the container's network namespace (netns.py), which needs root and
    an engine on this machine. Elsewhere the engine's default network is kept and the stage evidence says
    the network was not cut; where the engine has no default bridge network (dockerd --bridge=none, as on
    hosts without iptables), containers can only share the host's network."""
    from docker.errors import APIError, DockerException

    problem = netns.problem()
    if problem is None and not str(client.api.base_url).startswith("http+docker://"):
        problem = f"the engine is not on this machine ({client.api.base_url}): its containers' namespaces are not here"
    if problem is None:
        return {"network_mode": "none"}, None
    try:
        bridges = client.networks.list(names=["bridge"])
    except (APIError, DockerException):
        return {}, problem
    return ({} if any(n.name == "bridge" for n in bridges) else {"network_mode": "host"}), problem


class ContainerReach:
    """The server inside a verification container: through its network namespace (`network_mode: none`),
    the host's network, or the container's address on a bridge; the stop file goes in with put_archive."""

    def __init__(self, wrapped: Any, network_mode: str | None) -> None:
        self.wrapped, self.network_mode = wrapped, network_mode

    def endpoint(self, handover: Handover) -> Endpoint:
        self.wrapped.reload()
        attrs = self.wrapped.attrs
        if self.network_mode == "none":
            pid = int(attrs.get("State", {}).get("Pid") or 0)
            if not pid or not Path(netns.of_process(pid)).exists():
                msg = f"the container's process {pid} has no network namespace on this machine"
                raise Unreachable(msg)
            return Endpoint("127.0.0.1", handover.port, netns.of_process(pid))
        if self.network_mode == "host":
            return Endpoint("127.0.0.1", handover.port)
        settings = attrs.get("NetworkSettings") or {}
        address = settings.get("IPAddress") or next(
            (n.get("IPAddress") for n in (settings.get("Networks") or {}).values() if n.get("IPAddress")), "")
        if not address:
            msg = "the container has no address the host can reach"
            raise Unreachable(msg)
        return Endpoint(address, handover.port)

    def stop(self, handover: Handover) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(Path(STOP_FILE).name)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(b""))
        self.wrapped.put_archive(str(Path(STOP_FILE).parent), buf.getvalue())


class ContainerRunner:
    """The probe inside a container of `image`; `docker_options` are docker SDK `run` keyword arguments
    (GPUs, shm, ulimits, environment, network)."""

    mode = "container"

    def __init__(self, image: str, docker_options: Mapping[str, Any] | None = None, *,
                 cut_problem: str | None = None) -> None:
        self.image, self.docker_options, self.cut_problem = image, dict(docker_options or {}), cut_problem

    def run(self, options: Options, model: TinyModel | None) -> Outcome:
        from docker.errors import APIError

        plan = options.plan
        network = self.docker_options.get("network_mode")
        args = plan.probe_args("container") + (["--model-dir", MODEL_ROOT] if model else []) + [
            "--stop-file", STOP_FILE] + ([] if network in ("none", "host") else ["--serve-host", "0.0.0.0"])
        log_file = options.log_file
        try:
            with probe_container(self.image, run_id=options.run_id, cell_id=options.cell_id,
                                 options=self.docker_options, keep=options.keep) as (started, keepalive):
                if started is None:
                    with log_file.open("a") as fh:
                        fh.write(f"# cannot start a keep-alive in the image: {keepalive}\n")
                    return Outcome([failed("probe", f"no Python interpreter in the image: {keepalive}",
                                           "no-python", log=keepalive)])
                handoff = Handoff(ContainerReach(started.get_wrapped_container(), network), options.handed, model,
                                  ready_deadline_s=plan.stage_timeout,
                                  cut_problem=self.cut_problem if network != "none" else None)
                run = run_probe(started, "python3", args, planned=plan.stages, stage_timeout=plan.stage_timeout,
                                log_file=log_file, model=model, handoff=handoff)
                observation = handoff.finish()
        except APIError as exc:  # the engine refused the container itself: a result for this cell, not a crash
            why = str(exc.explanation or exc)
            with log_file.open("a") as fh:
                fh.write(f"# the engine could not start a container: {why}\n")
            return Outcome([failed("container", f"the engine could not start a container from {self.image}: "
                                                f"{why[:300]}", "container-start-failed", log=why)])
        return Outcome(interpret(run, plan.stage_timeout), observation)


@contextmanager
def probe_container(image: str, *, run_id: str, cell_id: str, options: Mapping[str, Any] | None = None,
                    keep: bool = False) -> Iterator[tuple[DockerContainer | None, str]]:
    """A started container with a keep-alive (and the keep-alive used), removed on exit unless `keep`."""
    import docker
    from docker.errors import APIError
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    testcontainers_config.ryuk_disabled = True   # we remove our own containers; no reaper image to pull
    opts = dict(options or {})
    env = dict(opts.pop("environment", None) or {})
    name = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"sglang-images-{cell_id}-{uuid.uuid4().hex[:8]}")
    labels = {LABEL_RUN: run_id, LABEL_CELL: cell_id, LABEL_HOST: socket.gethostname(),
              LABEL_OWNER: _process_identity(os.getpid()), **({LABEL_KEPT: "1"} if keep else {}),
              **opts.pop("labels", {})}
    with closing(docker.from_env()) as engine:
        reap_orphans(engine)
    started: DockerContainer | None = None
    keepalive, errors = "", []
    try:
        for argv in KEEPALIVES:
            candidate = DockerContainer(image, name=name, env=env, entrypoint=argv, labels=labels, **opts)
            try:
                started, keepalive = candidate.start(), argv[0]
                break
            except APIError as exc:
                _remove(candidate, keep=False)
                errors.append(str(exc.explanation or exc))
                if not NOT_FOUND_RE.search(errors[-1]):
                    raise
            except BaseException:
                _remove(candidate, keep=False)   # Ctrl-C while starting: no half-started container stays
                raise
        yield (started, keepalive) if started is not None else (None, "; ".join(errors))
    finally:
        if started is not None:
            _remove(started, keep=keep)


def _remove(container: DockerContainer, *, keep: bool) -> None:
    from docker.errors import NotFound

    if keep:
        container.get_docker_client().client.close()
        return
    with suppress(NotFound):
        container.stop(force=True, delete_volume=True)


def run_probe(container: DockerContainer, python: str, probe_args: Sequence[str], *, planned: Sequence[str],
              stage_timeout: float, log_file: Path, env: Mapping[str, str] | None = None,
              model: TinyModel | None = None, handoff: Handoff | None = None) -> ProbeRun:
    """Copy the probe (and the host's model) in, exec it, stream its output to `log_file` and `handoff`;
    enforce a deadline per stage (none while the host itself observes the server)."""
    wrapped = container.get_wrapped_container()
    api = container.get_docker_client().client.api
    run = ProbeRun.of(planned, python=python)
    wrapped.put_archive("/", probe_archive(model=model))
    argv = [python, "-m", "probe", *probe_args]
    exec_id = api.exec_create(wrapped.id, argv, workdir=PROBE_ROOT,
                              environment={"PYTHONDONTWRITEBYTECODE": "1", **(env or {})})["Id"]
    lines: queue.Queue[str | None] = queue.Queue()
    stream = api.exec_start(exec_id, stream=True)
    reader = threading.Thread(target=_pump, args=(stream, lines), daemon=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a", encoding="utf-8") as log, closing(_Closer(stream)):
        log.write(f"$ docker exec -w {PROBE_ROOT} {wrapped.name} {shlex.join(argv)}\n")
        reader.start()
        _follow(run, lines, log, stage_timeout, kill=lambda: _kill(wrapped), handoff=handoff)
        reader.join(timeout=10)
        run.exit_code = api.exec_inspect(exec_id).get("ExitCode")
        state = _state(wrapped, settle=len(run.results) < len(planned))
        if not state.get("Running", False):
            run.container_exit = {"status": state.get("ExitCode"), "oom_killed": state.get("OOMKilled"),
                                  "error": state.get("Error") or ""}
        state_text = "running" if run.container_exit is None else f"exited {run.container_exit}"
        log.write(f"# probe exit {run.exit_code}; container {state_text}\n")
    return run


class _Closer:
    """Closes an exec output stream and its HTTP response: after a kill, docker-py's stream.close()
    alone leaves the socket's file object open (a ResourceWarning at exit)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def close(self) -> None:
        with suppress(Exception):
            self.stream.close()
        response = getattr(self.stream, "_response", None)
        if response is not None:
            with suppress(Exception):
                response.raw.close()
            with suppress(Exception):
                response.close()


def _state(wrapped: Any, settle: bool) -> dict[str, Any]:
    """The container's State; when the probe ended early, give a kill a moment to show up there."""
    until = time.monotonic() + (5.0 if settle else 0.0)
    while True:
        wrapped.reload()
        state: dict[str, Any] = wrapped.attrs.get("State", {})
        if not state.get("Running", False) or time.monotonic() >= until:
            return state
        time.sleep(0.25)


def _follow(run: ProbeRun, lines: queue.Queue[str | None], log: io.TextIOWrapper, stage_timeout: float,
            kill: Any, handoff: Handoff | None = None) -> None:
    """Read lines until the probe ends; kill the container when a stage runs past its deadline."""
    deadline = time.monotonic() + stage_timeout + grace(stage_timeout)
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            if handoff is not None and handoff.busy:   # the host is at the server: its own deadlines apply
                deadline = time.monotonic() + stage_timeout + grace(stage_timeout)
                continue
            run.hung_stage = run.lines.due or "probe"
            log.write(f"# no result within {stage_timeout + grace(stage_timeout):.0f}s: "
                      f"probe timed out in stage {run.hung_stage}; killing the container\n")
            kill()
            return
        if line is None:
            if handoff is not None:
                handoff.ended = True
            return
        log.write(line + "\n")
        log.flush()
        if handoff is not None and handoff.feed(line):
            continue
        if run.add_line(line):
            deadline = time.monotonic() + stage_timeout + grace(stage_timeout)


def _pump(stream: Iterator[bytes], lines: queue.Queue[str | None]) -> None:
    from docker.errors import DockerException

    pending = b""
    try:
        for chunk in stream:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                lines.put(raw.decode("utf-8", "replace").rstrip("\r"))
    except (DockerException, OSError, ValueError):
        # The container went away mid-stream, or (ValueError: I/O on a closed file) the run was interrupted
        # and its cleanup closed the stream under this thread: what arrived so far is kept.
        pass
    finally:
        if pending:
            lines.put(pending.decode("utf-8", "replace"))
        lines.put(None)


def _kill(wrapped: Any) -> None:
    from docker.errors import APIError, NotFound

    with suppress(APIError, NotFound):
        wrapped.kill()


def _process_identity(pid: int) -> str:
    """"PID START": the process's start time (clock ticks since boot, /proc/PID/stat field 22) tells it from
    a later process that got the same pid; "" when the process does not exist."""
    try:   # bytes: the name in it is any process's own, and need not be UTF-8
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return f"{pid} {int(stat.rsplit(b')', 1)[1].split()[19])}"
    except (OSError, IndexError, ValueError):
        return ""


def reap_orphans(client: docker.DockerClient) -> list[str]:
    """Remove this host's verification containers whose owner process is gone; return their names."""
    from docker.errors import APIError, DockerException, NotFound

    host = socket.gethostname()
    reaped = []
    try:
        found = client.containers.list(all=True, filters={"label": [f"{LABEL_HOST}={host}", LABEL_OWNER]})
    except (APIError, DockerException):
        return []
    for orphan in found:
        owner = orphan.labels.get(LABEL_OWNER, "")
        pid = owner.split()[0] if owner else ""
        if orphan.labels.get(LABEL_KEPT) == "1" or not pid.isdigit() or _process_identity(int(pid)) == owner:
            continue
        with suppress(NotFound, APIError):
            orphan.remove(force=True)
            reaped.append(orphan.name or "")
            log.warn(f"removed container {orphan.name} of run {orphan.labels.get(LABEL_RUN)}: "
                     f"its process ({pid}) is gone")
    return reaped


def leftovers(client: docker.DockerClient, run_id: str | None = None) -> list[str]:
    """Names of containers this project started (of one run, when given) that still exist."""
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    return [c.name or "" for c in client.containers.list(all=True, filters={"label": label})]
