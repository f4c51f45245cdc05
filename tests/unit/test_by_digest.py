"""Build once, verify by digest, promote the tested digest: the rules, without a registry or an engine.

What a reference names, which manifest of an index is this platform's, what a staging build may be asked,
which verify jobs a staging build's results give, and what the records of one digest earn across jobs.
The registry round trips are in tests/integration/test_promote_by_digest.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildscripts import matrix, results
from buildscripts.commands import build as build_command
from buildscripts.commands import matrix as matrix_command
from buildscripts.commands import verify as verify_command
from buildscripts.errors import ConfigError, ResultsError
from buildscripts.publish import bydigest, trusted
from buildscripts.registry import manifests, references
from buildscripts.results import CellResult
from buildscripts.trust import keys
from buildscripts.verify import pulled
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.digest_records import PIP_CELL, arch_runners_matrix, built, cell_of, gpu_job, save
from tests.results_factory import server_fails

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "d1" * 32
OTHER = "sha256:" + "0e" * 32
IMAGE_ID = "sha256:" + "1d" * 32
STAGING = "127.0.0.1:5000/sglang-images-staging"


@pytest.mark.parametrize(("ref", "expected"), [
    (f"{STAGING}@{DIGEST}", (STAGING, DIGEST)),
    (f"{STAGING}:some-tag@{DIGEST}", (STAGING, DIGEST)),   # the engine ignores a tag beside a digest
    (f"ghcr.io/org/images@{DIGEST}", ("ghcr.io/org/images", DIGEST)),
    (f"{STAGING}:some-tag", None), ("sglang-images", None), ("not a reference", None),
])
def test_a_reference_names_a_digest_or_not(ref: str, expected: tuple[str, str] | None) -> None:
    assert references.by_digest(ref) == expected


@pytest.mark.parametrize(("repository", "loopback"), [
    ("127.0.0.1:5000/x", True), ("127.10.0.3:5000/a/b", True), ("localhost:5000/x", True), ("[::1]:5000/x", True),
    ("ghcr.io/org/x", False), ("128.0.0.1:5000/x", False), ("org/x", False), ("x", False),
])
def test_plain_http_only_for_a_registry_on_loopback(repository: str, loopback: bool) -> None:
    assert references.is_loopback(repository) is loopback
    assert ("--tls-verify=false" in manifests._access("", repository, {})) is loopback


def test_the_docker_config_of_the_job_gives_skopeo_its_credentials(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert f"--src-authfile={tmp_path / 'config.json'}" in manifests._access("src-", "ghcr.io/o/x",
                                                                                   {"DOCKER_CONFIG": str(tmp_path)})
    assert not any("authfile" in a for a in manifests._access("", "ghcr.io/o/x", {}))


def test_the_manifest_of_this_platform_is_picked_from_an_index() -> None:
    index = manifests.Manifest("r@x", DIGEST, {
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"digest": OTHER, "platform": {"os": "linux", "architecture": "arm64"}},
                      {"digest": IMAGE_ID, "platform": {"os": "linux", "architecture": "amd64"}}]})
    assert index.is_index and index.platform("linux", "amd64") == IMAGE_ID and index.children() == [OTHER, IMAGE_ID]
    single = manifests.Manifest("r@y", DIGEST, {"mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                                                   "config": {"digest": IMAGE_ID}})
    assert not single.is_index and single.config_digest == IMAGE_ID and single.platform("linux", "amd64") is None


def test_a_gpu_job_refuses_a_tag_before_asking_the_engine() -> None:
    with pytest.raises(ConfigError, match="names a tag, not a digest") as refused:
        call(verify_command, ["--pull", f"{STAGING}:0.5.16-pip"], Workspace.at(ROOT), {})
    assert "REPO@sha256:" in str(refused.value)
    assert pulled.pinned(f"{STAGING}@{DIGEST}") == (STAGING, DIGEST)
    with pytest.raises(SystemExit):
        verify_command.parse(["--pull", "--host"], Workspace.at(ROOT), {})


@pytest.mark.parametrize(("argv", "words"), [
    (["--stage", STAGING, "--no-verify"], "cannot go with --no-verify"),
    (["--stage", STAGING, "--per-gpu"], "cannot go with --per-gpu"),
    (["--stage", "sglang-images-staging"], "names no registry host"),
    (["--stage", "127.0.0.1:5000/Upper"], "lower case"),
])
def test_a_staging_build_refuses_what_it_cannot_do_before_building(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        build_command.parse(argv, Workspace.at(ROOT), {})


def test_a_staging_build_runs_the_cpu_stages_only() -> None:
    opts = build_command.parse(["--stage", STAGING], Workspace.at(ROOT), {})
    assert opts.verified_stages == tuple(results.CPU_STAGES)
    opts = build_command.parse(["--stage", STAGING, "--stages", "facts,server"], Workspace.at(ROOT), {})
    assert opts.verified_stages == ("facts",)
    assert build_command.parse([], Workspace.at(ROOT), {}).verified_stages is None


def staged_run(tmp_path: Path, loaded: matrix.Matrix) -> Path:
    """A staging build's results: the pip cell staged, the none cell (expected to fail at import) not."""
    record = built(cell_of(loaded), IMAGE_ID)
    record = record.model_copy(update={"image": record.image.model_copy(update={"repository": STAGING,
                                                                               "digest": DIGEST})})
    path = save(record, tmp_path / "build" / "results.json", loaded)
    run = results.load(path)
    none = built(cell_of(loaded, PIP_CELL.replace("-pip-", "-none-")), OTHER)
    run.cells.append(none)
    results.save(run, path)
    return path


