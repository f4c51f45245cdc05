"""The CI job matrix: runner labels in matrix.yaml (strictly checked, per platform) and `nox -s matrix -- --github`
(verify jobs) and `--builds` (build jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from buildscripts import matrix
from buildscripts.commands import matrix as matrix_command
from buildscripts.errors import ConfigError, SelectionError
from buildscripts.matrix.cijobs import labels_cpus
from tests.commands import call

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "matrix.yaml").read_text()
DEFAULT_LABELS = ["self-hosted", "linux", "x64", "gpu"]
B200 = [*DEFAULT_LABELS, "b200"]
RTX = [*DEFAULT_LABELS, "rtx-pro-6000"]


def with_runners(tmp_path: Path, runners: object) -> Path:
    data = yaml.safe_load(DEFAULT)
    data["runners"] = runners
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def github(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, list[dict[str, object]]]:
    assert call(matrix_command, ["--github", *argv]) == 0
    out = capsys.readouterr().out
    rows: list[dict[str, object]] = json.loads(out)["include"]
    return out, rows


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        matrix.load(path)
    return str(exc.value)


def test_default_runners_give_one_job_per_buildable_cell_on_any_gpu_runner(
        capsys: pytest.CaptureFixture[str]) -> None:
    out, rows = github(capsys)
    assert out.count("\n") == 1 and out.endswith("}\n")  # one line: it goes to $GITHUB_OUTPUT as matrix=...
    buildable = [c.id for c in matrix.load(ROOT / "matrix.yaml").buildable()]
    assert [r["cell"] for r in rows] == buildable
    for row in rows:
        if row["cell"] == ARM64:   # no arm64 GPU runner named: its CPU-only job (below)
            assert (row["arch"], row["platform"]) == ("cpu", "linux/arm64")
            continue
        assert row == {"cell": row["cell"], "arch": "any", "runs-on": DEFAULT_LABELS, "platform": "linux/amd64",
                       "machine": "x86_64", "name": row["cell"]}


def test_per_arch_labels_give_one_job_per_cell_and_arch_on_that_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Written in another order than `archs:`: jobs still follow `archs:` (sm_100a before sm_120a).
    path = with_runners(tmp_path, {"default": DEFAULT_LABELS, "archs": {"sm_120a": RTX, "sm_100a": B200}})
    _, rows = github(capsys, "--matrix", str(path), "--only", "sglang0.5.16-*")
    cells = ["sglang0.5.16-torch2.11.0-cu130-none-bookworm", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    assert [(r["cell"], r["arch"], r["runs-on"]) for r in rows] == [
        (cells[0], "sm_100a", B200), (cells[0], "sm_120a", RTX),
        (cells[1], "sm_100a", B200), (cells[1], "sm_120a", RTX),
    ]
    assert rows[0]["name"] == f"{cells[0]} on sm_100a"
    assert len({(r["cell"], r["arch"]) for r in rows}) == len(rows)  # artifact names stay apart


def test_only_and_skip_select_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows = github(capsys, "--only", "sglang0.5.16-*", "--skip", "*-none-*")
    assert [r["cell"] for r in rows] == ["sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    with pytest.raises(SelectionError, match="matches no buildable cell"):
        call(matrix_command, ["--github", "--only", "sglang9.9-*"])


def test_github_output_lists_buildable_cells_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        call(matrix_command, ["--github", "--all"])
    assert exc.value.code == 2
    assert "drop --all" in capsys.readouterr().err


def test_runners_default_to_a_linux_gpu_runner_when_the_section_is_absent() -> None:
    data = yaml.safe_load(DEFAULT)
    del data["runners"]
    spec = matrix.parse(yaml.safe_dump(data), Path("matrix.yaml")).spec
    assert list(spec.runners.default) == DEFAULT_LABELS and spec.runners.archs == {}


def test_a_runner_arch_that_is_not_in_archs_is_an_error_with_the_fix(tmp_path: Path) -> None:
    message = error_of(with_runners(tmp_path, {"archs": {"sm_100": B200}}))
    assert "unknown arch 'sm_100' under runners.archs" in message
    assert "did you mean 'sm_100a'?" in message
    assert "sm_90a, sm_100a, sm_120a" in message and "add the arch there" in message
    assert "line " in message  # points at the runners section of the file


def test_an_unknown_key_in_runners_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    message = error_of(with_runners(tmp_path, {"defaults": DEFAULT_LABELS}))
    assert "runners.defaults: unknown key 'defaults'; did you mean 'default'?" in message


@pytest.mark.parametrize(("labels", "problem"), [
    ([], "runners.default: give at least one runner label"),
    (["self-hosted", "has space"], "runners.default.1: a runner label is letters, digits"),
    ("gpu", "runners.default: "),
])
def test_runner_labels_must_be_a_non_empty_list_of_label_names(tmp_path: Path, labels: object, problem: str) -> None:
    assert problem in error_of(with_runners(tmp_path, {"default": labels}))


# ---------------------------------------------------------------- platforms: arm64 cells and their runners

ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
AMD64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm"
H200 = ["self-hosted", "linux", "x64", "gpu", "h200"]
GH200 = ["self-hosted", "linux", "arm64", "gpu", "gh200"]
GB200 = ["self-hosted", "linux", "ARM64", "gpu", "gb200"]


def builds(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    assert call(matrix_command, ["--builds", *argv]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1   # one line: setup writes it to $GITHUB_OUTPUT as builds=...
    rows: list[dict[str, object]] = json.loads(out)["include"]
    return rows


def test_an_opt_in_platform_gets_jobs_only_when_a_glob_names_it_as_nox_s_build_builds_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(DEFAULT)
    data["platforms"]["linux/arm64"]["opt_in"] = "built only when named"
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, rows = github(capsys, "--matrix", str(path))
    assert ARM64 not in [r["cell"] for r in rows]
    assert ARM64 not in str(builds(capsys, "--matrix", str(path)))
    _, rows = github(capsys, "--matrix", str(path), "--only", "sglang0.5.23-*-pip-*")
    assert [r["cell"] for r in rows] == [AMD64, ARM64]


def test_an_arm64_cell_without_an_arm64_gpu_runner_gets_a_cpu_only_job_on_a_hosted_arm64_runner(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, rows = github(capsys, "--only", "*-bookworm-arm64")
    assert rows == [{"cell": ARM64, "arch": "cpu", "runs-on": ["ubuntu-24.04-arm"], "platform": "linux/arm64",
                     "machine": "aarch64", "name": f"{ARM64} on the CPU only"}]


def test_amd64_and_arm64_gpu_runners_of_one_arch_stay_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """H200 and GH200 are both sm_90a: each cell's sm_90a job goes to a runner of its own platform."""
    path = with_runners(tmp_path, {"default": DEFAULT_LABELS, "archs": {"sm_90a": H200, "sm_100a": B200},
                                   "platforms": {"linux/arm64": {"archs": {"sm_100a": GB200, "sm_90a": GH200}}}})
    _, rows = github(capsys, "--matrix", str(path), "--only", "sglang0.5.23-*-pip-*")
    assert [(r["cell"], r["arch"], r["runs-on"], r["platform"], r["machine"]) for r in rows] == [
        (AMD64, "sm_90a", H200, "linux/amd64", "x86_64"), (AMD64, "sm_100a", B200, "linux/amd64", "x86_64"),
        (ARM64, "sm_90a", GH200, "linux/arm64", "aarch64"), (ARM64, "sm_100a", GB200, "linux/arm64", "aarch64"),
    ]   # in `archs:` order; sm_120a (amd64) and sm_103a, sm_121a (arm64) have no runner here, so no job
    assert len({(r["cell"], r["arch"]) for r in rows}) == len(rows)   # artifact names stay apart


