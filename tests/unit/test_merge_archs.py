"""Results of several CI runners merged per GPU arch, and results of another matrix.yaml refused.

Three job result sets: runner A verified on sm_100, runner B on sm_120, runner C (newest) had no GPU.
They overlap on two cells; the merged record must keep both archs' GPU stages, say where each came
from, judge each arch, and give a good tag per verified arch only.
"""

from __future__ import annotations

import os
from pathlib import Path

from buildscripts import matrix, results
from buildscripts.commands import report as report_command
from buildscripts.publish import promotion, tags, trusted
from buildscripts.report import common, junit, merge
from buildscripts.results import GPU_STAGES, RunResults, StageResult, Verdict
from buildscripts.trust import keys
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import B200, RTX, ci_job, gated, gpu_passed, kinds_matrix, passed_gate, sealed, vouched
from tests.results_factory import three_ci_jobs as _three_ci_jobs

ROOT = Path(__file__).resolve().parents[2]
PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"       # verified on both archs
APT = "sglang0.5.16-torch2.11.0-cu130-apt-bookworm"       # verified on sm_100, server fails on sm_120
NOCCCL = "sglang0.5.16-torch2.11.0-cu130-pip-nocccl-bookworm"  # only the CPU-only runner built it
EXCLUDED = "sglang0.5.16-torch2.9.1-cu128-none-bookworm"
DIGEST = results.matrix_digest(matrix.load(ROOT / "matrix.yaml").spec)
TAGS = matrix.load(ROOT / "matrix.yaml").spec.tags


def three_jobs() -> list[RunResults]:
    return _three_ci_jobs(DIGEST)


def job(run_id: str, runner: str, finished: str, cells: dict[str, list[StageResult] | None]) -> RunResults:
    return ci_job(run_id, runner, finished, cells, DIGEST)


def test_one_row_per_cell_with_every_arch_and_its_provenance() -> None:
    merged = merge.merge(three_jobs())
    assert [c.cell_id for c in merged.cells] == sorted([PIP, APT, NOCCCL, EXCLUDED])
    assert merged.matrix_digest == DIGEST
    pip = merged.cell(PIP)
    assert pip is not None
    assert pip.verdict is Verdict.VERIFIED and pip.verified_archs == ["sm_100", "sm_120"]
    assert pip.verdict_reason == f"verified on sm_100, sm_120 ({B200}, {RTX})"
    server = {s.arch: s for s in common.entries(pip, "server")}
    assert set(server) == {"sm_100", "sm_120"}  # the CPU-only runner's skipped GPU stages say nothing of a GPU
    assert (server["sm_100"].run_id, server["sm_100"].runner) == ("job-sm100", "runner-a")
    assert (server["sm_120"].run_id, server["sm_120"].runner) == ("job-sm120", "runner-b")
    assert server["sm_120"].finished == "2026-11-30T08:10:00+00:00"
    facts = common.entries(pip, "facts")
    assert len(facts) == 1 and facts[0].run_id == "job-cpu"  # CPU stages: newest wins, as before
    assert [s.name for s in pip.stages][:7] == ["facts", "import", "flavour", "arch-audit", "toolchain",
                                                "jit-compile", "gpu-visible"]
    assert "sm_100" in common.gpu_summary(pip, vouched=True) and "sm_120" in common.gpu_summary(pip, vouched=True)


def test_a_failure_on_one_arch_and_a_pass_on_another_both_show() -> None:
    apt = merge.merge(three_jobs()).cell(APT)
    assert apt is not None
    assert apt.verdict is Verdict.FAILED and results.is_unexpected(apt.verdict)
    assert apt.verdict_reason == "failed at server on sm_120: server-died; verified on sm_100"
    assert apt.verified_archs == ["sm_100"]
    assert results.arch_outcomes(apt) == {"sm_100": "verified", "sm_120": "failed"}
    status, reason = common.outcome(apt, "server")
    assert status == "failed" and "sm_100: passed" in reason and "sm_120: failed (server-died" in reason


