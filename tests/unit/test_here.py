"""`here` answers for recorded machines (tests/unit/data/machines: an H200 and a B200 host, an RTX PRO 6000 in an
unprivileged Proxmox CT, a DGX Spark, a GH200, a Docker host with CDI and an R570 driver): what it reads of each,
which image it chooses (platform and GPU arch among the cell's targets), the driver against the image's CUDA floor,
the lines it prints and the fix of each "no". The images are described as a registry would describe them and their
verdicts are a fake checker's word: which digest is verified is `check`'s question (tests of trust/ ask it for
real), the choosing around it is what is tested here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from buildscripts.errors import CannotCheck, DriverTooOld, NothingFits, NotVerified
from buildscripts.here import reading, show
from buildscripts.here.answer import Answer, Asked, answer
from buildscripts.here.candidates import Candidate
from buildscripts.here.checked import Verification
from buildscripts.here.reading import Machine
from tests.recorded_machines import NAMES, copied, recorded, set_output

AMD64_TARGETS = ("sm_90a", "sm_100a", "sm_120a")          # matrix.yaml's platforms
ARM64_TARGETS = ("sm_90a", "sm_100a", "sm_103a", "sm_121a")
REPO = "ghcr.io/example/sglang-images"
WARM_ENV = (("PATH", "/usr/local/cuda/bin:/opt/venv/bin:/usr/bin"), ("SGLANG_CACHE_DIR", "/var/cache/sglang"),
            ("TVM_FFI_CACHE_DIR", "/var/cache/sglang/tvm-ffi"), ("TRITON_CACHE_DIR", "/var/cache/sglang/triton"))


def digest(name: str) -> str:
    return "sha256:" + (name.encode().hex() * 64)[:64]


def image(tag: str, platform: str, *, cuda: str = "13.0", sglang: str = "0.5.23",
          platforms: Sequence[str] = ("linux/amd64", "linux/arm64"), env: Sequence[tuple[str, str]] = WARM_ENV,
          cell: str | None = None) -> Candidate:
    """One tag as a registry describes it for `platform`: the index, and its manifest of that platform."""
    held = platform in platforms
    targets = ARM64_TARGETS if platform == "linux/arm64" else AMD64_TARGETS
    return Candidate(f"{REPO}:{tag}", REPO, f"{REPO}@{digest(tag)}", tuple(platforms),
                     digest(f"{tag}/{platform}") if held else None, cell=cell or tag, sglang=sglang, cuda=cuda,
                     targets=targets if held else (), env=tuple(env), tag=tag, described_by="a test")


class Checker:
    """The signed verdicts' word, per (tag, target): verified, not, or cannot be read (None)."""

    def __init__(self, verdicts: Mapping[tuple[str, str], bool | None] | None = None, default: bool | None = True):
        self.verdicts = dict(verdicts or {})
        self.default = default
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, candidate: Candidate, target: str, platform: str) -> Verification:
        self.asked.append((candidate.tag or "", target, platform))
        verified = self.verdicts.get((candidate.tag or "", target), self.default)
        said = {True: f"{candidate.reference}: verified on {target}", False: f"not verified on {target}",
                None: "cannot check: the registry did not answer"}[verified]
        return Verification(verified, said, None if verified else "the fix check gives")


def ask(machine: Machine, tags: Sequence[tuple[str, Mapping[str, Any]]], checker: Checker | None = None,
        **asked: Any) -> Answer:
    def candidates(platform: str, arch: str) -> list[Candidate]:
        return [image(tag, platform, **options) for tag, options in tags]
    return answer(machine, Asked(source=REPO, home="/home/ada", **asked), candidates, checker or Checker())


def machine(name: str) -> Machine:
    return reading.read(recorded(name))


# ---------------------------------------------------------------------------------------------- reading


@pytest.mark.parametrize(("name", "platform", "product", "arch", "driver", "count", "runtime"), [
    ("h200-host", "linux/amd64", "NVIDIA H200", "sm_90", "580.159.04", 1, "cdi"),
    ("b200-host", "linux/amd64", "NVIDIA B200", "sm_100", "580.82.07", 8, "nvidia"),
    ("rtx-pro-6000-ct", "linux/amd64", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm_120", "580.95.05", 1,
     None),
    ("dgx-spark", "linux/arm64", "NVIDIA GB10", "sm_121", "580.142", 1, "nvidia"),
    ("gh200-host", "linux/arm64", "NVIDIA GH200 480GB", "sm_90", "570.172.08", 1, "nvidia"),
    ("docker-cdi-r570", "linux/amd64", "NVIDIA H100 80GB HBM3", "sm_90", "570.133.20", 1, "cdi"),
])
def test_each_machine_is_read_as_it_is(name: str, platform: str, product: str, arch: str, driver: str, count: int,
                                       runtime: str | None) -> None:
    found = machine(name)
    assert found.platform == platform
    assert {(g.name, g.arch, g.driver) for g in found.gpus} == {(product, arch, driver)}
    assert len(found.gpus) == count and found.gpu_problem is None
    assert (found.docker.runtime if found.docker else None) == runtime
    assert (found.lxc is not None) == (name == "rtx-pro-6000-ct")