def test_an_arm64_default_gpu_runner_gives_one_job_and_cpu_false_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = with_runners(tmp_path, {"platforms": {"linux/arm64": {"default": GH200}}})
    _, rows = github(capsys, "--matrix", str(path), "--only", "*-bookworm-arm64")
    assert [(r["arch"], r["runs-on"]) for r in rows] == [("any", GH200)]
    path = with_runners(tmp_path, {"platforms": {"linux/arm64": {"cpu": ["self-hosted", "linux", "arm64", "cpu"]}}})
    _, rows = github(capsys, "--matrix", str(path), "--only", "*-bookworm-arm64")
    assert [(r["arch"], r["runs-on"]) for r in rows] == [("cpu", ["self-hosted", "linux", "arm64", "cpu"])]
    path = with_runners(tmp_path, {"platforms": {"linux/arm64": {"cpu": False}}})
    assert call(matrix_command, ["--github", "--matrix", str(path), "--only", "sglang0.5.23-*-pip-*"]) == 0
    out, err = capsys.readouterr()
    assert [r["cell"] for r in json.loads(out)["include"]] == [AMD64]
    assert "no verify job for 1 cell(s)" in err and ARM64 in err and "cpu: false" in err


def test_arm64_cells_are_built_with_the_others_under_emulation_or_natively_on_their_own_runner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = builds(capsys, "--only", "sglang0.5.23-*-pip-*")
    assert rows == [{"id": "build", "name": "build linux/amd64, linux/arm64 (emulated)",
                     "runs-on": ["self-hosted", "linux", "x64", "build"], "platforms": "linux/amd64 linux/arm64",
                     "cells": f"{AMD64} {ARM64}"}]
    arm_builder = ["self-hosted", "linux", "arm64", "build"]
    path = with_runners(tmp_path, {"platforms": {"linux/arm64": {"build": arm_builder}}})
    rows = builds(capsys, "--matrix", str(path), "--only", "sglang0.5.23-*-pip-*")
    assert [(r["id"], r["name"], r["runs-on"], r["cells"]) for r in rows] == [
        ("build", "build linux/amd64", ["self-hosted", "linux", "x64", "build"], AMD64),
        ("build-arm64", "build linux/arm64", arm_builder, ARM64)]
    rows = builds(capsys, "--matrix", str(path), "--only", "*-arm64")   # no amd64 cell: no job on runners.build
    assert [r["id"] for r in rows] == ["build-arm64"]
    rows = builds(capsys, "--matrix", str(path))   # the whole matrix: arm64 on its own runner
    assert [r["id"] for r in rows] == ["build", "build-arm64"] and rows[1]["cells"] == ARM64