def test_a_merged_record_is_not_sealed_so_it_vouches_for_nothing() -> None:
    merged = merge.merge(three_jobs()).cell(PIP)
    assert merged is not None and merged.seal is not None  # runner B's seal, over runner B's record ...
    found = trusted.check(merged, 0, kinds_matrix(), [keys.signing_key(os.environ).public])
    assert isinstance(found, trusted.Refused) and "changed after it was sealed" in found.reason  # ... not this one


def test_good_tags_one_per_verified_arch_of_a_record_of_two_archs() -> None:
    """What the policy makes of a record with two archs (were a verifier to seal a merged record)."""
    merged = merge.merge(three_jobs())
    pip, apt = passed_gate(merged.cell(PIP)), passed_gate(merged.cell(APT))  # type: ignore[arg-type]
    nocccl = passed_gate(merged.cell(NOCCCL))  # type: ignore[arg-type]
    assert tags.good_tags(pip, TAGS) == [
        "sglang-images:0.5.16-torch2.11.0-cu130-pip",
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm100",
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm120",
    ]
    # Failed on sm_120: only the sm_100 tag; the arch-less tag would vouch for sm_120 too.
    assert tags.good_tags(apt, TAGS) == ["sglang-images:0.5.16-torch2.11.0-cu130-apt-verified-sm100"]
    assert apt.archs == ["sm100"] and apt.gpus == [B200]
    assert tags.good_tags(nocccl, TAGS) == []
    assert gated(merged.cell(EXCLUDED)).why_not  # type: ignore[arg-type]


def test_junit_names_each_arch_of_a_merged_stage() -> None:
    text = junit.render(vouched(merge.merge(three_jobs())))
    assert f'classname="{APT}" name="server [sm_120]"' in text and f'classname="{APT}" name="server [sm_100]"' in text


def test_a_newer_build_of_other_inputs_starts_the_cell_afresh_but_another_runner_of_the_same_inputs_does_not() -> None:
    first, second, _ = three_jobs()
    other_id = second.cells[0].image.model_copy(update={"id": "sha256:" + "cd" * 32})
    same_inputs = second.model_copy(deep=True)
    same_inputs.cells[0] = same_inputs.cells[0].model_copy(update={"image": other_id})
    assert merge.merge([first, same_inputs]).cell(PIP).verified_archs == ["sm_100", "sm_120"]  # type: ignore[union-attr]
    other_inputs = second.model_copy(deep=True)
    rebuilt = other_id.model_copy(update={"ref": "sglang-images:" + PIP + "-fedcba987654"})
    other_inputs.cells[0] = other_inputs.cells[0].model_copy(update={"image": rebuilt})
    assert merge.merge([first, other_inputs]).cell(PIP).verified_archs == ["sm_120"]  # type: ignore[union-attr]


def test_a_good_tag_vouches_only_for_archs_that_ran_in_that_very_image() -> None:
    """Two runners built the same inputs into two images: the merged row says both archs, but each image
    earns the arch tags of the GPU it really ran on."""
    first, second, _ = three_jobs()
    other_build = second.model_copy(deep=True)
    other_build.cells[0] = other_build.cells[0].model_copy(
        update={"image": second.cells[0].image.model_copy(update={"id": "sha256:" + "cd" * 32})})
    merged = merge.merge([first, other_build]).cell(PIP)
    assert merged is not None and merged.verified_archs == ["sm_100", "sm_120"]   # the report: both
    assert merged.image.id == "sha256:" + "cd" * 32                                 # runner B's build is newest
    checked = passed_gate(merged)
    assert checked.archs == ["sm120"]
    assert [t for t in tags.good_tags(checked, TAGS) if "verified" in t] == [
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm120"]
    only_a = merge.merge([other_build.model_copy(update={"cells": []}), first]).cell(PIP)
    assert only_a is not None and passed_gate(only_a).archs == ["sm100"]


# ---------------------------------------------------------------- results of another matrix.yaml


def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "matrix.yaml").write_text((ROOT / "matrix.yaml").read_text())
    (tmp_path / "README.md").write_text("# x\n")
    return Workspace.at(tmp_path)


