"""Results reuse: the key changes with every input a verification depends on, and only a settled record
of the same cell made with the same key is reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildscripts.matrix.schema import Profile
from buildscripts.results import RunResults, save
from buildscripts.trust import keys
from buildscripts.trust.keys import SigningKey
from buildscripts.verify import reuse
from buildscripts.verify.gpus import Discovery, Gpu
from buildscripts.verify.plan import Plan
from tests.results_factory import finish, make_cell, make_run, sealed

H200 = Gpu(0, "NVIDIA H200", "GPU-1", "9.0", "580.159.04", 143771)
B200 = Gpu(0, "NVIDIA B200", "GPU-2", "10.0", "580.159.04", 183359)
IMAGE = "sha256:" + "ab" * 32


def plan(**changes: object) -> Plan:
    base = {"archs": ("sm_90a", "sm_100a"), "lane_cuda": "13.0", "stages": None, "profile": None}
    return Plan.make(**{**base, **changes})  # type: ignore[arg-type]


def key(image: str = IMAGE, p: Plan | None = None, discovery: Discovery | None = None, **kw: object) -> str:
    return reuse.key(image, p or plan(), discovery or Discovery(problem="nvidia-smi not found"), **kw)  # type: ignore[arg-type]


def test_the_key_is_stable_for_the_same_inputs() -> None:
    assert key() == key()


@pytest.mark.parametrize("changed", [
    pytest.param(lambda: key(image="sha256:" + "cd" * 32), id="image id"),
    pytest.param(lambda: key(p=plan(stages=["facts", "import"])), id="stage list"),
    pytest.param(lambda: key(p=plan(archs=("sm_120a",))), id="target archs"),
    pytest.param(lambda: key(p=plan(lane_cuda="12.8")), id="lane"),
    pytest.param(lambda: key(p=plan(profile=Profile(args=["--attention-backend", "flashinfer"]))), id="profile"),
    pytest.param(lambda: key(p=plan(stage_timeout=1800)), id="stage timeout"),
    pytest.param(lambda: key(p=plan(profile=Profile(model="hybrid"))), id="the tiny model served"),
    pytest.param(lambda: key(p=plan(profile_name="piecewise")), id="profile name (baked caches are per profile)"),
    pytest.param(lambda: key(discovery=Discovery(gpus=(H200,), runtime="cdi")), id="a GPU appeared"),
    pytest.param(lambda: key(discovery=Discovery(problem="nvidia-smi failed: driver mismatch")), id="no-GPU reason"),
])
def test_every_input_changes_the_key(changed: object) -> None:
    assert callable(changed)
    assert changed() != key()


def test_another_gpu_model_arch_or_driver_changes_the_key() -> None:
    on_h200 = key(discovery=Discovery(gpus=(H200,), runtime="cdi"))
    assert key(discovery=Discovery(gpus=(B200,), runtime="cdi")) != on_h200
    newer = Gpu(0, "NVIDIA H200", "GPU-1", "9.0", "590.10", 143771)
    assert key(discovery=Discovery(gpus=(newer,), runtime="cdi")) != on_h200
    assert key(discovery=Discovery(gpus=(H200,), runtime="cdi"), per_gpu=True) != on_h200
    # ...but not the GPU's serial number: a runner with the same model is the same GPU for this purpose
    twin = Gpu(0, "NVIDIA H200", "GPU-other", "9.0", "580.159.04", 143771)
    assert key(discovery=Discovery(gpus=(twin,), runtime="cdi")) == on_h200


def test_a_changed_probe_file_changes_the_key(tmp_path: Path) -> None:
    (tmp_path / "core.py").write_text("print('a')\n")
    before = reuse.probe_digest(tmp_path)
    (tmp_path / "core.py").write_text("print('b')\n")
    reuse.probe_digest.cache_clear()
    assert reuse.probe_digest(tmp_path) != before


KEYS = [keys.signing_key(os.environ).public]


def keyed(run: RunResults, cell_key: str) -> RunResults:
    """`run` with each cell made with `cell_key`, sealed as the verifier that made it seals it."""
    run.cells = [sealed(c.model_copy(update={"verification_key": cell_key})) for c in run.cells]
    return run


def test_the_newest_settled_record_with_the_same_key_is_found() -> None:
    old = keyed(make_run("old", kinds=("cpu-checked",)), "k1")
    new = keyed(make_run("new", kinds=("cpu-checked",)), "k1")
    cell_id = old.cells[0].cell_id
    found = reuse.find([new, old], cell_id, "k1", KEYS)
    assert found is not None and found.run.run_id == "new"
    assert found.origin().startswith("run new of ")
    assert all(s.run_id == "new" and s.runner == "ci-runner-1" for s in found.stages())
    assert reuse.find([new, old], cell_id, "k2", KEYS) is None
    assert reuse.find([new, old], "another-cell", "k1", KEYS) is None


@pytest.mark.parametrize(("kind", "reused"), [("verified", True), ("cpu-checked", True), ("expected-failure", True),
                                              ("failed", False)])
def test_only_settled_outcomes_are_reused(kind: str, reused: bool) -> None:
    run = keyed(make_run(kinds=(kind,)), "k")
    assert (reuse.find([run], run.cells[0].cell_id, "k", KEYS) is not None) is reused


def test_an_unexpected_pass_is_verified_again() -> None:
    run = make_run(kinds=("expected-failure",))
    passing = sealed(finish(make_cell("cpu-checked"), expected=run.cells[0].expected, verification_key="k"))
    run.cells = [passing]
    assert passing.verdict.value == "unexpected-pass"
    assert reuse.find([run], passing.cell_id, "k", KEYS) is None


@pytest.mark.parametrize("forgery", ["unsealed", "edited", "another key"])
def test_a_record_with_the_right_key_but_no_valid_seal_is_not_reused(forgery: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Anyone can compute a cell's verification key: a record carrying it proves nothing without the seal."""
    genuine = keyed(make_run("old", kinds=("cpu-checked",)), "k")
    forged = make_run("new", kinds=("verified",))
    cell = forged.cells[0].model_copy(update={"verification_key": "k", "cell_id": genuine.cells[0].cell_id})
    if forgery == "edited":
        cell = sealed(genuine.cells[0]).model_copy(update={"stages": cell.stages})
    elif forgery == "another key":
        cell = sealed(cell, SigningKey("elsewhere", keys.generate()))
    forged.cells = [cell]
    found = reuse.find([forged, genuine], cell.cell_id, "k", KEYS)
    assert found is not None and found.run.run_id == "old"  # the sealed older record, not the forged newer one
    assert reuse.find([forged], cell.cell_id, "k", KEYS) is None
    said = capsys.readouterr().err
    assert "(saved in run new): not reused" in said
    assert {"unsealed": "not sealed by a verifier", "edited": "changed after it was sealed",
            "another key": "no valid signature by a trusted key"}[forgery] in said


def test_saved_runs_are_read_newest_first_and_broken_files_are_passed_over(tmp_path: Path) -> None:
    for name in ("a", "b"):
        save(make_run(name), tmp_path / name / "results.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_bytes(b"\xff\xfe not json")
    os.utime(tmp_path / "a" / "results.json", (1, 1))
    found = reuse.saved_runs(tmp_path, skip="this-run")
    assert [r.run_id for r in found] == ["b", "a"]
    assert [r.run_id for r in reuse.saved_runs(tmp_path, skip="b")] == ["a"]