@pytest.mark.parametrize(("runners", "problem"), [
    ({"platforms": {"linux/arm": {}}}, "runners.platforms.linux/arm: 'linux/arm' is not a platform this project "
                                       "builds for; did you mean 'linux/arm64'?"),
    ({"platforms": {"linux/amd64": {"default": DEFAULT_LABELS}}},
     "runners.platforms.linux/amd64: linux/amd64's runners are the top-level runners.default and runners.archs"),
    ({"platforms": {"linux/arm64": {"archs": {"sm_120a": GH200}}}},
     "runners.platforms.linux/arm64.archs.sm_120a: unknown arch 'sm_120a' for linux/arm64 (its archs: sm_90a, "
     "sm_100a, sm_103a, sm_121a); did you mean 'sm_121a'?"),
    ({"archs": {"sm_121a": GH200}}, "unknown arch 'sm_121a' under runners.archs, the GPU runners of linux/amd64"),
    ({"platforms": {"linux/arm64": {"archs": {"sm_90a": ["self-hosted", "linux", "gpu", "gh200"]}}}},
     "runners.platforms.linux/arm64.archs.sm_90a: a self-hosted runner's labels must name its CPU, so that a "
     "runner of another CPU with the same GPU never takes a linux/arm64 job: add arm64"),
    ({"platforms": {"linux/arm64": {"archs": {"sm_90a": H200}}}},
     "runners.platforms.linux/arm64.archs.sm_90a: these labels ask for a linux/amd64 runner"),
    ({"archs": {"sm_90a": GH200}}, "runners.archs.sm_90a: these labels ask for a linux/arm64 runner"),
    ({"default": ["self-hosted", "linux", "gpu"]}, "runners.default: a self-hosted runner's labels must name its CPU"),
    ({"platforms": {"linux/arm64": {"cpu": ["ubuntu-24.04"]}}},
     "runners.platforms.linux/arm64.cpu: these labels ask for a linux/amd64 runner (ubuntu-24.04)"),
    ({"platforms": {"linux/arm64": {"build": ["self-hosted", "x64", "arm64"]}}}, "these labels name two CPUs"),
    ({"platforms": {"linux/arm64": {"arch": {}}}},
     "runners.platforms.linux/arm64.arch: unknown key 'arch'; did you mean 'archs'?"),
    ({"platforms": {"linux/arm64": {"cpu": True}}}, "runners.platforms.linux/arm64.cpu"),
    ({"platforms": {"linux/arm64": {"default": []}}}, "runners.platforms.linux/arm64.default: give at least one"),
])
def test_bad_platform_runners_are_errors_that_say_the_fix(tmp_path: Path, runners: object, problem: str) -> None:
    message = error_of(with_runners(tmp_path, runners))
    assert problem in message
    assert "line " in message


def test_runners_of_a_platform_the_matrix_does_not_build_are_an_error(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT)
    del data["bases"]["bookworm-arm64"], data["platforms"]["linux/arm64"]
    data["exclude"] = [e for e in data["exclude"] if "arm64" not in e["match"]]
    data["runners"] = {"platforms": {"linux/arm64": {"default": GH200}}}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert ("runners.platforms.linux/arm64: the matrix builds no linux/arm64 cell (its platforms: linux/amd64)"
            in error_of(path))


def test_hosted_and_self_hosted_labels_name_their_cpu() -> None:
    assert [c.oci for c in labels_cpus(["ubuntu-24.04-arm"])] == ["linux/arm64"]
    assert [c.oci for c in labels_cpus(["ubuntu-latest"])] == ["linux/amd64"]
    assert [c.oci for c in labels_cpus(GB200)] == ["linux/arm64"]   # GitHub's own spelling, ARM64
    assert [c.oci for c in labels_cpus(H200)] == ["linux/amd64"]
    assert labels_cpus(["self-hosted", "gpu"]) == ()