def save_jobs(tmp_path: Path) -> list[Path]:
    paths = []
    for run in three_jobs():
        path = tmp_path / "runs" / run.run_id / "results.json"
        results.save(run, path)
        paths.append(path)
    return paths


def other_matrix_file(tmp_path: Path) -> Path:
    """A file of another matrix.yaml whose records carry their cell's definition, unchanged in this matrix (as a
    verifier of today's code seals them)."""
    other = "sha256:" + "0f" * 32
    run = ci_job("job-other", "runner-d", "2026-11-30T09:00:00+00:00", {"verified": gpu_passed(B200, "sm_100")}, other)
    run = run.model_copy(update={"cells": [sealed(c.model_copy(update={"seal": None}), matrix_digest=other,
                                                  against=kinds_matrix()) for c in run.cells]})
    path = tmp_path / "runs" / "job-other" / "results.json"
    results.save(run.model_copy(update={"matrix": "old/matrix.yaml"}), path)
    return path


def test_digest_ignores_comments_and_order_but_not_meaning(tmp_path: Path) -> None:
    text = (ROOT / "matrix.yaml").read_text()
    reworded = "# a comment that changes nothing\n" + text.replace("  - {torch: 2.9.1, cuda: cu128}\n", "") \
        .replace("torch_lanes:\n", "torch_lanes:\n  - {cuda: cu128, torch: 2.9.1}\n")
    assert results.matrix_digest(matrix.parse(reworded, tmp_path / "m.yaml").spec) == DIGEST
    changed = text.replace('timeout_s: 900\n  # FlashInfer', 'timeout_s: 901\n  # FlashInfer')
    assert changed != text
    assert results.matrix_digest(matrix.parse(changed, tmp_path / "m.yaml").spec) != DIGEST


def test_a_file_of_another_matrix_is_read_record_by_record(tmp_path: Path) -> None:
    """Its records carry their cell's definition: today's cell is the same, so they count, whatever the file's
    whole-matrix digest; nothing is refused for the file's sake."""
    ws = workspace(tmp_path)
    other_matrix_file(tmp_path)
    save_jobs(tmp_path)
    out = tmp_path / "r"
    assert call(report_command, ["--no-readme", "--out", str(out)], ws, env=dict(os.environ)) == 0
    page = (out / "compat.md").read_text()
    pip = next(line for line in page.splitlines() if line.startswith("- `sglang0.5.16-torch2.11.0-cu130-pip-bookworm`"))
    assert "stale" not in pip and "verified on" in pip


def test_every_gpu_stage_of_a_merged_arch_is_counted_once() -> None:
    pip = merge.merge(three_jobs()).cell(PIP)
    assert pip is not None
    runs = results.gpu_runs(pip)
    assert {arch: sorted(s.name for s in stages) for arch, stages in runs.items()} == {
        "sm_100": sorted(GPU_STAGES), "sm_120": sorted(GPU_STAGES)}


def test_a_job_of_one_arch_may_vouch_only_for_arch_tags() -> None:
    """One CI job saw one arch; `promote --arch-tags-only` leaves the arch-free tag to the merged verdict."""
    sm100_only = job("job-sm100", "runner-a", "2026-11-30T08:00:00+00:00", {"verified": gpu_passed(B200, "sm_100")})
    cell = passed_gate(sm100_only.cells[0])
    assert tags.good_tags(cell, promotion.arch_tags_only(TAGS)) == [
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm100"]
    assert "sglang-images:0.5.16-torch2.11.0-cu130-pip" in tags.good_tags(cell, TAGS)