def test_the_verify_jobs_are_the_matrix_jobs_of_what_was_staged_with_its_digest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = arch_runners_matrix(tmp_path)
    staged = staged_run(tmp_path, matrix.load(path))
    argv = ["--matrix", str(path), "--github", "--only", "sglang0.5.16-*", "--staged", str(staged)]
    assert call(matrix_command, argv) == 0
    rows = json.loads(capsys.readouterr().out)["include"]
    assert call(matrix_command, ["--matrix", str(path), "--github", "--only", PIP_CELL]) == 0
    planned = json.loads(capsys.readouterr().out)["include"]
    assert [{k: v for k, v in r.items() if k != "image"} for r in rows] == planned   # the none cell: no GPU job
    assert [(r["arch"], r["image"]) for r in rows] == [("sm_100a", f"{STAGING}@{DIGEST}"),
                                                       ("sm_120a", f"{STAGING}@{DIGEST}")]
    assert call(matrix_command, ["--matrix", str(path), "--build-runner"]) == 0
    assert json.loads(capsys.readouterr().out) == ["self-hosted", "linux", "x64", "build"]


# ---------------------------------------------------------------- what one digest's records earn


def evidence(tmp_path: Path, loaded: matrix.Matrix, *records: tuple[str, CellResult]) -> list[bydigest.Evidence]:
    """The gated records, each saved alone (name, record) as the jobs' artifacts hold them."""
    found = []
    trusted_keys = [keys.signing_key(os.environ).public]   # this test session's verifier key
    for name, record in records:
        path = save(record, tmp_path / name / "results.json", loaded)
        checked = trusted.check(results.load(path).cells[0], 0, loaded, trusted_keys)
        assert isinstance(checked, trusted.Trusted), checked
        found.append(bydigest.Evidence(path, checked))
    return found


def staged_build(loaded: matrix.Matrix, digest: str = DIGEST) -> CellResult:
    record = built(cell_of(loaded), IMAGE_ID)
    return record.model_copy(update={"image": record.image.model_copy(update={"repository": STAGING,
                                                                              "digest": digest})})


def test_each_arch_earns_its_tag_and_both_together_the_arch_free_tag(tmp_path: Path) -> None:
    loaded = matrix.load(arch_runners_matrix(tmp_path))
    build = staged_build(loaded)
    one = bydigest.weigh(PIP_CELL, evidence(tmp_path, loaded, ("build", build), ("v100", gpu_job(build, "sm_100"))),
                         loaded, loaded.spec.tags)
    assert isinstance(one, bydigest.Promotion)
    assert (one.tags, one.digest, one.source) == (["0.5.16-torch2.11.0-cu130-pip-verified-sm100"], DIGEST, STAGING)
    assert one.withheld == "not verified on sm120"
    both = bydigest.weigh(PIP_CELL, evidence(tmp_path, loaded, ("build", build), ("v100", gpu_job(build, "sm_100")),
                                             ("v120", gpu_job(build, "sm_120"))), loaded, loaded.spec.tags)
    assert isinstance(both, bydigest.Promotion)
    assert both.tags == ["0.5.16-torch2.11.0-cu130-pip-verified-sm100", "0.5.16-torch2.11.0-cu130-pip-verified-sm120",
                         "0.5.16-torch2.11.0-cu130-pip"]   # the arch-free tag last
    assert both.tag_archs == {"0.5.16-torch2.11.0-cu130-pip-verified-sm100": "sm100",
                              "0.5.16-torch2.11.0-cu130-pip-verified-sm120": "sm120"}


def test_a_failure_on_one_arch_keeps_the_arch_free_tag_back(tmp_path: Path) -> None:
    loaded = matrix.load(arch_runners_matrix(tmp_path))
    build = staged_build(loaded)
    found = bydigest.weigh(PIP_CELL, evidence(tmp_path, loaded, ("v100", gpu_job(build, "sm_100")),
                                              ("v120", gpu_job(build, "sm_120", server_fails(
                                                  "NVIDIA RTX PRO 6000 Blackwell", "sm_120")))),
                           loaded, loaded.spec.tags)
    assert isinstance(found, bydigest.Promotion)
    assert found.tags == ["0.5.16-torch2.11.0-cu130-pip-verified-sm100"]
    assert found.withheld is not None and "sm120" in found.withheld and "failed" in found.withheld


def test_without_arch_runners_one_verified_arch_earns_the_arch_free_tag(tmp_path: Path) -> None:
    loaded = matrix.load(ROOT / "matrix.yaml")   # runners.default only: any one GPU runner verifies a cell
    build = staged_build(loaded)
    found = bydigest.weigh(PIP_CELL, evidence(tmp_path, loaded, ("v100", gpu_job(build, "sm_100"))), loaded,
                           loaded.spec.tags)
    assert isinstance(found, bydigest.Promotion)
    assert found.tags == ["0.5.16-torch2.11.0-cu130-pip-verified-sm100", "0.5.16-torch2.11.0-cu130-pip"]


def test_records_of_two_digests_that_both_earned_tags_are_refused(tmp_path: Path) -> None:
    loaded = matrix.load(arch_runners_matrix(tmp_path))
    first, second = staged_build(loaded), staged_build(loaded, OTHER)
    found = evidence(tmp_path, loaded, ("a", gpu_job(first, "sm_100")), ("b", gpu_job(second, "sm_120")))
    with pytest.raises(ResultsError, match="records of 2 different images earned good tags"):
        bydigest.weigh(PIP_CELL, found, loaded, loaded.spec.tags)


def test_a_cpu_only_staging_record_earns_nothing(tmp_path: Path) -> None:
    loaded = matrix.load(arch_runners_matrix(tmp_path))
    found = bydigest.weigh(PIP_CELL, evidence(tmp_path, loaded, ("build", staged_build(loaded))), loaded,
                           loaded.spec.tags)
    assert isinstance(found, str) and "cpu-checked" in found
