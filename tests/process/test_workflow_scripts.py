"""The jobs' shell steps, taken from the workflow and run with bash as a runner runs them (`bash -e`), against
stand-in `nox`, `uv`, `docker`, `skopeo`, `nvidia-smi`, `uname`, `python` and `sudo` that record how they were
called."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"  # found here: the scripts run with a PATH of stand-ins
JOBS: dict[str, dict[str, Any]] = yaml.safe_load(
    (ROOT / ".github" / "workflows" / "sglang-images.yml").read_text())["jobs"]


def script(name: str, job: str = "verify") -> str:
    found = [s["run"] for s in JOBS[job]["steps"] if s.get("name") == name]
    assert len(found) == 1
    return str(found[0])


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """A bin folder of stand-ins: each logs its arguments and stdin; nvidia-smi reports $FAKE_CAP."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nox", "uv", "docker", "skopeo"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/bash\necho "{name} $*" >> "$CALLS"\n'
                        f'input=$(cat)\nif [ -n "$input" ]; then echo "stdin: $input" >> "$CALLS"; fi\n'
                        f'if [ -n "$DOCKER_CONFIG" ]; then mkdir -p "$DOCKER_CONFIG"; fi\n'
                        f'if [ -n "$FAKE_OUT" ]; then echo "$FAKE_OUT"; fi\n')
        tool.chmod(0o755)
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/bash\necho "nvidia-smi $*" >> "$CALLS"\necho "$FAKE_CAP"\n')
    smi.chmod(0o755)
    uname = bin_dir / "uname"   # the runner's CPU as `uname -m` says it
    uname.write_text('#!/bin/bash\necho "uname $*" >> "$CALLS"\necho "${FAKE_MACHINE:-x86_64}"\n')
    uname.chmod(0o755)
    for name in ("python", "sudo"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/bash\necho "{name} $*" >> "$CALLS"\n')
        tool.chmod(0o755)
    return bin_dir


def run(step: str, tmp_path: Path, path: str, job: str = "verify",
        **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    calls = tmp_path / "calls.log"
    calls.write_text("")
    done = subprocess.run([BASH, "--noprofile", "--norc", "-e", "-c", script(step, job)], capture_output=True,
                          cwd=tmp_path, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={"PATH": path, "CALLS": str(calls), "RUNNER_NAME": "gpu-runner-7", **env})
    return done, calls.read_text()


def system_path(tools: Path, *without: str) -> str:
    """The stand-ins plus the system folders, minus folders that hold a real one of `without`."""
    folders = ["/usr/local/bin", "/usr/bin", "/bin"]
    keep = [d for d in folders if not any((Path(d) / w).exists() for w in without)]
    return os.pathsep.join([str(tools), *keep])


def test_the_runner_check_names_a_missing_tool(tools: Path, tmp_path: Path) -> None:
    done, _ = run("Check the runner", tmp_path, system_path(tools))
    assert done.returncode == 0, done.stdout + done.stderr
    (tools / "uv").unlink()
    done, _ = run("Check the runner", tmp_path, system_path(tools, "uv"))
    assert done.returncode == 1
    assert "::error::uv is not installed on runner gpu-runner-7" in done.stdout


@pytest.mark.parametrize(("arch", "capability", "ok"), [
    ("sm_100a", "10.0", True), ("sm_120a", "12.0", True), ("sm_90a", "9.0", True),
    ("sm_100a", "9.0", False), ("sm_120a", "10.0", False),
])
def test_the_gpu_check_refuses_a_runner_with_another_gpu(
        tools: Path, tmp_path: Path, arch: str, capability: str, ok: bool) -> None:
    done, calls = run("Check the GPU is the job's arch", tmp_path, system_path(tools), ARCH=arch,
                      FAKE_CAP=capability)
    assert "nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0" in calls
    assert done.returncode == (0 if ok else 1), done.stdout + done.stderr
    if not ok:
        found = "sm_" + capability.replace(".", "")
        assert f"runner gpu-runner-7 has a {found} GPU but this job is for {arch}" in done.stdout


def test_the_gpu_check_warns_without_nvidia_smi(tools: Path, tmp_path: Path) -> None:
    (tools / "nvidia-smi").unlink()
    done, _ = run("Check the GPU is the job's arch", tmp_path, system_path(tools, "nvidia-smi"), ARCH="sm_100a")
    assert done.returncode == 0
    assert "::warning::no nvidia-smi on runner gpu-runner-7" in done.stdout


def test_promotion_is_skipped_cleanly_without_a_registry(tools: Path, tmp_path: Path) -> None:
    done, calls = run("Promote the tested digests", tmp_path, system_path(tools), job="promote", REGISTRY="")
    assert done.returncode == 0
    assert "::notice title=Promotion skipped::" in done.stdout
    assert calls == ""  # neither docker login nor nox ran


def test_promotion_logs_in_to_both_registries_with_the_secrets_on_stdin_and_removes_the_login(
        tools: Path, tmp_path: Path) -> None:
    config = tmp_path / "docker-config"
    done, calls = run("Promote the tested digests", tmp_path, system_path(tools), job="promote",
                      REGISTRY="registry.example:5000/team", STAGING="staging.example/team/staging",
                      REGISTRY_USERNAME="bot", REGISTRY_PASSWORD="s3cret", DOCKER_CONFIG=str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == [
        "docker login registry.example:5000 --username bot --password-stdin", "stdin: s3cret",
        "docker login staging.example --username bot --password-stdin", "stdin: s3cret",
        "nox -s promote -- --registry registry.example:5000/team --results collected/*/results.json",
    ]
    assert "s3cret" not in done.stdout + done.stderr
    assert not config.exists()  # the job's login is gone with the step


def test_the_build_jobs_of_the_selection_go_to_the_setup_outputs(tools: Path, tmp_path: Path) -> None:
    output = tmp_path / "github-output"
    rows = '{"include":[{"id":"build","cells":"a b"}]}'
    for only, argv in (("", "--builds"), ("*-bookworm-arm64", "--builds --only *-bookworm-arm64")):
        output.write_text("")
        done, calls = run("Build jobs from matrix.yaml", tmp_path, system_path(tools), job="setup", ONLY=only,
                          RUNNER_TEMP=str(tmp_path), GITHUB_OUTPUT=str(output), FAKE_OUT=rows)
        assert done.returncode == 0, done.stdout + done.stderr
        assert calls.splitlines() == [f"nox -s matrix -- {argv}"]
        assert output.read_text().splitlines() == [f"builds={rows}"]


def test_the_build_builds_its_cells_and_stages_them_when_a_staging_repository_is_set(
        tools: Path, tmp_path: Path) -> None:
    config = tmp_path / "docker-config"
    cells = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
    done, calls = run("Build once, check on the CPU, stage", tmp_path, system_path(tools), job="build",
                      STAGING="ghcr.io/org/staging", REGISTRY_USERNAME="bot", REGISTRY_PASSWORD="s3cret",
                      CELLS=cells, RUN_ID="gh1.1-build", DOCKER_CONFIG=str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == [
        "docker login ghcr.io --username bot --password-stdin", "stdin: s3cret",
        "nox -s build -- --only sglang0.5.23-torch2.14.1-cu130-pip-bookworm --only "
        "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64 --run-id gh1.1-build --stage ghcr.io/org/staging"]
    assert not config.exists()
    done, calls = run("Build once, check on the CPU, stage", tmp_path, system_path(tools), job="build",
                      STAGING="", CELLS="sglang0.5.16-x", RUN_ID="gh1.1-build-arm64", DOCKER_CONFIG=str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "::notice title=Nothing staged::" in done.stdout
    assert calls.splitlines() == ["nox -s build -- --only sglang0.5.16-x --run-id gh1.1-build-arm64"]


def test_the_verify_jobs_of_every_build_job_and_their_count_go_to_the_plan_outputs(tools: Path, tmp_path: Path) -> None:
    output = tmp_path / "github-output"
    rows = '{"include":[{"cell":"a","image":"r@sha256:1"},{"cell":"b","image":"r@sha256:2"}]}'
    for job in ("results-build", "results-build-arm64"):
        (tmp_path / "staged" / job).mkdir(parents=True)
        (tmp_path / "staged" / job / "results.json").write_text("{}")
    done, calls = run("Verify jobs of the staged digests", tmp_path, system_path(tools), job="plan",
                      RUNNER_TEMP=str(tmp_path), GITHUB_OUTPUT=str(output), FAKE_OUT=rows)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = calls.splitlines()
    words = line.split()
    assert words[:5] == ["nox", "-s", "matrix", "--", "--github"] and words[5::2] == ["--staged", "--staged"]
    assert sorted(words[6::2]) == ["staged/results-build-arm64/results.json", "staged/results-build/results.json"]
    assert output.read_text().splitlines() == [f"matrix={rows}", "count=2"]
    output.write_text("")
    for job in ("results-build", "results-build-arm64"):   # the builds failed before their first cell
        (tmp_path / "staged" / job / "results.json").unlink()
    done, calls = run("Verify jobs of the staged digests", tmp_path, system_path(tools), job="plan",
                      RUNNER_TEMP=str(tmp_path), GITHUB_OUTPUT=str(output))
    assert done.returncode == 0 and calls == ""
    assert output.read_text().splitlines() == ['matrix={"include":[]}', "count=0"]


@pytest.mark.parametrize(("machine", "found", "ok"), [
    ("aarch64", "aarch64", True), ("x86_64", "x86_64", True),
    ("aarch64", "x86_64", False), ("x86_64", "aarch64", False),
])
def test_the_cpu_check_refuses_a_runner_of_another_platform(
        tools: Path, tmp_path: Path, machine: str, found: str, ok: bool) -> None:
    done, calls = run("Check the runner's CPU is the cell's platform", tmp_path, system_path(tools),
                      MACHINE=machine, FAKE_MACHINE=found, CELL="sglang0.5.23-x-bookworm-arm64",
                      PLATFORM={"aarch64": "linux/arm64", "x86_64": "linux/amd64"}[machine])
    assert calls.splitlines() == ["uname -m"]
    assert done.returncode == (0 if ok else 1), done.stdout + done.stderr
    if not ok:
        platform = "linux/arm64" if machine == "aarch64" else "linux/amd64"
        assert (f"::error::runner gpu-runner-7 is {found} but sglang0.5.23-x-bookworm-arm64 is a {platform} image, "
                f"for a {machine} machine") in done.stdout


def test_a_hosted_runner_gets_nox_uv_and_a_missing_skopeo(tools: Path, tmp_path: Path) -> None:
    done, calls = run("Install the tools on a GitHub-hosted runner", tmp_path, system_path(tools))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == ["python -m pip install nox uv"]
    (tools / "skopeo").unlink()
    done, calls = run("Install the tools on a GitHub-hosted runner", tmp_path, system_path(tools, "skopeo"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == ["python -m pip install nox uv", "sudo apt-get update",
                                  "sudo apt-get install -y skopeo"]


def test_a_gpu_job_logs_in_to_pull_and_verifies_the_digest(tools: Path, tmp_path: Path) -> None:
    done, calls = run("Verify the staged digest", tmp_path, system_path(tools), IMAGE="ghcr.io/org/staging@sha256:ab",
                      RUN_ID="gh1.1-cell-sm_100a", REGISTRY_USERNAME="reader", REGISTRY_PASSWORD="r34d",
                      DOCKER_CONFIG=str(tmp_path / "docker-config"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == ["docker login ghcr.io --username reader --password-stdin", "stdin: r34d",
                                  "nox -s verify -- --pull ghcr.io/org/staging@sha256:ab --run-id gh1.1-cell-sm_100a"]


def test_a_gpu_job_passes_every_cpu_record_it_downloaded(tools: Path, tmp_path: Path) -> None:
    for job in ("build", "build-arm64"):
        (tmp_path / "cpu-records" / f"cpu-records-{job}").mkdir(parents=True)
        (tmp_path / "cpu-records" / f"cpu-records-{job}" / "results.json").write_text("{}")
    done, calls = run("Verify the staged digest", tmp_path, system_path(tools), IMAGE="ghcr.io/org/staging@sha256:ab",
                      RUN_ID="gh1.1-cell-sm_100a", DOCKER_CONFIG=str(tmp_path / "docker-config"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.splitlines() == ["nox -s verify -- --pull ghcr.io/org/staging@sha256:ab --run-id gh1.1-cell-sm_100a "
                                  "--cpu-record cpu-records/cpu-records-build-arm64/results.json "
                                  "--cpu-record cpu-records/cpu-records-build/results.json"]