def test_an_unprivileged_ct_is_read_from_its_id_map_nodes_shm_and_loopback() -> None:
    found = machine("rtx-pro-6000-ct")
    assert found.lxc is not None and found.lxc.unprivileged is True and found.lxc.uid_map == "0 100000 65536"
    assert found.lxc.loopback_up is True and found.lxc.shm_bytes == 32 << 30
    assert set(found.nodes) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert found.docker is None and not found.proxmox_host


def test_a_machine_without_a_driver_has_no_gpu_and_says_how_to_get_one(tmp_path: Path) -> None:
    folder = copied("h200-host", tmp_path)
    set_output(folder, "nvidia-smi --query-gpu=index,name,uuid,compute_cap,driver_version,memory.total "
                       "--format=csv,noheader,nounits", None)
    found = ask(reading.read(recorded(folder)), [("0.5.23-verified-sm90", {})])
    assert found.exit_code == NothingFits.exit_code and found.gpu is None and found.lines is None
    assert "no nvidia-smi" in found.noes[0].said and "install the NVIDIA driver" in found.noes[0].fix


# ---------------------------------------------------------------------------------------------- choosing


def test_the_h200_takes_the_newest_verified_image_of_its_platform_by_its_platform_digest() -> None:
    checker = Checker()
    found = ask(machine("h200-host"), [("0.5.16-verified-sm90", {"sglang": "0.5.16"}), ("0.5.23-verified-sm90", {})],
                checker)
    assert found.exit_code == 0 and found.error is None and not found.noes
    assert found.choice and found.choice.chosen and found.choice.chosen.candidate.tag == "0.5.23-verified-sm90"
    assert checker.asked == [("0.5.23-verified-sm90", "sm_90a", "linux/amd64")]   # the first good one ends the search
    assert found.lines and digest("0.5.23-verified-sm90/linux/amd64") in found.lines.docker[0]


def test_an_unverified_newest_image_gives_way_to_an_older_verified_one() -> None:
    checker = Checker({("0.5.23-verified-sm100", "sm_100a"): False})
    found = ask(machine("b200-host"), [("0.5.16-verified-sm100", {"sglang": "0.5.16"}),
                                       ("0.5.23-verified-sm100", {})], checker)
    assert found.exit_code == 0
    assert found.choice and found.choice.chosen and found.choice.chosen.candidate.tag == "0.5.16-verified-sm100"
    assert [a[0] for a in checker.asked] == ["0.5.23-verified-sm100", "0.5.16-verified-sm100"]


@pytest.mark.parametrize(("name", "target"), [("dgx-spark", "sm_121a"), ("gh200-host", "sm_90a"),
                                              ("h200-host", "sm_90a"), ("b200-host", "sm_100a"),
                                              ("rtx-pro-6000-ct", "sm_120a")])
def test_the_target_is_the_cells_own_for_this_gpu_and_platform(name: str, target: str) -> None:
    checker = Checker()
    found = ask(machine(name), [("0.5.23-verified", {})], checker)
    assert checker.asked and checker.asked[0][1:] == (target, machine(name).platform)
    assert found.choice and found.choice.chosen and found.choice.chosen.target == target


def test_an_amd64_only_image_does_not_fit_a_dgx_spark() -> None:
    found = ask(machine("dgx-spark"), [("0.5.16-verified-sm121", {"platforms": ("linux/amd64",)})])
    assert found.exit_code == NothingFits.exit_code
    assert "holds no linux/arm64 image" in found.noes[0].said and "linux/arm64" in found.noes[0].fix


def test_a_gpu_no_image_targets_is_told_so() -> None:
    b300 = machine("b200-host")
    gpu = b300.gpus[0]
    b300 = Machine(b300.platform, (type(gpu)(0, "NVIDIA B300", gpu.uuid, "10.3", gpu.driver, 0),), None, b300.nodes,
                   b300.docker, None, False)
    found = ask(b300, [("0.5.23-verified-sm103", {})])
    assert found.exit_code == NothingFits.exit_code
    assert "not built for sm_103" in found.noes[0].said and "sm_90a, sm_100a, sm_120a" in found.noes[0].said


