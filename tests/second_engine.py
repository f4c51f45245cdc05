"""A second, throw-away Docker engine (26.x, containerd image store) beside the machine's own, for the
shared-build-cache round trip: a fresh runner is an engine with no image and no build cache.

It has its own socket, data root and bridge, and never touches the main engine: no iptables rules (its
containers reach nothing outside; `nat=True` adds one masquerade rule for builds that download, and
removes it again), and its own bridge interface, since an engine started with `--bridge=none` deletes
the host's docker0. `.ci/install-engine` installs its binaries under /opt/docker-26 (Debian trixie's
docker.io and containerd, with the host's runc).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import docker
import pytest

from tests import needs

PREFIX = Path(os.environ.get("SGLANG_IMAGES_ENGINE26", "/opt/docker-26"))
BINARIES = ("usr/sbin/dockerd", "usr/bin/containerd", "usr/bin/containerd-shim-runc-v2")


def missing() -> str | None:
    """Why a second engine cannot start here, or None."""
    absent = [b for b in BINARIES if not (PREFIX / b).is_file()]
    if absent:
        return f"engine 26 binaries missing under {PREFIX} ({', '.join(absent)}); `.ci/install-engine` installs them"
    if shutil.which("runc") is None or shutil.which("ip") is None:
        return "runc and iproute2 are needed for a second engine"
    if os.geteuid() != 0:
        return "a second engine needs root"
    return None


def require() -> None:
    problem = missing()
    if problem is not None:
        needs.unavailable("a second Docker engine", problem)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


class SecondEngine:
    """dockerd 26 with the containerd image store on `self.host`; everything it made goes at `stop()`."""

    def __init__(self, folder: Path, *, nat: bool = False, netns: str | None = None) -> None:
        self.name = "sgl" + uuid.uuid4().hex[:8]          # bridge names are at most 15 characters
        self.folder = folder
        self.root = folder / "data"
        self.run_dir = Path("/run") / self.name             # unix sockets: paths of at most 104 characters
        self.sock = self.run_dir / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.subnet = f"10.{213 + (int(self.name[3:5], 16) % 40)}.{int(self.name[5:7], 16)}"
        self.nat = nat
        # In a network namespace of its own the engine runs as on a host without iptables: no bridge at all
        # (`--bridge=none`, which there deletes no docker0 of the host's), containers on the host network.
        self.netns = netns
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: docker.DockerClient | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment that points the docker CLI, buildx and the SDK at this engine."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def client(self) -> docker.DockerClient:
        """One SDK client of this engine (closed at `stop()`)."""
        if self._client is None:
            self._client = docker.DockerClient(base_url=self.host, timeout=600)
        return self._client

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True)
        config = self.folder / "daemon.json"
        config.write_text(json.dumps({"features": {"containerd-snapshotter": True}}))
        if self.netns is None:
            _run("ip", "link", "add", self.name, "type", "bridge")
            _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.name)
            _run("ip", "link", "set", self.name, "up")
        if self.nat:
            self._nat("-A")
        path = f"{PREFIX / 'usr/bin'}:{PREFIX / 'usr/sbin'}:{os.environ.get('PATH', '')}"
        log = (self.folder / "dockerd.log").open("ab")
        inside = in_netns(self.netns) if self.netns else []
        self.proc = subprocess.Popen(
            [*inside, str(PREFIX / "usr/sbin/dockerd"), "--config-file", str(config), "--data-root", str(self.root),
             "--exec-root", str(self.run_dir / "exec"), "--pidfile", str(self.folder / "dockerd.pid"),
             "-H", self.host, "--bridge", "none" if self.netns else self.name, "--iptables=false",
             "--ip6tables=false"],
            stdout=log, stderr=log, env={**os.environ, "PATH": path}, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.sock.exists() and self._answers():
                return
            time.sleep(0.5)
        tail = (self.folder / "dockerd.log").read_text(errors="replace")[-2000:]
        self.stop()
        pytest.fail(f"the second engine did not start:\n{tail}")

    def _answers(self) -> bool:
        # The CLI, not the SDK: docker-py leaks a socket when its constructor meets a daemon not yet up.
        return subprocess.run(["docker", "version"], env=self.env, capture_output=True, check=False).returncode == 0

    def load(self, ref: str) -> None:
        """Copy image `ref` of the engine the environment names (the machine's own) into this one (`docker save |
        docker load`)."""
        with subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE) as saving:
            loaded = subprocess.run(["docker", "load"], stdin=saving.stdout, env=self.env, capture_output=True,
                                    text=True, check=False)
        assert saving.returncode == 0 and loaded.returncode == 0, f"docker save {ref} | docker load: {loaded.stderr}"

    def wipe(self) -> None:
        """A fresh runner: no image, no build cache."""
        client = self.client()
        for image in client.images.list(all=True):
            client.images.remove(str(image.id), force=True)
        subprocess.run(["docker", "builder", "prune", "--all", "--force"], env=self.env, check=True,
                       capture_output=True)

    def stop(self) -> None:
        """Everything goes, each step whatever the others did: the engine and its containerd (one process
        group), the rules, the bridge, the mounts and the folders."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None:
            for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
                with suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.nat:
            with suppress(subprocess.CalledProcessError):
                self._nat("-D")
        subprocess.run(["ip", "link", "del", self.name], capture_output=True, check=False)
        # containerd leaves read-only mounts of its snapshots behind a killed engine: unmount, then remove
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if len(line.split()) > 1 and line.split()[1].startswith((str(self.folder), str(self.run_dir)))]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _nat(self, action: str) -> None:
        """One masquerade rule and two forward rules for this bridge only (the engine writes none)."""
        source = f"{self.subnet}.0/24"
        _run("iptables", "-t", "nat", action, "POSTROUTING", "-s", source, "!", "-o", self.name, "-j", "MASQUERADE")
        for direction in ("-i", "-o"):
            _run("iptables", action if action == "-D" else "-I", "FORWARD", direction, self.name, "-j", "ACCEPT")


def in_netns(name: str) -> list[str]:
    """The prefix that runs a command in network namespace `name` and nothing else: `ip netns exec` also
    mounts a /sys of its own, which hides the cgroup hierarchy an engine needs."""
    return ["nsenter", f"--net=/run/netns/{name}"]


@contextmanager
def network_namespace() -> Iterator[str]:
    """A network namespace of its own, its loopback up (nothing else: nothing outside reaches it); deleted after."""
    name = "sglns" + uuid.uuid4().hex[:8]
    _run("ip", "netns", "add", name)
    try:
        _run(*in_netns(name), "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


@contextmanager
def second_engine(folder: Path, *, nat: bool = False, netns: str | None = None) -> Iterator[SecondEngine]:
    engine = SecondEngine(folder, nat=nat, netns=netns)
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()
