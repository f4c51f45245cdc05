"""A GPU in an LXC container: the config lines preflight recommends are the ones that ran on an H200
(evidence/h200-lxc-2026-12-01), the LXC failure forms seen there are classified with the exact fix, and
preflight refuses hostile or empty arguments instead of dropping them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from buildscripts.commands import preflight as preflight_command
from buildscripts.commands.verify import parse
from buildscripts.errors import ConfigError
from buildscripts.lxc import fix_hints, gpu_checks
from buildscripts.lxc.gpu_checks import ContainerView, HostView
from buildscripts.lxc.preflight_check import Check
from buildscripts.lxc.target import LXC_PATH, STANDARD_NODES, Target, config_line
from buildscripts.results import StageResult, Status
from buildscripts.verify import classify
from buildscripts.workspace import Workspace
from tests.commands import call

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence" / "h200-lxc-2026-12-01"
H200_NODES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (238, 0),
              "/dev/nvidia-uvm-tools": (238, 1)}


def worked(name: str = "good") -> list[str]:
    """The config lines of a container the evidence ran in, spacing normalised."""
    text = (EVIDENCE / "configs" / f"{name}.config").read_text()
    return [re.sub(r"\s+", " ", line.strip()) for line in text.splitlines()]


def stages(run: str) -> list[StageResult]:
    data = json.loads((EVIDENCE / "runs" / f"{run}.json").read_text())
    return [StageResult.model_validate(s) for s in data["cells"][0]["stages"]]


def reclassified(stage: StageResult) -> StageResult:
    return classify.label(stage.model_copy(update={"failure_class": None, "hint": None}))


# ----------------------------------------------------------------------------- the recommended lines

def test_the_lines_preflight_recommends_for_a_bare_container_are_the_ones_that_worked() -> None:
    bare = ContainerView(Target.named("ct"), "lxc.cgroup2.devices.deny = a\n", lambda argv: (0, "opened\n"))
    gpu = gpu_checks.container_config(bare, H200_NODES)
    std = gpu_checks.standard_nodes(bare, HostView())
    assert gpu.status == "fail" and std.status == "fail"
    recommended = [*gpu.fix[1:], *std.fix[1:-1],
                   config_line(Target.named("ct"), "lxc.mount.entry", gpu_checks.SHM_MOUNT)]
    assert len(recommended) == 4 + 2 + len(STANDARD_NODES) + 1
    assert [line for line in recommended if line not in worked()] == []


def test_the_proxmox_lines_are_the_same_rules_in_pct_syntax() -> None:
    plain = ContainerView(Target.named("ct"), "lxc.cgroup2.devices.deny = a\n")
    # A Proxmox container that binds nodes itself gets the same lines as plain LXC, `key: value`.
    bound = "arch: amd64\nlxc.cgroup2.devices.deny: a\nlxc.mount.entry: /dev/nvidia-uvm-tools x none bind 0 0\n"
    pct = ContainerView(Target.pct("200"), bound)
    for check in (gpu_checks.container_config, lambda v, _n: gpu_checks.standard_nodes(v, HostView())):
        plain_lines = [line.replace(" =", ":", 1) for line in check(plain, H200_NODES).fix[1:]]
        pct_lines = check(pct, H200_NODES).fix[1:]
        assert [line for line in pct_lines if line not in plain_lines] == []
    assert gpu_checks.standard_nodes(pct, HostView()).fix[0] == "add to /etc/pve/lxc/200.conf:"
    # Without binds, Proxmox's own passthrough of the same four nodes (devN: also grants their cgroup rule).
    bare = gpu_checks.container_config(ContainerView(Target.pct("200"), "arch: amd64\n"), H200_NODES)
    assert bare.fix[1:] == ("dev0: /dev/nvidia0", "dev1: /dev/nvidiactl", "dev2: /dev/nvidia-uvm",
                            "dev3: /dev/nvidia-uvm-tools")


def test_the_containers_that_ran_pass_or_fail_the_config_checks_as_they_did() -> None:
    for name, expected in (("good", "pass"), ("no-toolkit", "pass"), ("no-std-devices", "fail")):
        view = ContainerView(Target.named(f"ct-{name}"), (EVIDENCE / "configs" / f"{name}.config").read_text())
        assert gpu_checks.container_config(view, H200_NODES).status == "pass"
        assert gpu_checks.standard_nodes(view, HostView()).status == expected, name


def test_standard_rules_follow_the_config_in_order_with_its_includes(tmp_path: Path) -> None:
    common = tmp_path / "usr/share/lxc/config/common.conf"
    common.parent.mkdir(parents=True)
    common.write_text("lxc.cgroup2.devices.deny = a\n" + "".join(
        f"lxc.cgroup2.devices.allow = c {rule} rwm\n" for rule in STANDARD_NODES.values()))
    host = HostView(tmp_path)
    included = ContainerView(Target.named("ct"), "lxc.include = /usr/share/lxc/config/common.conf\n"
                                                 "lxc.cgroup2.devices.allow = c 195:* rwm\n")
    assert gpu_checks.standard_nodes(included, host).status == "pass"
    # A GPU recipe that starts over with `deny = a` after the include wipes LXC's standard rules.
    reset = ContainerView(Target.named("ct"), f"{included.config}lxc.cgroup2.devices.deny = a\n")
    assert gpu_checks.standard_nodes(reset, host).status == "fail"
    loop = ContainerView(Target.named("ct"), "lxc.include = /loop.conf\n")
    (tmp_path / "loop.conf").write_text("lxc.include = /loop.conf\n")
    assert gpu_checks.standard_nodes(loop, host).status == "pass"   # no rule at all: everything is allowed
    # Proxmox puts its common config first: a container's own lines add to it.
    assert gpu_checks.standard_nodes(ContainerView(Target.pct("200"), "arch: amd64\n"), host).status == "pass"


def test_standard_nodes_in_the_running_container() -> None:
    said = "sh: 1: cannot open /dev/urandom: Operation not permitted\nopened\n"
    denied = gpu_checks.standard_nodes(ContainerView(Target.named("ct"), "", lambda argv: (0, said)), HostView())
    assert denied.status == "fail" and "/dev/urandom" in denied.detail
    assert denied.fix == ("add to /var/lib/lxc/ct/config:", "lxc.cgroup2.devices.allow = c 1:9 rwm",
                          "then restart the container")
    # lxc-attach's own complaint names /dev/null; a permission error of another kind is not a cgroup denial.
    attach = "lxc-attach: ct: utils.c: open_devnull: 1231 Operation not permitted - Can't open /dev/null\n"
    assert "1:3" in gpu_checks.standard_nodes(ContainerView(Target.named("ct"), "", lambda argv: (0, attach)),
                                             HostView()).fix[1]
    other = "sh: 1: cannot open /dev/full: Permission denied\nopened\n"
    assert gpu_checks.standard_nodes(ContainerView(Target.named("ct"), "", lambda argv: (0, other)),
                                    HostView()).status == "pass"


def test_uvm_major_from_proc_devices(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text("Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n"
                                           "\nBlock devices:\n  8 sd\n")
    assert HostView(tmp_path).char_majors() == {"mem": 1, "nvidia": 195, "nvidiactl": 195, "nvidia-uvm": 238}


# ------------------------------------------------------------------------- the failure forms seen there

def test_a_container_without_the_standard_rules_names_the_missing_rule() -> None:
    found = {s.name: s for s in stages("no-std-devices")}
    assert found["import"].failure_class == "lxc-device-not-allowed"
    assert "`lxc.cgroup2.devices.allow = c 1:9 rwm`" in (found["import"].hint or "")
    again = fix_hints.name_missing_rules(reclassified(found["import"]), Target.pct("200"))
    assert again.hint and again.hint.startswith("add to /etc/pve/lxc/200.conf: `lxc.cgroup2.devices.allow: c 1:9 rwm`")
    shell = StageResult(name="probe", status=Status.FAILED, reason="the probe ended",
                        log_excerpt="sh: 1: cannot create /dev/null: Operation not permitted")
    assert "c 1:3 rwm" in (fix_hints.name_missing_rules(classify.label(shell), Target.named("ct")).hint or "")


def test_the_seed_container_fails_at_import_with_the_fix_before_any_server_start() -> None:
    found = {s.name: s for s in stages("no-toolkit")}
    first = next(s for s in found.values() if s.status is Status.FAILED)
    assert first.name == "import" and reclassified(first).failure_class == "cuda-home-missing"
    assert "CUDA_HOME" in (reclassified(first).hint or "")


def test_the_old_login_deep_gemm_failure_keeps_the_compilers_words_and_is_classified() -> None:
    raw: list[dict[str, Any]] = json.loads((EVIDENCE / "runs" / "old-login-gpu-stages.json").read_text())
    smoke = next(r for r in raw if r["name"] == "kernel-smoke")
    deep_gemm = smoke["evidence"]["deep_gemm"]
    assert "kernel.cu: No such file or directory" in deep_gemm["compiler"]["error"]
    assert deep_gemm["compiler"]["command"].startswith("cd .deep_gemm/tmp && ")
    assert deep_gemm["debug_rerun"]["env"] == {"DG_JIT_DEBUG": "1", "DG_JIT_PRINT_COMPILER_COMMAND": "1"}
    stage = classify.label(StageResult(name="kernel-smoke", status=Status.FAILED, reason=smoke["reason"],
                                       log_excerpt=smoke["log_excerpt"]))
    assert stage.failure_class == "deepgemm-jit-cache-relative" and "HOME" in (stage.hint or "")


def test_the_verified_run_ran_every_stage_on_the_gpu_in_lxc() -> None:
    found = stages("good")
    assert [s.status for s in found] == [Status.PASSED] * 10
    assert {s.where for s in found if s.gpu} == {"lxc: NVIDIA H200 (sm_90)"}


# ----------------------------------------------------------------------------- hostile and empty input

def run_preflight(*argv: str) -> None:
    call(preflight_command, argv)


@pytest.mark.parametrize(("argv", "said"), [
    (["--ctid", "x"], "--ctid 'x' is not a Proxmox container id"),
    (["--ctid", ""], "--ctid '' is not a Proxmox container id"),
    (["--lxc-name", ""], "--lxc-name '' is not an LXC container name"),
    (["--lxc-name", ".."], "--lxc-name '..' is not an LXC container name"),
    (["--lxc-name=-n"], "--lxc-name '-n' is not an LXC container name"),
    (["--cuda", ""], "--cuda '' is not a CUDA this project builds for"),
    (["--ctid", "200", "--lxc-path", "/srv/lxc"], "--lxc-path is plain LXC's container folder"),
])
def test_preflight_refuses_what_it_used_to_drop_or_misname(argv: list[str], said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        run_preflight(*argv)


def test_a_terminal_escape_in_a_name_never_reaches_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        run_preflight("--lxc-name", "ct\x1b]0;owned\x07")
    assert "\x1b" not in str(refused.value) and "\\x1b" in str(refused.value)
    assert gpu_checks.printable("df: \x1b[2J/dev/shm") == "df: \\x1b[2J/dev/shm"
    gpu_checks.show([Check("/dev/shm", "warn", "said \x1b[31mred", ("fix \x1b[0m",))])
    assert "\x1b[31m" not in capsys.readouterr().out


def test_lxc_path_is_the_one_read_and_asked_about() -> None:
    target = Target.named("ct", lxc_path=Path("/srv/lxc"))
    assert target.config_path() == Path("/srv/lxc/ct/config")
    assert target.state_argv() == ["lxc-info", "-n", "ct", "-P", "/srv/lxc", "-s"]
    assert target.exec_argv(["true"])[:6] == ["lxc-attach", "-n", "ct", "-P", "/srv/lxc", "--clear-env"]
    assert Target.named("ct", lxc_path=LXC_PATH).state_argv() == ["lxc-info", "-n", "ct", "-s"]


def test_verify_checks_its_lxc_flags_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match=re.escape("--lxc '' is not a Proxmox container id")):
        parse(["--lxc", ""], Workspace.at(ROOT), {})
    with pytest.raises(ConfigError, match=re.escape("--lxc-name '..' is not an LXC container name")):
        parse(["--lxc-name", ".."], Workspace.at(ROOT), {})
    with pytest.raises(ConfigError, match="goes with --lxc-name"):
        parse(["--host", "--lxc-path", "/srv/lxc"], Workspace.at(ROOT), {})
    target = parse(["--lxc-name", "ct", "--lxc-path", "/srv/lxc"], Workspace.at(ROOT), {}).place.target
    assert target is not None and target.lxc_path == Path("/srv/lxc")
