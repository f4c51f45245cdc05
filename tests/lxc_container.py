"""A real LXC container from an OCI archive or a registry, as the tests need it: LXC's `oci` template copies the
image (skopeo) into a temporary folder of its own (`--no-cache`: tests side by side share no blob cache, which one
would clean under the other's feet) and unpacks it (umoci), the config gets no network (no bridge on test
machines) and the image's own init (the oci template only turns the image's command into lxc.execute.cmd), it is
started, and always destroyed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cli import cli

LXC_PATH = Path("/var/lib/lxc")
# Where making a container writes gigabytes: the oci template's copy of the blobs (`--no-cache`: mktemp in /tmp),
# skopeo's unpacking of an oci-archive on the way (/var/tmp, its folder for big files; none from a registry), the
# root file system.
LXC_WRITES = (Path("/tmp"), Path("/var/tmp"), LXC_PATH)
INIT = "/usr/local/sbin/sglang-images-init"


def lxc(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def state(name: str) -> str:
    return lxc("lxc-info", "-n", name, "-s", "-H", check=False).stdout.strip()


@contextmanager
def container(image: Path | str, *, home: Path | None = None, start: bool = True,
              drop_environment: bool = False) -> Iterator[str]:
    """A container named sgi-test-XXXX made from `image`: an OCI archive's path, or a `docker://REPO@sha256:…`
    the template copies from its registry (`home`: the HOME whose registries.conf lets skopeo reach it);
    `drop_environment` removes the image's lxc.environment lines, as Proxmox keeps the image's Env for the
    init only."""
    name = f"sgi-test-{uuid.uuid4().hex[:8]}"
    assert isinstance(image, Path) or image.startswith("docker://"), f"neither an archive's Path nor docker://: {image}"
    url = f"oci-archive:{image}:latest" if isinstance(image, Path) else image
    try:
        started = time.monotonic()
        create = subprocess.run(["lxc-create", "-n", name, "-t", "oci", "--", "--no-cache", "--url", url],
                                capture_output=True, text=True, timeout=1800,
                                env={**os.environ, "HOME": str(home)} if home else None)
        assert create.returncode == 0, f"lxc-create from {url} failed: {create.stderr[-2000:]}"
        created = time.monotonic() - started
        config = LXC_PATH / name / "config"
        lines = [ln for ln in config.read_text().splitlines()
                 if not ln.startswith("lxc.net.0.") and not (drop_environment and ln.startswith("lxc.environment"))]
        lines += ["lxc.net.0.type = empty", f"lxc.init.cmd = {INIT}"]
        config.write_text("\n".join(lines) + "\n")
        if start:
            start_container(name)
        print(f"{name}: created in {created:.1f}s from {url}")
        yield name
    finally:
        lxc("lxc-stop", "-k", "-n", name, check=False)
        lxc("lxc-destroy", "-n", name, check=False)


def start_container(name: str) -> None:
    """Start container `name` (made by `container`) and see that its init stays up."""
    lxc("lxc-start", "-n", name, "-d")
    lxc("lxc-wait", "-n", name, "-s", "RUNNING", "-t", "30")
    time.sleep(0.5)  # an init that dies at once still looks RUNNING for a moment
    assert state(name) == "RUNNING", f"{name} did not stay up: {lxc('lxc-info', '-n', name, check=False)}"


def verified_in(name: str, stages: str, out: Path) -> dict[str, object]:
    """`verify --lxc-name` of container `name` (its own Python runs the probe): the results' one cell."""
    started = time.monotonic()
    done = cli("verify", "--lxc-name", name, "--stages", stages, "--out", str(out), timeout=3600)
    print(f"verify in {name}: {time.monotonic() - started:.0f}s, exit {done.returncode}")
    assert "Traceback" not in done.stderr
    cell: dict[str, object] = json.loads(out.read_text())["cells"][0]
    return cell


def attach(name: str, *argv: str, clear_env: bool = True) -> str:
    flags = ["--clear-env"] if clear_env else []
    return lxc("lxc-attach", "-n", name, *flags, "--", *argv).stdout


MAPPED_ROOT = 100000   # the host uid and gid of an unprivileged container's root, as LXC and Proxmox map it


@contextmanager
def unprivileged(nodes: dict[str, tuple[int, int, int]], extra: tuple[str, ...] = ()) -> Iterator[tuple[str, Path]]:
    """An unprivileged container without an image, started: a root folder of its own whose /etc, /root, /tmp,
    /run and /var belong to the mapped root (as Proxmox makes them), this machine's /usr shared read-only, its
    own network namespace (`lxc.net.0.type = empty`; an unprivileged container may not mount sysfs in the
    host's), and the idmap u/g 0 100000 65536. `nodes`: {NAME: (major, minor, mode)} made with mknod beside it
    and bound in at /dev/NAME; `extra`: more config lines. Yields (name, its folder); always destroyed."""
    name = f"sgi-unpriv-{uuid.uuid4().hex[:8]}"
    home = Path("/tmp") / name
    rootfs = home / "rootfs"
    try:
        for part in ("usr", "etc/profile.d", "tmp", "root", "dev", "proc", "sys", "run", "var/tmp", "home"):
            (rootfs / part).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            if Path("/", link).is_symlink():
                (rootfs / link).symlink_to(Path("/", link).readlink())
        for copied in ("passwd", "group", "profile"):
            shutil.copy2(Path("/etc", copied), rootfs / "etc" / copied)
        for owned in ("etc", "tmp", "root", "run", "var", "home"):
            lxc("chown", "-R", f"{MAPPED_ROOT}:{MAPPED_ROOT}", str(rootfs / owned))
        (rootfs / "tmp").chmod(0o1777)
        (home / "nodes").mkdir()
        binds = []
        for node, (major, minor, mode) in nodes.items():
            made = home / "nodes" / node
            lxc("mknod", "-m", f"{mode:o}", str(made), "c", str(major), str(minor))
            binds.append(f"lxc.mount.entry = {made} dev/{node} none bind,optional,create=file")
        config = LXC_PATH / name / "config"
        config.parent.mkdir(parents=True)
        config.write_text("\n".join([
            f"lxc.uts.name = {name}", f"lxc.rootfs.path = dir:{rootfs}", "lxc.net.0.type = empty",
            f"lxc.idmap = u 0 {MAPPED_ROOT} 65536", f"lxc.idmap = g 0 {MAPPED_ROOT} 65536",
            "lxc.apparmor.profile = unconfined", "lxc.mount.auto = proc:rw sys:rw cgroup:rw", "lxc.autodev = 1",
            "lxc.init.cmd = /bin/sleep infinity", "lxc.mount.entry = /usr usr none rbind,ro 0 0", *binds, *extra,
        ]) + "\n")
        lxc("lxc-start", "-n", name, "-d", "-l", "DEBUG", "-o", str(home / "lxc.log"))
        lxc("lxc-wait", "-n", name, "-s", "RUNNING", "-t", "30")
        time.sleep(0.5)
        assert state(name) == "RUNNING", (home / "lxc.log").read_text()[-2000:]
        yield name, home
    finally:
        lxc("lxc-stop", "-k", "-n", name, check=False)
        lxc("lxc-destroy", "-n", name, check=False)
        shutil.rmtree(home, ignore_errors=True)
