"""Tag policy: templates, content-addressed candidates, good tags only for GPU-verified cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts import matrix
from buildscripts.errors import ConfigError
from buildscripts.matrix import tagtemplates
from buildscripts.matrix.schema import Tags
from buildscripts.matrix.tagtemplates import AXIS_FIELDS, template_problems
from buildscripts.publish import tags, trusted
from buildscripts.results import Status, Verdict, tag_form
from tests.results_factory import finish, gated, gpu_passed, make_cell, passed_gate

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
    cell = passed_gate(make_cell("verified"))
    assert cell.why_not is None
    assert tags.good_tags(cell, CFG) == [
        "sglang-images:0.5.16-torch2.11.0-cu130-pip",
        "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm90",
    ]


@pytest.mark.parametrize("kind", ["cpu-checked", "expected-failure", "failed", "incompatible"])
def test_unverified_cells_earn_no_good_tag(kind: str) -> None:
    cell = gated(make_cell(kind))  # the incompatible cell has no image: the gate refuses it outright
    assert cell.why_not
    assert isinstance(cell, trusted.Refused) or tags.good_tags(cell, CFG) == []


def test_a_verdict_the_stages_do_not_give_earns_nothing() -> None:
    # even sealed: the gate judges the stages again, the recorded verdict counts for nothing
    cell = passed_gate(make_cell("cpu-checked").model_copy(update={"verdict": Verdict.VERIFIED}))
    assert tags.good_tags(cell, CFG) == []
    assert "cpu-checked" in (cell.why_not or "")


def test_gpu_of_another_arch_earns_nothing() -> None:
    verified = make_cell("verified")
    cell = finish(verified, stages=verified.stages[:6] + gpu_passed("NVIDIA A100", "sm_80"))
    assert cell.verdict is Verdict.CPU_CHECKED  # judge knows the targets from the cell's axes
    assert "not a target arch" in (cell.verdict_reason or "")
    checked = passed_gate(cell)
    assert checked.why_not
    assert tags.good_tags(checked, CFG) == []


def test_a_skipped_cpu_stage_withholds_the_good_tag() -> None:
    cell = make_cell("verified")
    cell.stages[3] = cell.stages[3].model_copy(update={"status": Status.SKIPPED, "reason": "no cuobjdump"})
    checked = passed_gate(finish(cell))
    assert tags.good_tags(checked, CFG) == []
    assert "arch-audit" in (checked.why_not or "")


def test_unknown_template_field_names_template_and_known_fields() -> None:
    with pytest.raises(ConfigError) as err:
        tagtemplates.check_templates(Tags.model_construct(candidate="{cell}-{sha}", good=("{sglang}",),
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
    assert tagtemplates.render("{archs}", {"archs": "sm_90a sm_100a"}) == "sm_90a-sm_100a"
    assert tag_form("sm_90") == "sm90" and tag_form("sm_120a") == "sm120"
