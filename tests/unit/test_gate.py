"""The gate (publish/trusted.py): only a sealed record of a matrix cell, with a full image id, judged again
with the matrix's facts, earns good tags; each forgery is refused with the reason."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from buildscripts import matrix, pipeline, results
from buildscripts.errors import ResultsError
from buildscripts.publish import tags, trusted
from buildscripts.results import CellResult, RunResults, Status
from buildscripts.trust import keys
from buildscripts.trust.keys import SigningKey
from tests.results_factory import cpu_passed, gpu_passed, make_cell, sealed

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = matrix.load(ROOT / "matrix.yaml")
CFG = DEFAULT.spec.tags
KEYS = [keys.signing_key(os.environ).public]
GOOD = ["sglang-images:0.5.16-torch2.11.0-cu130-pip", "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm90"]


def gate(cell: CellResult) -> trusted.Trusted | trusted.Refused:
    return trusted.check(cell, 0, DEFAULT, KEYS)


def refused(cell: CellResult) -> str:
    found = gate(cell)
    assert isinstance(found, trusted.Refused), found
    return found.reason


def test_a_sealed_verified_record_of_a_matrix_cell_earns_its_tags() -> None:
    found = gate(sealed(make_cell("verified")))
    assert isinstance(found, trusted.Trusted) and found.why_not is None
    assert found.archs == ["sm90"] and found.gpus == ["NVIDIA H200"] and found.every_arch
    assert tags.good_tags(found, CFG) == GOOD


def test_a_hand_written_record_is_refused() -> None:
    assert "not sealed by a verifier" in refused(make_cell("verified"))


def test_a_record_edited_after_sealing_is_refused() -> None:
    cell = sealed(make_cell("cpu-checked"))
    flipped = [s.model_copy(update={"status": Status.PASSED, "gpu": "NVIDIA H200", "arch": "sm_90"})
               if s.name in results.GPU_STAGES else s for s in cell.stages]
    assert "changed after it was sealed (changed: stages)" in refused(cell.model_copy(update={"stages": flipped}))


def test_a_record_sealed_by_another_key_is_refused() -> None:
    other = SigningKey("elsewhere", keys.generate())
    assert "no valid signature by a trusted key" in refused(sealed(make_cell("verified"), other))
    assert isinstance(trusted.check(sealed(make_cell("verified"), other), 0, DEFAULT, [other.public]), trusted.Trusted)


def test_no_targets_and_a_made_up_arch_earn_nothing() -> None:
    cell = make_cell("verified")
    cell = sealed(results.judged(cell.model_copy(update={"targets": [], "stages": cpu_passed()
                                                          + gpu_passed("NVIDIA H200", "bogus")})))
    assert cell.verified_archs == ["bogus"]  # what the record claims, judged with no targets
    found = gate(cell)
    assert isinstance(found, trusted.Trusted)
    assert found.judged.targets == ["sm_90a", "sm_100a", "sm_120a"]  # the matrix's
    assert "bogus, which is not a target arch" in (found.why_not or "")
    assert tags.good_tags(found, CFG) == []


def test_an_unknown_cell_id_is_refused_by_name() -> None:
    cell = make_cell("verified")
    cell = sealed(cell.model_copy(update={"cell_id": "sglang9.9.9-made-up", "axes": {**cell.axes,
                                                                                    "cell": "sglang9.9.9-made-up"}}))
    assert "'sglang9.9.9-made-up' is no cell of" in refused(cell)


def test_another_cells_axes_are_refused() -> None:
    cell = make_cell("verified")
    other = make_cell("verified", sglang="0.5.23")
    reason = refused(sealed(cell.model_copy(update={"axes": other.axes})))
    assert "axes are not those of the cell" in reason and "sglang" in reason


def test_a_short_or_host_image_id_is_refused() -> None:
    short = sealed(make_cell("verified", "sha256:" + "ab" * 6))
    assert "'sha256:abababababab' is not a full image id" in refused(short)
    assert "not a full image id" in refused(sealed(make_cell("verified", "ABABABABABAB")))
    cell = make_cell("verified")
    host = cell.model_copy(update={"image": cell.image.model_copy(update={"id": "host:/usr/bin/python3"})})
    assert "a host or LXC run has no image" in refused(sealed(host))


def test_a_record_that_earns_nothing_needs_no_image_and_is_not_refused() -> None:
    found = gate(sealed(make_cell("incompatible")))  # excluded: never built, no image id
    assert isinstance(found, trusted.Trusted) and "verdict incompatible" in (found.why_not or "")


def test_refused_records_are_an_error_naming_each_before_anything_is_tagged(tmp_path: Path) -> None:
    checked = [gate(make_cell("verified")), gate(sealed(make_cell("verified")))]
    with pytest.raises(ResultsError) as err:
        trusted.refuse(checked, tmp_path / "results.json")
    assert "1 record(s) of" in err.value.message and "not sealed by a verifier" in err.value.message
    trusted.refuse(checked[1:], tmp_path / "results.json")


def test_gpu_stages_without_a_gpu_name_do_not_count() -> None:
    cell = make_cell("verified")
    no_gpu = [s.model_copy(update={"gpu": None, "where": "container (cpu)"}) if s.name in results.GPU_STAGES else s
              for s in cell.stages]
    cell = sealed(results.judged(cell.model_copy(update={"stages": no_gpu})))
    assert cell.verified_archs == ["sm_90"]  # the record's own judgement would count them
    found = gate(cell)
    assert isinstance(found, trusted.Trusted)
    assert found.why_not and "cpu-checked" in found.why_not
    assert tags.good_tags(found, CFG) == []


def test_tags_come_from_the_matrix_cell_and_are_judged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    found = gate(sealed(make_cell("verified")))
    assert isinstance(found, trusted.Trusted)
    calls: list[str] = []
    monkeypatch.setattr(results, "judged", lambda cell: calls.append(cell.cell_id))
    assert tags.good_tags(found, CFG) == GOOD and calls == []


def test_sift_keeps_the_file_order_and_the_selection() -> None:
    run = RunResults(run_id="r", started="t", cells=[make_cell("verified"), sealed(make_cell("verified"))])
    first, second = trusted.sift(run, DEFAULT, KEYS)
    assert isinstance(first, trusted.Refused) and first.position == 0
    assert isinstance(second, trusted.Trusted) and second.position == 1
    assert trusted.sift(run, DEFAULT, KEYS, ["nothing-*"]) == []
    assert [c.cell_id for c in trusted.earned([run], DEFAULT, KEYS)] == [second.cell_id]


class FakeEngine:
    """What the tag step asks of the engine: the tested image by id, then one tag per good tag."""

    def __init__(self) -> None:
        self.tagged: list[tuple[str, str, str]] = []
        self.images = self
        self.api = self

    def get(self, image_id: str) -> object:
        return image_id

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tagged.append((image_id, repository, tag))


@pytest.mark.parametrize("forged", [False, True])
def test_the_builds_tag_step_tags_its_own_sealed_record_through_the_gate(forged: bool, tmp_path: Path) -> None:
    engine = FakeEngine()
    ctx = cast("pipeline.Context", SimpleNamespace(client=engine, trusted=KEYS))
    record = sealed(make_cell("verified"))
    if forged:  # what the run just sealed, changed before the tag step: nothing is tagged
        record = record.model_copy(update={"targets": []})
    run = RunResults(run_id="r", started="t", cells=[record])
    pipeline.tag_cell(run, DEFAULT, ctx, tmp_path / "results.json")
    if forged:
        assert engine.tagged == [] and run.cells[0].tags == []
    else:
        assert engine.tagged == [(record.image.id, *ref.rsplit(":", 1)) for ref in GOOD]
        assert run.cells[0].tags == GOOD and results.load(tmp_path / "results.json").cells[0].tags == GOOD
