"""A record counts while its own cell's definition is unchanged (matrix/definition.py, gate.py), and only for its
cell's own image: editing another cell, lane or platform of matrix.yaml takes nothing away; editing the cell says
what changed; another image verified under a cell's name is never that cell's result."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from buildscripts import matrix, results
from buildscripts.gate import Mark, weigh
from buildscripts.matrix import definition
from buildscripts.publish import trusted
from buildscripts.report import markdown
from buildscripts.report.weigh import FOREIGN_SUFFIX, weigh_runs
from buildscripts.results import RunResults
from buildscripts.trust import keys, seal
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell, of_cell, sealed

ROOT = Path(__file__).resolve().parents[2]
PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
ARM = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"


def project(tmp_path: Path, edit: object = None) -> matrix.Matrix:
    """The project's matrix.yaml, edited by `edit(data)` when given, as a file of its own."""
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    if callable(edit):
        edit(data)
    path = tmp_path / f"matrix-{id(edit)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix.load(path)


def cell(loaded: matrix.Matrix, cell_id: str) -> matrix.Cell:
    return next(c for c in loaded.cells if c.id == cell_id)


def verified_record(loaded: matrix.Matrix, cell_id: str) -> results.CellResult:
    """A record of `cell_id` verified on an H200, sealed as a verifier of `loaded` seals it."""
    of = cell(loaded, cell_id)
    record = finish(of_cell(make_cell("verified"), of), stages=cpu_passed() + gpu_passed())
    return sealed(record, matrix_digest=loaded.digest, against=loaded)


def keyring() -> list[keys.PublicKey]:
    return [keys.signing_key(os.environ).public]


def add_release(data: dict[str, Any]) -> None:
    data["torch_lanes"].append({"torch": "2.15.0", "cuda": "cu130"})
    data["sglang"].append({"version": "0.5.30", "torch": "2.15.0"})


def drop_sm103_on_arm64(data: dict[str, Any]) -> None:
    data["platforms"]["linux/arm64"]["archs"].remove("sm_103a")


def test_adding_a_release_keeps_every_other_cells_record(tmp_path: Path) -> None:
    before = project(tmp_path)
    after = project(tmp_path, add_release)
    assert before.digest != after.digest
    for cell_id in (PIP, ARM):
        record = verified_record(before, cell_id)
        assert isinstance(trusted.check(record, 0, after, keyring()), trusted.Trusted), cell_id
        assert weigh(record, after, keyring()).vouches
    run = RunResults(run_id="r", started=results.now(), matrix_digest=before.digest,
                     cells=[verified_record(before, PIP)])
    shown = weigh_runs([run], after, keyring())
    assert shown.vouched(shown.run.cells[0])
    assert "✅ verified" in markdown.readme_block(shown)


def test_changing_one_cells_targets_makes_only_that_record_stale_and_says_what_changed(tmp_path: Path) -> None:
    before = project(tmp_path)
    after = project(tmp_path, drop_sm103_on_arm64)
    assert cell(before, PIP).definition_digest == cell(after, PIP).definition_digest
    assert isinstance(trusted.check(verified_record(before, PIP), 0, after, keyring()), trusted.Trusted)
    refused = trusted.check(verified_record(before, ARM), 0, after, keyring())
    assert isinstance(refused, trusted.Refused)
    assert "stale" in refused.reason and "targets lost sm_103a" in refused.reason
    marks = dict(weigh(verified_record(before, ARM), after, keyring()).marks)
    assert "targets lost sm_103a" in marks[Mark.STALE]


def test_changes_name_each_part() -> None:
    old = {"targets": ["sm_90a"], "tags": {"good": ["a"]}, "rules": 1, "expected": None}
    new = {"targets": ["sm_90a", "sm_103a"], "tags": {"good": ["b"]}, "rules": 2, "expected": {"stages": ["import"]}}
    said = definition.changes(old, new)
    assert said == ["targets gained sm_103a", "expected failure added", "tag templates changed (good)",
                    "judging rules 1 -> 2"]
    assert definition.changes(old, old) == []


def test_a_record_made_before_definitions_counts_only_under_the_matrix_it_sealed(tmp_path: Path) -> None:
    before = project(tmp_path)
    after = project(tmp_path, add_release)
    record = verified_record(before, PIP).model_copy(update={"definition": None, "definition_digest": None})
    legacy = seal.seal(record, keys.signing_key(os.environ))   # as a verifier sealed before definitions
    assert isinstance(trusted.check(legacy, 0, before, keyring()), trusted.Trusted)
    refused = trusted.check(legacy, 0, after, keyring())
    assert isinstance(refused, trusted.Refused)
    assert "before records named their cell's definition" in refused.reason
    assert "its targets and expected failure are today's" in refused.reason
    # the file's own digest is outside every seal: a file relabelled with today's digest changes nothing
    assert definition.stale(legacy, cell(after, PIP), after.digest, file_digest=after.digest)