def test_no_tag_of_this_arch_is_nothing_to_choose_from() -> None:
    found = ask(machine("h200-host"), [])
    assert found.exit_code == NothingFits.exit_code
    assert "-verified-sm90" in found.noes[0].said and "--tag" in found.noes[0].fix


def test_not_verified_and_cannot_check_are_each_their_own_no() -> None:
    tags: list[tuple[str, Mapping[str, Any]]] = [("0.5.23-verified-sm90", {})]
    not_verified = ask(machine("h200-host"), tags, Checker(default=False))
    assert not_verified.exit_code == NotVerified.exit_code and not_verified.noes[0].what == "verified"
    assert not_verified.noes[0].fix == "the fix check gives"
    assert not_verified.lines is None   # no lines to copy for an image not verified here
    unknown = ask(machine("h200-host"), tags, Checker(default=None))
    assert unknown.exit_code == CannotCheck.exit_code and "cannot check" in unknown.noes[0].said
    assert unknown.lines is None


# ---------------------------------------------------------------------------------------------- driver floors


def test_a_cuda_13_image_on_an_r570_driver_says_no_with_its_fix() -> None:
    found = ask(machine("gh200-host"), [("0.5.23-verified-sm90", {"cuda": "13.0"})])
    assert found.exit_code == DriverTooOld.exit_code
    [no] = found.noes
    assert no.what == "driver" and "570.172.08" in no.said and "580.65.06" in no.said
    assert "install NVIDIA driver 580.65.06 or newer" in no.fix and "R580" in no.fix
    assert found.lines is not None   # the lines are still said: they work once the driver is upgraded


def test_a_driver_that_runs_an_older_cuda_lane_is_pointed_there() -> None:
    tags = [("0.5.23-verified-sm90", {"cuda": "13.0"}), ("0.5.10-verified-sm90", {"cuda": "12.8", "sglang": "0.5.10"})]
    found = ask(machine("docker-cdi-r570"), tags)
    assert found.exit_code == 0
    assert found.choice and found.choice.chosen and found.choice.chosen.candidate.cuda == "12.8"
    assert found.choice.chosen.driver and found.choice.chosen.driver.meets


def test_below_the_jit_floor_but_above_minor_version_compatibility_is_still_a_no() -> None:
    old = machine("docker-cdi-r570")
    gpu = old.gpus[0]
    r560 = Machine(old.platform, (type(gpu)(0, gpu.name, gpu.uuid, "9.0", "560.35.03", 0),), None, old.nodes,
                   old.docker, None, False)
    found = ask(r560, [("0.5.10-verified-sm90", {"cuda": "12.8", "sglang": "0.5.10"})])
    assert found.exit_code == DriverTooOld.exit_code
    assert "570.26" in found.noes[0].said and "minor version compatibility" in found.noes[0].said


def test_an_image_that_names_no_cuda_has_no_floor_and_says_so() -> None:
    found = ask(machine("h200-host"), [("0.5.23-verified-sm90", {"cuda": None})])
    assert found.exit_code == DriverTooOld.exit_code and "names no CUDA" in found.noes[0].said


# ---------------------------------------------------------------------------------------------- lines


def test_docker_lines_follow_the_engine_the_image_and_the_verifier() -> None:
    cdi = ask(machine("h200-host"), [("0.5.23-verified-sm90", {})])
    assert cdi.lines is not None
    pull, run = cdi.lines.docker
    ref = f"{REPO}@{digest('0.5.23-verified-sm90/linux/amd64')}"
    assert pull == f"docker pull {ref}"
    assert "--device nvidia.com/gpu=all" in run and "--gpus" not in run
    assert "--shm-size 16g" in run and "--ulimit memlock=-1" in run and "--ulimit stack=67108864" in run
    assert f"-v sglang-images-cache-{digest('0.5.23-verified-sm90/linux/amd64')[7:19]}:/var/cache/sglang" in run
    assert "/var/cache/sglang/triton" not in run   # inside the one volume
    assert "-v /home/ada/.cache/huggingface:/root/.cache/huggingface -e HF_TOKEN" in run
    assert run.index(ref) < run.index("python3 -m sglang.launch_server --model-path MODEL")
    nvidia = ask(machine("b200-host"), [("0.5.23-verified-sm100", {"env": ()})], model="Qwen/Qwen3-8B")
    assert nvidia.lines is not None
    run = nvidia.lines.docker[1]
    assert "--gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility" in run and "--device" not in run
    assert ":/root/.cache " in run and "--model-path Qwen/Qwen3-8B" in run   # no cache folder named: SGLang's defaults
    assert not nvidia.lines.proxmox


