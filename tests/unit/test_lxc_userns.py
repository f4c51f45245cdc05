"""Unprivileged LXC containers (Proxmox's default): the idmap read from a config, the GPU nodes as the
container's root would open them, passed nodes recognised by more than a bind source, the loopback of its
network namespace, and the fix lines in plain-LXC and Proxmox spelling; the probe's view of the nodes; a GPU
stage's hint for the container. The real thing runs in tests/integration/test_unprivileged_lxc.py."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from buildscripts.lxc import config_file, fix_hints, gpu_checks, root_access
from buildscripts.lxc.gpu_checks import ContainerView, HostView
from buildscripts.lxc.target import Target
from buildscripts.probe import core, devnodes, gpu_stages
from buildscripts.results import StageResult, Status
from buildscripts.verify import classify

NODES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (238, 0),
         "/dev/nvidia-uvm-tools": (238, 1)}
CHR = stat.S_IFCHR
UNPRIVILEGED = "lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\nlxc.net.0.type = empty\n" + "".join(
    f"lxc.mount.entry = {n} {n[1:]} none bind,optional,create=file\n" for n in NODES)


def host_nodes(mode: int, uid: int = 0, gid: int = 0) -> Any:
    return lambda path: (CHR | mode, uid, gid, NODES[path]) if path in NODES else None


def test_the_idmap_says_who_the_containers_root_is() -> None:
    plain = config_file.parse(UNPRIVILEGED, "lxc")
    assert plain.unprivileged and plain.idmap is not None and plain.idmap.root == (100000, 100000)
    assert plain.idmap.to_inner("u", 100005) == 5 and plain.idmap.to_inner("u", 0) is None
    proxmox = config_file.parse("unprivileged: 1\narch: amd64\n", "pct")
    assert proxmox.idmap == config_file.IdMap(config_file.PVE_DEFAULT)
    assert not config_file.parse("lxc.net.0.type = none\n", "lxc").unprivileged
    assert not config_file.parse("lxc.idmap = u 0 0 65536\nlxc.idmap = g 0 0 65536\n", "lxc").unprivileged  # identity
    # a Proxmox snapshot section is not the running config
    assert not config_file.parse("arch: amd64\n[snap1]\nunprivileged: 1\n", "pct").unprivileged


def test_target_unprivileged_reads_the_containers_config(tmp_path: Path) -> None:
    (tmp_path / "ct1").mkdir()
    (tmp_path / "ct1" / "config").write_text(UNPRIVILEGED)
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "config").write_text("lxc.net.0.type = none\n")
    assert Target.named("ct1", lxc_path=tmp_path).unprivileged()
    assert not Target.named("ct2", lxc_path=tmp_path).unprivileged()
    assert not Target.named("absent", lxc_path=tmp_path).unprivileged()


def test_a_map_without_a_root_fails_with_the_lines_in_both_spellings() -> None:
    half = config_file.parse("lxc.idmap = u 0 100000 65536\n", "lxc")
    check = root_access.idmap_check(half, Target.named("ct"))
    assert check.status == "fail" and "gid 0" in check.detail
    assert "lxc.idmap = g 0 100000 65536" in check.fix
    pct = root_access.idmap_check(config_file.parse("lxc.idmap: u 0 100000 65536\n", "pct"), Target.pct("200"))
    assert "lxc.idmap: g 0 100000 65536" in pct.fix
    assert root_access.idmap_check(config_file.parse("", "lxc"), Target.named("ct")).detail.startswith("privileged")


def test_the_mode_decides_for_an_unprivileged_root_and_not_for_a_privileged_one() -> None:
    idmap = config_file.parse(UNPRIVILEGED, "lxc").idmap
    assert not root_access.root_may_open(0o660, 0, 0, idmap)       # root:root 0660: nobody's inside
    assert root_access.root_may_open(0o666, 0, 0, idmap)
    assert root_access.root_may_open(0o600, 100000, 100000, idmap)  # mapped owner: the container's own node
    assert root_access.root_may_open(0o660, 0, 100000, idmap)       # the group of the container's root
    assert root_access.root_may_open(0o660, 0, 0, None)             # privileged


def test_nodes_of_mode_0660_fail_with_the_fixes_for_plain_lxc_and_proxmox() -> None:
    config = config_file.parse(UNPRIVILEGED, "lxc")
    passed = root_access.passed_nodes(config, NODES, host_nodes(0o660))
    check = root_access.gpu_node_access(config, Target.named("ct"), passed, host_nodes(0o660), None)
    assert check.status == "fail"
    assert "/dev/nvidia0 (mode 0660, host 0:0, nobody:nobody inside)" in check.detail
    assert any("NVreg_DeviceFileMode=0666" in line for line in check.fix)
    assert any('KERNEL=="nvidia*", MODE="0666"' in line for line in check.fix)
    pct_config = config_file.parse("unprivileged: 1\n" + UNPRIVILEGED.replace(" = ", ": "), "pct")
    pct = root_access.gpu_node_access(pct_config, Target.pct("200"), passed, host_nodes(0o660), None)
    assert "dev0: /dev/nvidia-uvm,mode=0666" in pct.fix and "dev3: /dev/nvidiactl,mode=0666" in pct.fix
    opened = root_access.gpu_node_access(config, Target.named("ct"), passed, host_nodes(0o666), None)
    assert opened.status == "pass" and opened.detail.startswith("unprivileged;")


def test_what_the_containers_root_met_inside_counts() -> None:
    config = config_file.parse(UNPRIVILEGED, "lxc")
    passed = root_access.passed_nodes(config, NODES, host_nodes(0o666))
    said = "sh: 1: cannot open /dev/nvidia0: Permission denied\nopened\n"
    check = root_access.gpu_node_access(config, Target.named("ct"), passed, host_nodes(0o666), lambda argv: (0, said))
    assert check.status == "fail" and "inside: /dev/nvidia0: Permission denied" in check.detail


def test_devn_entries_are_made_for_the_container_and_passed_nodes_are_found_by_more_than_their_source() -> None:
    config = config_file.parse("unprivileged: 1\ndev0: path=/dev/nvidia0,mode=0666\ndev1: /dev/nvidiactl,gid=44\n"
                             "lxc.mount.entry: /dev/char/238:0 dev/nvidia-uvm none bind,optional,create=file\n"
                             "lxc.mount.entry: /srv/gpu/uvm-tools dev/nvidia-uvm-tools none bind,create=file\n", "pct")

    def seen(path: str) -> Any:
        return (CHR | 0o666, 0, 0, (238, 0)) if path == "/dev/char/238:0" else host_nodes(0o666)(path)

    passed = {p.node: p for p in root_access.passed_nodes(config, NODES, seen)}
    assert set(passed) == set(NODES)                 # by devN, by device number, by target
    assert passed["/dev/nvidia0"].options == {"mode": "0666"} and passed["/dev/nvidiactl"].key == "dev1"
    strict = {"/dev/char/238:0": (CHR | 0o660, 0, 0, (238, 0)), "/srv/gpu/uvm-tools": (CHR | 0o660, 0, 0, (238, 1))}
    refused = root_access.gpu_node_access(config, Target.pct("200"), list(passed.values()), strict.get, None)
    assert refused.status == "fail" and "/dev/nvidia-uvm bound from /dev/char/238:0 (mode 0660" in refused.detail
    assert "/dev/nvidiactl" not in refused.detail and "/dev/nvidia0" not in refused.detail   # made for the container
    check = root_access.gpu_node_access(config, Target.pct("200"), list(passed.values()), seen, None)
    assert "/dev/nvidiactl (dev1: made for the container, 0:44 mode 0660)" in check.detail
    assert passed["/dev/nvidia-uvm"].source == "/dev/char/238:0"
    own = {"/srv/gpu/uvm-tools": (CHR | 0o660, 0, 0, (238, 1))}
    by_source = root_access.gpu_node_access(config, Target.pct("200"), [passed["/dev/nvidia-uvm-tools"]],
                                          lambda path: own.get(path) or host_nodes(0o666)(path), None)
    assert "/dev/nvidia-uvm-tools bound from /srv/gpu/uvm-tools (mode 0660" in by_source.detail   # the file bound in
    view = ContainerView(Target.pct("200"), "unprivileged: 1\ndev0: path=/dev/nvidia0,mode=0666\ndev1: /dev/nvidiactl\n"
                         "lxc.mount.entry: /srv/uvm dev/nvidia-uvm none bind,create=file\n"
                         "lxc.mount.entry: /srv/uvmt dev/nvidia-uvm-tools none bind,create=file\n")
    assert gpu_checks.container_config(view, NODES).status == "pass"


def test_the_loopback_of_the_containers_namespace() -> None:
    plain = config_file.parse(UNPRIVILEGED, "lxc")
    target = Target.named("ct")
    down = root_access.loopback(plain, target, lambda argv: (0, "0x8\n"))
    assert down.status == "fail" and "lxc.net.0.flags = up" in down.fix
    assert root_access.loopback(plain, target, lambda argv: (0, "0x9\n")).status == "pass"
    assert root_access.loopback(plain, target, None).status == "warn"      # empty, no flags = up, not running
    flagged = config_file.parse(UNPRIVILEGED + "lxc.net.0.flags = up\n", "lxc")
    assert root_access.loopback(flagged, target, None).status == "skip"
    shared = config_file.parse("lxc.net.0.type = none\n", "lxc")
    assert root_access.loopback(shared, target, None).status == "pass"
    pct_bare = root_access.loopback(config_file.parse("unprivileged: 1\n", "pct"), Target.pct("200"),
                                  lambda argv: (0, "0x8\n"))
    assert "lxc.net.0.type: empty" in pct_bare.fix and "lxc.net.0.flags: up" in pct_bare.fix
    pct_net = root_access.loopback(config_file.parse("unprivileged: 1\nnet0: name=eth0,bridge=vmbr0\n", "pct"),
                                 Target.pct("200"), lambda argv: (0, "0x8\n"))
    assert "its init must bring lo up" in pct_net.fix[0] and "ip link set lo up" in pct_net.fix[1]


def test_preflight_runs_the_user_namespace_checks_for_a_container(tmp_path: Path) -> None:
    host = HostView(tmp_path)
    view = ContainerView(Target.named("ct"), UNPRIVILEGED, lambda argv: (0, "0x8\nopened\n"))
    names = {c.name: c for c in gpu_checks.user_namespace(view, host, NODES)}
    assert names["idmap"].detail.startswith("unprivileged: its root is uid 100000")
    assert names["loopback in its network namespace"].status == "fail"


def stage(cls: str) -> StageResult:
    return StageResult(name="gpu-visible", status=Status.FAILED, reason="torch sees no usable GPU",
                       failure_class=cls, hint="run it with the NVIDIA runtime or CDI and a GPU request")


def test_a_gpu_stage_in_an_lxc_container_gets_lxc_advice_not_dockers() -> None:
    unpriv = config_file.parse(UNPRIVILEGED, "lxc")
    hint = fix_hints.for_container(stage("gpu-unusable"), "LXC container ct1", "lxc", "/var/lib/lxc/ct1/config",
                                   unpriv).hint or ""
    assert "unprivileged (its root is uid 100000" in hint and "NVreg_DeviceFileMode=0666" in hint
    assert "--lxc-name ct1" in hint and "NVIDIA runtime" not in hint
    pct = fix_hints.for_container(stage("gpu-node-permission"), "CT 200", "pct", "/etc/pve/lxc/200.conf",
                                  config_file.parse("unprivileged: 1\n", "pct")).hint or ""
    assert "`dev0: /dev/nvidia0,mode=0666`" in pct and "--ctid 200" in pct
    privileged = fix_hints.for_container(stage("gpu-unusable"), "LXC container ct1", "lxc", "/x",
                                         config_file.parse("", "lxc")).hint or ""
    assert "privileged" in privileged and "lxc.cgroup2.devices.allow = c 195:* rwm" in privileged
    other = stage("shm-too-small")
    assert fix_hints.for_container(other, "CT 200", "pct", "/x", unpriv) is other


def test_the_probe_names_the_nodes_it_may_not_open() -> None:
    assert devnodes.observe("/dev/null") == [] or devnodes.observe("/dev/null")[0]["rw"]   # /dev/null: open to all
    seen = [{"path": "/dev/nvidia0", "mode": "0660", "uid": 65534, "gid": 65534, "rw": False},
            {"path": "/dev/nvidiactl", "mode": "0666", "uid": 65534, "gid": 65534, "rw": True}]
    said = devnodes.refused(seen)
    assert said == "/dev/nvidia0 (mode 0660, owner 65534:65534) " + devnodes.REFUSED
    assert devnodes.refused(seen[1:]) == ""


def test_gpu_visible_keeps_nvidia_smis_words_and_names_the_node_it_may_not_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 case of issue 34: nodes of mode 0660 owned by root, seen through the idmap as nobody's."""
    info = {"torch": "2.11.0+cu130", "cuda_runtime": "13.0", "driver_cuda": "13.0", "arch_list": ["sm_90"],
            "warnings": [], "error": "RuntimeError: No CUDA GPUs are available"}
    monkeypatch.delenv(gpu_stages.NO_GPU_ENV, raising=False)
    monkeypatch.setattr("buildscripts.probe.gpu_stages.glob.glob", lambda pattern: ["/dev/nvidia0"])
    monkeypatch.setattr(core, "python_snippet", lambda code, timeout: subprocess.CompletedProcess(
        [], 0, stdout=gpu_stages.JSON_PREFIX + json.dumps(info)))
    monkeypatch.setattr(core, "sh", lambda argv, timeout: subprocess.CompletedProcess(
        argv, 9, "Failed to initialize NVML: Insufficient Permissions\n"))
    monkeypatch.setattr(devnodes, "observe", lambda: [
        {"path": "/dev/nvidia0", "mode": "0660", "uid": 65534, "gid": 65534, "rw": False},
        {"path": "/dev/nvidiactl", "mode": "0660", "uid": 65534, "gid": 65534, "rw": False}])
    result = core.run_stage(core.Context(archs=["sm_90a"], mode="lxc"), core.REGISTRY["gpu-visible"])
    assert result["status"] == core.FAILED
    assert result["evidence"]["nvidia_smi_error"] == "Failed to initialize NVML: Insufficient Permissions"
    assert result["evidence"]["node_access"][0]["mode"] == "0660"
    assert "/dev/nvidia0 (mode 0660, owner 65534:65534)" in result["reason"]
    assert "nvidia-smi: Failed to initialize NVML: Insufficient Permissions" in result["log_excerpt"]
    match = classify.classify(result["reason"] + "\n" + result["log_excerpt"], "gpu-visible")
    assert match.id == "gpu-node-permission"
