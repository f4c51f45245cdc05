"""A real distribution registry (Debian's `docker-registry`) on loopback, for integration tests.

Plain HTTP on 127.0.0.1 works because the engine allows 127.0.0.0/8 as insecure by default. The
storage folder outlives a stop, so a test can stop it mid-promote, or restart it read-only.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import docker
import pytest

from buildscripts.registry import through_engine
from tests import needs

BINARY = "docker-registry"


def push_as_is(client: docker.DockerClient, image_id: str, ref: str) -> str:
    """The local image `image_id` pushed to `ref` as it is (a registry asks for no verdict), the push's tag removed
    again: its manifest digest. The image must keep a tag of its own, or untagging would remove it."""
    assert client.images.get(image_id).tags, f"{image_id} has no tag: untagging {ref} would remove it"
    try:
        return through_engine.push(client, image_id, ref)
    finally:
        through_engine.untag(client, ref)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RegistryServer:
    """`netns`: serve inside that network namespace (its own loopback: only what runs in it reaches the
    registry), as on a machine whose engine has no bridge network."""

    def __init__(self, folder: Path, *, netns: str | None = None) -> None:
        self.binary = needs.tool(BINARY, "apt-get install docker-registry (.ci/install-engine does)")
        self.folder = folder
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.prefix = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []   # second_engine.in_netns
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, readonly: bool = False) -> None:
        config = self.folder / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.folder / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"  maintenance:\n    readonly:\n      enabled: {str(readonly).lower()}\n"
            f"http:\n  addr: {self.url}\n"
        )
        log = (self.folder / "registry.log").open("ab")
        self.proc = subprocess.Popen([*self.prefix, self.binary, "serve", str(config)], stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"registry exited: {(self.folder / 'registry.log').read_text()[-2000:]}")
            if self._answers():
                return
            time.sleep(0.1)
        pytest.fail(f"registry on {self.url} did not answer /v2/ within 20 s")

    def insecure_home(self) -> Path:
        """A HOME folder whose containers registries.conf lets tools that call skopeo without flags (LXC's `oci`
        template) read this plain-HTTP registry; skopeo 1.9 takes no such setting from the environment."""
        home = self.folder / "home"
        conf = home / ".config" / "containers" / "registries.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(f'[[registry]]\nlocation = "{self.url}"\ninsecure = true\n')
        return home

    def _answers(self) -> bool:
        if self.prefix:   # another network namespace: asked from inside it
            ask = f"import urllib.request; urllib.request.urlopen('http://{self.url}/v2/', timeout=2)"
            return subprocess.run([*self.prefix, sys.executable, "-c", ask], capture_output=True,
                                  check=False).returncode == 0
        try:
            with urllib.request.urlopen(f"http://{self.url}/v2/", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