def test_a_ct_gets_the_proxmox_lines_for_its_host() -> None:
    found = ask(machine("rtx-pro-6000-ct"), [("0.5.23-verified-sm120", {"cell": "sglang0.5.23-cu130-pip-bookworm"})],
                ctid="210")
    assert found.exit_code == 0 and found.lines is not None and not found.lines.docker
    ref = f"{REPO}@{digest('0.5.23-verified-sm120/linux/amd64')}"
    copy, create, resources, start, check, server = found.lines.proxmox
    assert copy == (f"skopeo copy --preserve-digests docker://{ref} oci-archive:/var/lib/vz/template/cache/"
                    "sglang0.5.23-cu130-pip-bookworm.oci.tar:latest")
    assert create.startswith("pct create 210 local:vztmpl/sglang0.5.23-cu130-pip-bookworm.oci.tar")
    assert f"--description 'sglang-images-source: {ref}'" in create
    assert "--dev0 /dev/nvidia0 --dev1 /dev/nvidiactl --dev2 /dev/nvidia-uvm --dev3 /dev/nvidia-uvm-tools" in resources
    assert start == "pct start 210" and check == "sglang-images preflight --ctid 210 --cuda 13.0"
    assert server.startswith("pct exec 210 --")
    assert found.lines.ct_config == ("lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0",)
    assert found.lines.ct_config_path == "/etc/pve/lxc/210.conf"


def test_a_proxmox_host_with_docker_gets_both(tmp_path: Path) -> None:
    folder = copied("b200-host", tmp_path)
    (folder / "root" / "usr" / "sbin").mkdir(parents=True)
    (folder / "root" / "usr" / "sbin" / "pct").write_text("")
    (folder / "root" / "etc" / "pve").mkdir(parents=True)
    found = ask(reading.read(recorded(folder)), [("0.5.23-verified-sm100", {})])
    assert found.machine.proxmox_host and found.lines is not None
    assert found.lines.docker and found.lines.proxmox
    assert "--dev7 /dev/nvidia7 --dev8 /dev/nvidiactl" in found.lines.proxmox[2]


# ---------------------------------------------------------------------------------------------- the runtime's noes


def test_a_healthy_machine_has_no_runtime_problem() -> None:
    for name in NAMES:
        found = ask(machine(name), [("0.5.23-verified", {})])
        assert [p.what for p in found.runtime] == (["cdi"] if name == "docker-cdi-r570" else []), name


def test_a_ct_missing_a_node_loopback_and_shm_gets_each_fix(tmp_path: Path) -> None:
    folder = copied("rtx-pro-6000-ct", tmp_path)
    (folder / "root" / "dev" / "nvidia-uvm").unlink()
    (folder / "root" / "sys" / "class" / "net" / "lo" / "flags").write_text("0x8\n")
    set_output(folder, "df -Pk /dev/shm", "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
                                          "tmpfs 65536 0 65536 0% /dev/shm\n")
    found = ask(reading.read(recorded(folder)), [("0.5.23-verified-sm120", {})])
    fixes = {p.what: p for p in found.runtime}
    assert set(fixes) == {"lxc-nodes", "shm", "loopback"}
    assert "`dev0: /dev/nvidia-uvm`" in fixes["lxc-nodes"].fix and "/etc/pve/lxc/CTID.conf" in fixes["lxc-nodes"].fix
    assert "64 MiB" in fixes["shm"].said and "size=16g" in fixes["shm"].fix
    assert "lxc.net.0.flags: up" in fixes["loopback"].fix and "ip link set lo up" in fixes["loopback"].fix
    assert found.exit_code == 0   # said with fixes; `preflight` is the check that fails on them


def test_docker_without_a_gpu_runtime_says_how_to_add_one(tmp_path: Path) -> None:
    folder = copied("b200-host", tmp_path)
    set_output(folder, "docker info --format {{json .}}", '{"Runtimes": {"runc": {"path": "runc"}}}\n')
    found = ask(reading.read(recorded(folder)), [("0.5.23-verified-sm100", {})])
    [problem] = found.runtime
    assert problem.what == "docker" and "nvidia-ctk runtime configure --runtime=docker" in problem.fix
    set_output(folder, "docker info --format {{json .}}", "permission denied while trying to connect to the Docker "
               "daemon socket at unix:///var/run/docker.sock", returncode=1)
    [problem] = ask(reading.read(recorded(folder)), [("0.5.23-verified-sm100", {})]).runtime
    assert "permission denied" in problem.said and "usermod -aG docker" in problem.fix


def test_what_a_registry_says_cannot_drive_the_terminal() -> None:
    console = Console(record=True, width=200, color_system=None)
    found = ask(machine("h200-host"), [("0.5.23-verified-sm90", {"cell": "x\x1b]0;owned\x07[bold]y"})])
    show.show(found, console)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "cell x\\x1b]0;owned\\x07[bold]y" in text   # shown as it was written, markup and all
