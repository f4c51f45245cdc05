"""Platforms as an axis: matrix.yaml's per-platform targets, arm64 cells beside unchanged amd64 ones, locks per
platform, which Dockerfile and build arguments a cell gets, and emulation's checks (no Docker: fakes only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from buildscripts import matrix
from buildscripts.build import buildx, emulation
from buildscripts.build.base import BaseImage
from buildscripts.commands import setup as setup_command
from buildscripts.errors import ConfigError, ToolMissingError
from buildscripts.lock import paths_for
from buildscripts.lock.state import cell_inputs
from buildscripts.matrix import platforms
from buildscripts.matrix.platforms import Cpu
from buildscripts.results import StageResult, Status
from buildscripts.verify import emulated, plan
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.unit.test_matrix import DEFAULT, ROOT, edited, error_of, parse

ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
AMD64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm"


def cells() -> dict[str, matrix.Cell]:
    return {c.id: c for c in matrix.load(ROOT / "matrix.yaml", {}).cells}


def test_each_platform_has_its_own_targets_and_amd64_ids_stay() -> None:
    found = cells()
    arm, amd = found[ARM64], found[AMD64]
    assert (arm.platform, amd.platform) == ("linux/arm64", "linux/amd64")
    assert arm.archs == ("sm_90a", "sm_100a", "sm_103a", "sm_121a")
    assert amd.archs == ("sm_90a", "sm_100a", "sm_120a")
    # GB10 (sm_121a) is arm64 only: no amd64 image audits for it
    assert amd.also_audit == ("sm_103a",)
    assert arm.excluded is None and amd.excluded is None
    assert {c.id for c in found.values() if c.platform == "linux/amd64"} == {
        c.id.removesuffix("-arm64") for c in found.values() if c.platform == "linux/arm64"}


def test_top_level_archs_stay_a_shorthand_for_amd64() -> None:
    data = yaml.safe_load(DEFAULT)
    data.pop("platforms")
    data["bases"].pop("bookworm-arm64")
    data["archs"], data["also_audit"] = ["sm_90a"], ["sm_103a"]
    spec = parse(yaml.safe_dump(data, sort_keys=False)).spec
    assert spec.targets("linux/amd64").archs == ("sm_90a",)
    assert spec.all_archs == ("sm_90a",)


@pytest.mark.parametrize(("change", "drop", "says"), [
    ({"archs": ["sm_90a"]}, (), "give the GPU targets once"),
    ({"platforms": {"linux/amd64": {"archs": ["sm_90a"]}}}, (), "base 'bookworm-arm64' is linux/arm64"),
    ({"platforms": {"linux/arm46": {"archs": ["sm_90a"]}}}, (), "did you mean 'linux/arm64'"),
    ({"platforms": {"linux/amd64": {"archs": ["sm_90a"], "also_audit": ["sm_90a"]},
                    "linux/arm64": {"archs": ["sm_90a"]}}}, (), "is a target arch already"),
    ({"platforms": {"linux/amd64": {"archs": ["sm_91a"]}, "linux/arm64": {"archs": ["sm_90a"]}}}, (),
     "not a known GPU target"),
    ({}, ("platforms",), "no GPU targets"),
])
def test_bad_platforms_say_the_fix(change: dict[str, object], drop: tuple[str, ...], says: str) -> None:
    assert says in error_of(edited(change, drop))


def test_a_base_platform_names_its_cpu() -> None:
    data = yaml.safe_load(DEFAULT)
    data["bases"]["bookworm-arm64"]["platform"] = "armv7l-manylinux_2_36"
    assert "bases.bookworm-arm64.platform" in error_of(yaml.safe_dump(data, sort_keys=False))


def test_locks_are_per_platform(tmp_path: Path) -> None:
    m = matrix.load(ROOT / "matrix.yaml", {})
    arm, amd = (next(c for c in m.cells if c.id == i) for i in (ARM64, AMD64))
    arm_paths, amd_paths = paths_for(arm, tmp_path), paths_for(amd, tmp_path)
    assert arm_paths.lane.name == "torch2.14.1-cu130-bookworm-arm64.txt"
    assert amd_paths.lane.name == "torch2.14.1-cu130-bookworm.txt"
    assert cell_inputs(m, arm)["platform"] == "aarch64-manylinux_2_36"
    assert cell_inputs(m, amd)["platform"] == "x86_64-manylinux_2_36"
    assert (ROOT / "lockfiles" / "lanes" / arm_paths.lane.name).is_file()


def _base(ref: str) -> BaseImage:
    return BaseImage(ref=ref, id=f"sha256:{ref}", inputs_hash="0" * 16, built=False)


def test_amd64_inputs_ignore_the_cross_recipe_and_arm64_gets_native_args(tmp_path: Path) -> None:
    ws = Workspace.at(ROOT)
    recipe = buildx.Recipe.of(ws)
    found = cells()
    arm, amd = found[ARM64], found[AMD64]
    locks = paths_for(amd, ws.locks)
    # what today's amd64 cells hash does not move with the arm64 files
    without = buildx.Recipe(**{**recipe.__dict__, "cross": ()})
    assert buildx.inputs_hash(amd, _base("a"), locks, recipe) == buildx.inputs_hash(amd, _base("a"), locks, without)
    assert recipe.dockerfile_for(amd) == ws.images / "Dockerfile"
    assert recipe.dockerfile_for(arm) == ws.images / "Dockerfile.cross"
    assert f"{'io.sglang-images'}.platform" not in buildx.cell_metadata(amd, _base("a"), "")
    assert buildx.cell_metadata(arm, _base("b"), "")["io.sglang-images.platform"] == "linux/arm64"
    arm_locks = paths_for(arm, ws.locks)
    cell_json = ws.root / "images" / "toolkit" / "empty.txt"
    args = buildx.build_args(arm, _base("b"), arm_locks, cell_json, recipe, native=_base("n"))
    assert "NATIVE_IMAGE=n" in args and "WHEEL_PLATFORM=aarch64-manylinux_2_36" in args
    assert not any(a.startswith("WARM_MODE") for a in args)
    assert "first server start compiles" in (buildx.warm_skipped(arm) or "")
    assert buildx.warm_skipped(amd) is None
    with pytest.raises(ConfigError, match="build machine's own base"):
        buildx.build_args(arm, _base("b"), arm_locks, cell_json, recipe)
    # the native base changes the arm64 cell's inputs
    assert (buildx.inputs_hash(arm, _base("b"), arm_locks, recipe, _base("n"))
            != buildx.inputs_hash(arm, _base("b"), arm_locks, recipe, _base("m")))


def test_host_and_emulation_by_machine() -> None:
    assert platforms.host("x86_64") == platforms.by_oci("linux/amd64")
    assert platforms.host("aarch64") == platforms.host("arm64") == platforms.by_oci("linux/arm64")
    assert platforms.host("riscv64") is None
    arm = platforms.by_oci("linux/arm64")
    assert emulation.needed(arm, "x86_64") and not emulation.needed(arm, "aarch64")


def _handler(tmp_path: Path, text: str | None) -> Path:
    (tmp_path / "register").write_text("")
    if text is not None:
        (tmp_path / "qemu-aarch64").write_text(text)
    return tmp_path


@pytest.mark.parametrize(("text", "says"), [
    ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n", None),
    ("disabled\nflags: PF\n", "disabled"),
    ("enabled\nflags: P\n", "lacks the F flag"),
    (None, "no QEMU handler"),
])
def test_the_qemu_handler_is_read_from_binfmt_misc(tmp_path: Path, text: str | None, says: str | None) -> None:
    problem = emulation.handler_problem(platforms.by_oci("linux/arm64"), _handler(tmp_path, text))
    assert problem == says if says is None else says in (problem or "")


def test_unmounted_binfmt_says_so_and_require_names_the_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arm = platforms.by_oci("linux/arm64")
    assert "not mounted" in (emulation.handler_problem(arm, tmp_path) or "")
    monkeypatch.setattr(emulation, "needed", lambda cpu, machine=None: True)
    with pytest.raises(ToolMissingError) as exc:
        emulation.require(arm, tmp_path)
    assert "setup --for build" in (exc.value.hint or "")


def test_emulated_stages_say_so_and_gpus_stay_out() -> None:
    arm = platforms.by_oci("linux/arm64")
    label = "io.sglang-images.platform"
    assert emulated.foreign({label: "linux/arm64"}, "x86_64") == arm
    assert emulated.foreign({label: "linux/arm64"}, "aarch64") is None
    assert emulated.foreign({}, "x86_64") is None
    options, handed = emulated.no_gpu(arm, {"device_requests": ["gpu"], "shm_size": "1g",
                                            "environment": {"A": "1"}}, "x86_64")
    assert "device_requests" not in options and options["shm_size"] == "1g"
    assert not handed.gpus and "no linux/arm64 GPU here" in handed.why_none
    assert options["environment"]["A"] == "1"
    # an arm64 /proc/cpuinfo: QEMU 7.2 shows the host's, on which `import torch` crashes
    (cpuinfo, target, mode), = options["volumes"]
    assert (target, mode) == ("/proc/cpuinfo", "ro") and "CPU implementer\t: 0x41" in Path(cpuinfo).read_text()
    stages = [StageResult(name="facts", status=Status.PASSED), StageResult(name="import", status=Status.PASSED),
              StageResult(name="server", status=Status.SKIPPED, reason="needs a GPU")]
    marked = emulated.mark(stages, arm, "x86_64")
    assert marked[1].where == "container (cpu, under emulation)"
    assert marked[0].evidence["emulation"] == {"platform": "linux/arm64", "host": "linux/amd64",
                                               "handler": "qemu-aarch64"}
    assert marked[2].status is Status.SKIPPED and "emulation" not in marked[2].where


def test_subtract_keeps_only_the_layers_own_pins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lower = tmp_path / "lower.txt"
    lock = tmp_path / "lock.txt"
    lower.write_text("# header\ntorch==2.14.1 \\\n    --hash=sha256:aa\n"
                     "nvidia-cuda-nvcc==13.0.1 \\\n    --hash=sha256:bb\n")
    lock.write_text("torch==2.14.1 \\\n    --hash=sha256:aa\n    # via sglang\nSGLang==0.5.23 \\\n"
                    "    --hash=sha256:cc\nnvidia_cuda_nvcc==13.0.2 \\\n    --hash=sha256:dd\n")
    spec = importlib.util.spec_from_file_location("subtract", ROOT / "images" / "cross" / "subtract.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["subtract.py", str(lock), str(lower)]) == 0
    assert capsys.readouterr().out.split("\n") == [
        "SGLang==0.5.23 \\", "    --hash=sha256:cc", "nvidia_cuda_nvcc==13.0.2 \\", "    --hash=sha256:dd", ""]


def opt_in_matrix() -> str:
    """The default matrix with linux/arm64 made opt-in (its cells built only when named)."""
    data = yaml.safe_load(DEFAULT)
    data["platforms"]["linux/arm64"]["opt_in"] = "a cold arm64 cell takes QEMU emulation minutes"
    return yaml.safe_dump(data, sort_keys=False)


def test_the_default_matrix_builds_the_arm64_cell_with_the_others() -> None:
    m = matrix.load(ROOT / "matrix.yaml", {})
    assert {AMD64, ARM64} <= {c.id for c in matrix.select(m.cells)}
    assert next(c for c in m.cells if c.id == ARM64).opt_in is None


def test_an_opt_in_platform_is_built_only_when_named() -> None:
    m = parse(opt_in_matrix())
    everything = {c.id for c in matrix.select(m.cells)}
    assert AMD64 in everything and ARM64 not in everything
    assert [c.id for c in matrix.select(m.cells, ["*-bookworm-arm64"])] == [ARM64]
    assert ARM64 in {c.id for c in matrix.select(m.cells, ["sglang0.5.23-*"])}
    # locking and `matrix -- --all` take them all the same
    assert ARM64 in {c.id for c in matrix.select(m.cells, include_opt_in=True)}
    assert "QEMU" in (next(c for c in m.cells if c.id == ARM64).opt_in or "")


def test_emulated_stages_get_longer_deadlines() -> None:
    planned = plan.Plan.make(archs=["sm_90a"], lane_cuda="13.0", stage_timeout=900.0)
    assert emulated.slower(planned).stage_timeout == 900.0 * emulated.SLOWDOWN
    assert emulated.slower(planned).stages == planned.stages


def _no_emulation_here(monkeypatch: pytest.MonkeyPatch, foreign: str = "linux/arm64") -> list[str]:
    """A machine that runs `foreign` images only under emulation, has no handler for it and installs nothing; the
    CPUs setup tried to register (none: it cannot)."""
    from buildscripts import machine

    asked: list[str] = []

    def handler_problem(cpu: Cpu) -> str:
        asked.append(cpu.oci)
        return f"no qemu-{cpu.qemu} handler is registered"

    monkeypatch.setattr(emulation, "needed", lambda cpu: cpu.oci == foreign)
    monkeypatch.setattr(emulation, "handler_problem", handler_problem)
    monkeypatch.setattr(machine, "can_install", lambda env: "not root")
    monkeypatch.setattr(machine, "missing", lambda needs: [])
    return asked


def test_setup_asks_nothing_of_an_opt_in_platform_the_run_does_not_build(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:

    asked = _no_emulation_here(monkeypatch)
    (tmp_path / "matrix.yaml").write_text(opt_in_matrix())
    assert call(setup_command, ["--for", "build"], Workspace.at(tmp_path), {}) == 0   # the whole matrix: no arm64 cell
    assert asked == []
    with pytest.raises(ToolMissingError, match="this run builds linux/arm64 cells"):   # named: it is built
        call(setup_command, ["--for", "build", "--", "--only", "*-bookworm-arm64"], Workspace.at(tmp_path), {})


def test_setup_stops_for_a_platform_the_whole_matrix_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:

    _no_emulation_here(monkeypatch)
    (tmp_path / "matrix.yaml").write_text(DEFAULT)
    with pytest.raises(ToolMissingError, match="linux/arm64 cells, which this machine builds only under emulation"):
        call(setup_command, ["--for", "build"], Workspace.at(tmp_path), {})
    # leaving them out is a way through, as the hint says
    assert call(setup_command, ["--for", "build", "--", "--skip", "*-arm64"], Workspace.at(tmp_path), {}) == 0


def test_an_arm64_build_runner_building_its_own_cells_needs_no_x86_64_emulation(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CI's native arm64 build job on a non-Debian runner: `nox -s build -- --only ARM64 --run-id … --stage …`
    (setup gets the build's arguments after `--`); the whole matrix there would need the x86_64 handler."""

    asked = _no_emulation_here(monkeypatch, foreign="linux/amd64")
    other = tmp_path / "elsewhere.yaml"
    other.write_text(DEFAULT)
    ws = Workspace.at(tmp_path)   # no matrix.yaml of its own: --matrix names it, as the build reads it
    job = ["--only", ARM64, "--run-id", "gh1.1-build-arm64", "--stage", "ghcr.io/org/staging", "--matrix", str(other)]
    assert call(setup_command, ["--for", "build", "--", *job], ws, {}) == 0 and asked == []
    with pytest.raises(ToolMissingError, match="this run builds linux/amd64 cells") as exc:
        call(setup_command, ["--for", "build", "--", "--matrix", str(other)], ws, {})
    assert "qemu-x86_64" in str(exc.value) and asked == ["linux/amd64"]
    assert setup_command.build_selection(job) == (other, (ARM64,), ())