def test_another_image_verified_under_a_cells_name_is_foreign(tmp_path: Path) -> None:
    loaded = project(tmp_path)
    good = verified_record(loaded, PIP)
    bare = good.model_copy(update={"seal": None, "image": good.image.model_copy(update={"labels": {}})})
    foreign = sealed(bare, matrix_digest=loaded.digest, against=loaded)
    refused = trusted.check(foreign, 0, loaded, keyring())
    assert isinstance(refused, trusted.Refused) and "foreign" in refused.reason
    assert "carries no cell label" in refused.reason
    arm_labels = {**good.image.labels, "io.sglang-images.platform": "linux/arm64"}
    other = sealed(bare.model_copy(update={"image": good.image.model_copy(update={"labels": arm_labels})}),
                   matrix_digest=loaded.digest, against=loaded)
    assert "platform linux/arm64" in str(getattr(trusted.check(other, 0, loaded, keyring()), "reason", ""))
    run = RunResults(run_id="r", started=results.now(), matrix_digest=loaded.digest, cells=[foreign])
    shown = weigh_runs([run], loaded, keyring())
    assert [c.cell_id for c in shown.run.cells] == [PIP + FOREIGN_SUFFIX]
    block = markdown.readme_block(shown)
    assert "✅ verified" not in block and "@foreign-image" not in block
    assert PIP + FOREIGN_SUFFIX in markdown.table(shown)


def test_tag_and_promote_take_a_file_of_the_matrix_before_a_release_was_added(tmp_path: Path) -> None:
    """What `tag` and `promote` check before their first tag or push (publish/recorded.py), for a file made
    before matrix.yaml gained a release: nothing refused, the cell's record still earns its tags."""
    from buildscripts.publish import recorded

    before, after = project(tmp_path), project(tmp_path, add_release)
    path = tmp_path / "runs" / "old" / "results.json"
    record = verified_record(before, PIP).model_copy(update={"image": verified_record(before, PIP).image.model_copy(
        update={"id": "sha256:" + "ab" * 32})})
    results.save(RunResults(run_id="old", started=results.now(), matrix_digest=before.digest,
                            cells=[sealed(record.model_copy(update={"seal": None}), matrix_digest=before.digest,
                                          against=before)]), path)
    runs = recorded.load_checked([path], after, keyring(), only=(), command="promote")
    earned = trusted.earned(runs.values(), after, keyring())
    assert [t.cell_id for t in earned] == [PIP] and earned[0].archs == ["sm90"]


def test_a_record_sealed_before_definitions_existed_still_verifies() -> None:
    """The sealed form leaves the fields the record gained later out while they are unset: the committed records
    of earlier machines keep their seals; once set, they are sealed like every other field."""
    legacy = next(c for c in results.load(ROOT / "evidence" / "h200-rerun-2026-12-02b" / "runs" / "u-good" /
                                          "results.json").cells)
    assert legacy.definition is None and legacy.seal is not None
    evidence_keys = [keys.read_public(p) for p in sorted((ROOT / "evidence" / "keys").glob("*.pub"))]
    seal.signer(legacy, evidence_keys)   # raises when the seal does not hold
    forged = legacy.model_copy(update={"definition": {"targets": ["sm_90a"]},
                                       "definition_digest": "sha256:" + "0" * 64})
    try:
        seal.signer(forged, evidence_keys)
    except Exception as exc:   # dsse.EnvelopeError
        assert "changed after it was sealed" in str(exc)
    else:
        raise AssertionError("a definition added to a sealed record kept its seal")


def test_what_changed_is_said_in_bounded_words_for_any_record() -> None:
    """A record's definition is input: a long list or a long value makes a short message, in time linear in it."""
    old = {"targets": [f"sm_{n}" for n in range(100_000)], "tags": {"good": "x" * 10_000}, "rules": "r" * 500}
    said = definition.changes(old, {"targets": ["sm_90a"], "tags": {"good": []}, "rules": 1})
    assert said[0].startswith("targets gained sm_90a and lost sm_0, sm_1") and "and 99992 more" in said[0]
    assert all(len(s) < 1000 for s in said)
