"""The real SGLang 0.5.16 cells delivered into real LXC containers: exported by `nox -s export` (forced: no GPU
here, so nothing is verified and the archive says so), created by LXC's own `oci` template, started with the
image's init, and verified in place by `verify --lxc-name` with the container's Python.

- `none` (the seed incident): fails at import with cuda-home-missing inside LXC too.
- `pip`: every CPU stage passes inside LXC, the JIT compiles included: CUDA_HOME and PATH arrived.
- the environment reaches an attach shell, a login shell, an empty-environment login shell (what Proxmox
  leaves when the image's Env goes to the init only) and the init; systemd units get it through
  DefaultEnvironment (the images have no systemd: the file is checked, no unit is run).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.results import RunResults
from tests import needs
from tests.cli import cli
from tests.disk_room import disk_room
from tests.lxc_container import attach, container

NONE = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
CPU_STAGES = "facts,import,flavour,arch-audit,toolchain,jit-compile"


def exported(run: RunResults, cell_id: str, out: Path) -> Path:
    image = run.cell(cell_id)
    assert image is not None and image.image.id
    started = time.monotonic()
    done = cli("export", image.image.id, "--out", str(out), "--force", timeout=3600)
    assert done.returncode == 0, done.stderr
    archive = out / f"{cell_id}.oci.tar"
    print(f"export {cell_id}: {time.monotonic() - started:.0f}s, {archive.stat().st_size / 1e9:.2f} GB archive "
          f"from a {(image.image.size_bytes or 0) / 1e9:.2f} GB image")
    return archive


def verified(name: str, out: Path) -> dict[str, object]:
    started = time.monotonic()
    done = cli("verify", "--lxc-name", name, "--stages", CPU_STAGES, "--out", str(out), timeout=3600)
    print(f"verify in {name}: {time.monotonic() - started:.0f}s, exit {done.returncode}")
    assert "Traceback" not in done.stderr
    cell: dict[str, object] = json.loads(out.read_text())["cells"][0]
    return cell


def test_the_seed_incident_inside_lxc(run: RunResults, tmp_path: Path) -> None:
    archive = exported(run, NONE, tmp_path)
    try:
        with container(archive) as name:
            archive.unlink()   # the rootfs is unpacked: free the disk before verifying
            cell = verified(name, tmp_path / "none.json")
    finally:
        archive.unlink(missing_ok=True)
    stages = {s["name"]: s for s in cell["stages"]}  # type: ignore[attr-defined]
    assert stages["import"]["status"] == "failed" and stages["import"]["failure_class"] == "cuda-home-missing"
    assert stages["import"]["where"] == "lxc (cpu)"
    assert cell["verdict"] == "expected-failure", cell["verdict_reason"]


def test_the_pip_cell_passes_every_cpu_stage_inside_lxc(run: RunResults, tmp_path: Path) -> None:
    archive = exported(run, PIP, tmp_path)
    try:
        with container(archive) as name:
            archive.unlink()
            cell = verified(name, tmp_path / "pip.json")
            env = {
                "attach": attach(name, "/bin/sh", "-c", 'echo "$CUDA_HOME $(command -v nvcc)"'),
                "login": attach(name, "/bin/sh", "-lc", 'echo "$CUDA_HOME $(command -v nvcc)"'),
                "empty login": attach(name, "env", "-i", "/bin/sh", "-lc", 'echo "$CUDA_HOME $(command -v nvcc)"'),
                "init": attach(name, "/bin/sh", "-c", "tr '\\0' '\\n' < /proc/1/environ | grep ^CUDA_HOME="),
                "systemd": attach(name, "cat", "/etc/systemd/system.conf.d/sglang-images.conf"),
                "shm": attach(name, "/bin/sh", "-c", "grep ' /dev/shm ' /proc/mounts"),
            }
    finally:
        archive.unlink(missing_ok=True)
    stages = {s["name"]: s for s in cell["stages"]}  # type: ignore[attr-defined]
    for name in CPU_STAGES.split(","):
        assert stages[name]["status"] == "passed", (name, stages[name].get("reason"))
    assert stages["facts"]["evidence"]["env"]["CUDA_HOME"] == "/usr/local/cuda"
    assert str(cell["cell_id"]).startswith(f"{PIP}@lxc-")
    for how in ("attach", "login", "empty login"):
        assert env[how].split() == ["/usr/local/cuda", "/usr/local/cuda/bin/nvcc"], (how, env[how])
    assert env["init"].strip() == "CUDA_HOME=/usr/local/cuda"
    assert '"CUDA_HOME=/usr/local/cuda"' in env["systemd"] and "DefaultEnvironment=" in env["systemd"]
    assert env["shm"].split()[:3] == ["tmpfs", "/dev/shm", "tmpfs"]  # mounted by the image's init


NEEDS_BYTES = 20 * 10**9   # archive + LXC's copy of its blobs + the unpacked rootfs of a ~10 GB cell


@pytest.fixture(autouse=True)
def _tools_and_room(tmp_path: Path) -> Iterator[None]:
    needs.tools("skopeo", "umoci", "jq", "lxc-create")
    # The archive goes to tmp_path, LXC's copy of its blobs to /var/cache/lxc, the root file system to /var/lib/lxc.
    with disk_room(NEEDS_BYTES, "an LXC container of a real cell", [tmp_path, Path("/var/cache"), Path("/var/lib")]):
        yield