def test_the_builds_help_is_never_stopped_by_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:

    asked = _no_emulation_here(monkeypatch)
    (tmp_path / "matrix.yaml").write_text(DEFAULT)   # the whole matrix would need the missing handler
    assert call(setup_command, ["--for", "build", "--", "--help"], Workspace.at(tmp_path), {}) == 0 and asked == []


def test_zstd_layers_are_another_input_and_only_a_stamping_builder_writes_them() -> None:
    """`--layer-compression zstd`: another image of the same files (another candidate tag; gzip's hash as before),
    refused before anything is built on a builder that cannot write it (Docker 20.10's, BuildKit 0.8)."""
    from buildscripts import pipeline
    from buildscripts.build import cache

    ws = Workspace.at(ROOT)
    recipe = buildx.Recipe.of(ws)
    amd = cells()[AMD64]
    locks = paths_for(amd, ws.locks)
    gzip = buildx.inputs_hash(amd, _base("a"), locks, recipe)
    assert buildx.inputs_hash(amd, _base("a"), locks, recipe, compression="gzip") == gzip
    assert buildx.inputs_hash(amd, _base("a"), locks, recipe, compression="zstd") != gzip
    old = cache.Builder("", "docker", exports_cache=False, buildkit="v0.8.2", rewrites_timestamps=False)
    with pytest.raises(ConfigError, match="cannot write zstd layers"):
        pipeline.check_compression(old, "zstd")
    pipeline.check_compression(old, "gzip")
    pipeline.check_compression(cache.Builder("", "docker", exports_cache=False, buildkit="v0.13.2",
                                             rewrites_timestamps=True), "zstd")
