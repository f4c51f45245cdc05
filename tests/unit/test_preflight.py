"""LXC host preflight: each check from a fixture host tree and fixture container configs (read-only logic)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from buildscripts.lxc import gpu_checks
from buildscripts.lxc.gpu_checks import ContainerView, HostView
from buildscripts.lxc.preflight_check import Attach, Check
from buildscripts.lxc.target import Target
from tests import needs

VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 18:27:13 UTC 2025\n"


def host(tmp_path: Path, *, module: str | None = VERSION, nodes: Sequence[tuple[str, int, int]] = ()) -> HostView:
    if module is not None:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(module)
    (tmp_path / "dev").mkdir(exist_ok=True)
    for name, major, minor in nodes:
        try:
            os.mknod(tmp_path / "dev" / name, stat.S_IFCHR | 0o600, os.makedev(major, minor))
        except PermissionError:
            needs.unavailable("root (to make device nodes)", "run the tests as root, as CI does")
    return HostView(tmp_path)


GPU_NODES = [("nvidia0", 195, 0), ("nvidiactl", 195, 255), ("nvidia-uvm", 508, 0), ("nvidia-uvm-tools", 508, 1)]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_host_without_the_driver_fails_with_what_to_install(tmp_path: Path) -> None:
    checks = by_name(gpu_checks.run_checks(host(tmp_path, module=None), None, "13.0"))
    assert checks["kernel module"].status == "fail" and "install the NVIDIA driver" in checks["kernel module"].fix[0]
    assert checks["driver for the image's CUDA"].status == "skip"
    assert checks["device nodes"].status == "fail"


def test_driver_branch_against_the_images_cuda() -> None:
    assert gpu_checks.driver_for_cuda("580.159.04", "13.0").status == "pass"
    old = gpu_checks.driver_for_cuda("570.86.10", "13.0")
    assert old.status == "fail" and "R580" in old.detail and "580.65.06" in old.detail
    assert gpu_checks.driver_for_cuda("570.86.10", "12.8").status == "pass"
    assert gpu_checks.driver_for_cuda("580.1", None).status == "skip"


def test_a_ready_host_reports_nodes_and_majors(tmp_path: Path) -> None:
    checks = by_name(gpu_checks.run_checks(host(tmp_path, nodes=GPU_NODES), None, "13.0"))
    assert [c.status for c in checks.values()] == ["pass", "pass", "pass"]
    assert "/dev/nvidia-uvm 508:0" in checks["device nodes"].detail


def test_missing_uvm_is_named(tmp_path: Path) -> None:
    checks = by_name(gpu_checks.run_checks(host(tmp_path, nodes=GPU_NODES[:2]), None, None))
    assert checks["device nodes"].status == "fail" and "/dev/nvidia-uvm" in checks["device nodes"].detail
    assert checks["nvidia-uvm"].status == "fail" and "modprobe nvidia-uvm" in checks["nvidia-uvm"].fix[0]


NODES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (508, 0)}


def test_a_proxmox_container_without_devices_gets_the_dev_lines() -> None:
    view = ContainerView(Target.pct("200"), "arch: amd64\nunprivileged: 1\ndev0: /dev/dri/card0\n")
    check = gpu_checks.container_config(view, NODES)
    assert check.status == "fail" and "unprivileged" in check.detail
    assert check.fix == ("add to /etc/pve/lxc/200.conf:", "dev1: /dev/nvidia0", "dev2: /dev/nvidiactl",
                         "dev3: /dev/nvidia-uvm")
    # A container given one GPU of several, without the modeset node, has what CUDA needs.
    more = {**NODES, "/dev/nvidia1": (195, 1), "/dev/nvidia-modeset": (195, 254)}
    one = ContainerView(Target.pct("200"), "dev0: /dev/nvidia1\ndev1: /dev/nvidiactl\ndev2: /dev/nvidia-uvm\n")
    assert gpu_checks.container_config(one, more).status == "pass"
    done = ContainerView(Target.pct("200"), "dev0: /dev/nvidia0\ndev1: /dev/nvidiactl,gid=44\ndev2: /dev/nvidia-uvm\n")
    assert gpu_checks.container_config(done, NODES).status == "pass"


def test_plain_lxc_gets_mount_entries_and_cgroup_lines() -> None:
    config = ("lxc.cgroup2.devices.allow = c 195:* rwm\n"
              "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")
    view = ContainerView(Target.named("ct1"), config)
    check = gpu_checks.container_config(view, NODES)
    assert check.status == "fail" and "privileged" in check.detail
    assert "lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file" in check.fix
    assert "lxc.cgroup2.devices.allow = c 508:* rwm" in check.fix
    assert not any("c 195:" in line for line in check.fix)


def test_the_nvidia_hook_needs_an_unprivileged_container() -> None:
    hook = "lxc.hook.mount = /usr/share/lxc/hooks/nvidia\n"
    privileged = gpu_checks.container_config(ContainerView(Target.named("ct1"), hook), NODES)
    assert privileged.status == "fail" and "refuses privileged" in privileged.detail
    mapped = ContainerView(Target.named("ct1"), hook + "lxc.idmap = u 0 100000 65536\n")
    assert gpu_checks.container_config(mapped, NODES).status == "pass"
    assert gpu_checks.userspace_driver(mapped, "580.159.04").status == "skip"


def test_in_the_running_container_shm_and_the_userspace_driver() -> None:
    def attach(answers: dict[str, tuple[int, str]]) -> Attach:
        return lambda argv: answers["df" if argv[0] == "df" else "ls"]

    small = ContainerView(Target.named("ct1"), "", attach({
        "df": (0, "Filesystem 1K-blocks Used Available Use% Mounted on\nnone 65536 0 65536 0% /dev/shm\n"),
        "ls": (0, "libcuda.so.1\nlibcuda.so.570.86.10\n")}))
    assert gpu_checks.shared_memory(small).status == "warn"
    mismatch = gpu_checks.userspace_driver(small, "580.159.04")
    assert mismatch.status == "fail" and "570.86.10" in mismatch.detail and "580.159.04" in mismatch.fix[0]
    matching = ContainerView(Target.named("ct1"), "", attach({"df": (0, ""), "ls": (0, "libcuda.so.580.159.04\n")}))
    assert gpu_checks.userspace_driver(matching, "580.159.04").status == "pass"
    stopped = ContainerView(Target.named("ct1"), "", None, "STOPPED")
    assert gpu_checks.shared_memory(stopped).status == "skip" and "STOPPED" in gpu_checks.shared_memory(stopped).detail


def test_no_shm_and_no_host_nodes() -> None:
    missing = ContainerView(Target.pct("200"), "", lambda argv: (1, "df: /dev/shm: No such file or directory"))
    check = gpu_checks.shared_memory(missing)
    assert check.status == "fail" and "200.conf" in check.fix[0]
    assert "lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0" in check.fix[0]
    assert gpu_checks.container_config(ContainerView(Target.pct("200"), "unprivileged: 1\n"), {}).status == "skip"


def test_unreadable_config_names_the_file() -> None:
    check = gpu_checks.container_config(ContainerView(Target.named("nope"), None), NODES)
    assert check.status == "fail" and "/var/lib/lxc/nope/config" in check.detail
