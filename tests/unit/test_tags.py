"""Tag policy: templates, content-addressed candidates, good tags only for GPU-verified cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts import matrix
from buildscripts.errors import ConfigError
from buildscripts.matrix.schema import Tags
from buildscripts.matrix.tagtemplates import AXIS_FIELDS, template_problems
from buildscripts.publish import tags
from buildscripts.results import Status, Verdict, tag_form
from tests.results_factory import finish, gpu_passed, make_cell

ROOT = Path(__file__).resolve().parents[2]
CFG = Tags()


def test_axis_fields_match_the_cells_axes() -> None:
    cell = matrix.load(ROOT / "matrix.yaml").cells[0]
    assert tuple(cell.axes()) == AXIS_FIELDS


def test_candidate_tag_is_content_addressed() -> None:
    cell = matrix.load(ROOT / "matrix.yaml").buildable()[0]
    first = tags.candidate_tag(cell, "0123456789ab", CFG)
    assert first == f"sglang-images:{cell.id}-0123456789ab"
    assert tags.candidate_tag(cell, "ba9876543210", CFG) != first


def test_verified_cell_earns_plain_and_arch_tags() -> None:
    cell = make_cell("verified")
    assert tags.not_good_because(cell) is None
    assert tags.good_tags(cell, CFG) == [
        "sglang-images:0.5.16-torch2.11.0-cu130-pip",
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm90",
    ]


@pytest.mark.parametrize("kind", ["cpu-checked", "expected-failure", "failed", "incompatible"])
def test_unverified_cells_earn_no_good_tag(kind: str) -> None:
    cell = make_cell(kind)
    assert tags.good_tags(cell, CFG) == []
    assert tags.not_good_because(cell)


def test_a_hand_edited_verdict_earns_nothing() -> None:
    cell = make_cell("cpu-checked").model_copy(update={"verdict": Verdict.VERIFIED})  # judge decides
    assert tags.good_tags(cell, CFG) == []
    assert "cpu-checked" in (tags.not_good_because(cell) or "")


def test_gpu_of_another_arch_earns_nothing() -> None:
    verified = make_cell("verified")
    cell = finish(verified, stages=verified.stages[:6] + gpu_passed("NVIDIA A100", "sm_80"))
    assert cell.verdict is Verdict.CPU_CHECKED  # judge knows the targets from the cell's axes
    assert "not a target arch" in (cell.verdict_reason or "")
    assert tags.not_good_because(cell)
    assert tags.good_tags(cell, CFG) == []


def test_a_skipped_cpu_stage_withholds_the_good_tag() -> None:
    cell = make_cell("verified")
    cell.stages[3] = cell.stages[3].model_copy(update={"status": Status.SKIPPED, "reason": "no cuobjdump"})
    finish(cell)
    assert tags.good_tags(cell, CFG) == []
    assert "arch-audit" in (tags.not_good_because(cell) or "")


def test_unknown_template_field_names_template_and_known_fields() -> None:
    with pytest.raises(ConfigError) as err:
        tags.check_templates(Tags.model_construct(candidate="{cell}-{sha}", good=("{sglang}",),
                                                  repository="sglang-images"))
    assert "'{cell}-{sha}'" in str(err.value) and "'sha'" in str(err.value)
    assert "known fields: cell, base" in str(err.value)


def test_arch_is_not_a_candidate_field_and_inputs_not_a_good_field() -> None:
    problems = template_problems("{cell}-{arch}", ["{sglang}-{inputs}"], "sglang-images")
    assert len(problems) == 2


def test_matrix_load_rejects_unknown_tag_fields() -> None:
    text = (ROOT / "matrix.yaml").read_text().replace("-verified-{arch}", "-verified-{gpu}")
    with pytest.raises(ConfigError) as err:
        matrix.parse(text, Path("matrix.yaml"))
    assert "unknown field(s) 'gpu'" in str(err.value) and "tags.good[1]" in str(err.value)


def test_invalid_repository_is_rejected() -> None:
    assert template_problems("{cell}", [], "Sglang Images")


def test_rendered_tags_are_valid_docker_tags() -> None:
    assert tags.render("{archs}", {"archs": "sm_90a sm_100a"}) == "sm_90a-sm_100a"
    assert tag_form("sm_90") == "sm90" and tag_form("sm_120a") == "sm120"


def test_good_labels_name_the_cell_gpus_archs_and_locks() -> None:
    cell = make_cell("verified")
    labels = tags.good_labels(cell)
    assert labels["io.sglang-images.cell"] == cell.cell_id
    assert labels["io.sglang-images.verified.gpus"] == "NVIDIA H200"
    assert labels["io.sglang-images.verified.archs"] == "sm90"
    assert labels["io.sglang-images.tested-image"] == cell.image.id
    assert labels["io.sglang-images.lock.torch2.11.0-cu130-bookworm"].startswith("sha256:")
    assert labels["io.sglang-images.results.digest"] == tags.results_digest(cell)
    assert "org.opencontainers.image.created" in labels


def test_results_digest_ignores_what_tagging_adds_but_not_stage_results() -> None:
    cell = make_cell("verified")
    before = tags.results_digest(cell)
    tagged = cell.model_copy(update={"tags": ["sglang-images:x"], "promoted": {"r/x:y": "sha256:00"}})
    assert tags.results_digest(tagged) == before
    slower = cell.stages[0].model_copy(update={"duration_s": cell.stages[0].duration_s + 1})
    assert tags.results_digest(cell.model_copy(update={"stages": [slower, *cell.stages[1:]]})) != before
