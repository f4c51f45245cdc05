"""Locking cells end to end with a recorded resolver: states, reasons, reuse, staleness, index.json.

The resolver answers with pins recorded from real `uv pip compile` runs (tests/unit/data); the
integration tests (tests/integration/test_lock_pypi.py) run the same paths against PyPI.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from buildscripts import lock
from buildscripts import matrix as matrix_mod
from buildscripts.errors import LockError
from buildscripts.lock import layers as layerlock
from buildscripts.lock import locking
from buildscripts.lock.resolver import Resolution, Target
from buildscripts.workspace import Workspace
from tests.lock_matrix import TK130, matrix_text, pip_toolkit

DATA = Path(__file__).parent / "data"
def recorded(name: str) -> str:
    return (DATA / f"pins-{name}.txt").read_text()


LANE = recorded("lanes-torch2.11.0-cu130-bookworm")
SGLANG = recorded("sglang-sglang0.5.16-torch2.11.0-cu130-bookworm")
TOOLKIT = recorded("toolkits-sglang0.5.16-torch2.11.0-cu130-pip-bookworm")
UNCONSTRAINED = recorded("sglang-unconstrained-sglang0.5.16-torch2.11.0-cu130-bookworm")
Answer = str | Resolution | Callable[[Sequence[str]], "str | Resolution"]  # a callable sees the constraints


class RecordedUv:
    def __init__(self, answers: dict[tuple[str, ...], Answer]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def __call__(self, requirements: Sequence[str], target: Target, *, constraints: Sequence[str] = (),
                 prefer: Path | None = None, env: object = None, log: object = None) -> Resolution:
        assert target == Target("3.11", "x86_64-manylinux_2_36")
        self.calls.append((tuple(requirements), tuple(constraints)))
        answer = self.answers[tuple(requirements)]
        if callable(answer):
            answer = answer(constraints)
        return answer if isinstance(answer, Resolution) else Resolution(True, answer, "", 0.1)


Setup = Callable[..., tuple[matrix_mod.Matrix, RecordedUv]]


def failed(error: str) -> Resolution:
    return Resolution(False, "", error, 0.1)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.setattr(locking, "uv_version", lambda: "0.13.9")

    def make(lanes: str, sglang: str, answers: dict[tuple[str, ...], Answer], tk: str = TK130) -> tuple[
            matrix_mod.Matrix, RecordedUv]:
        path = tmp_path / "matrix.yaml"
        path.write_text(matrix_text(lanes, sglang, pip_toolkit(cu130=tk)))
        uv = RecordedUv(answers)
        monkeypatch.setattr(layerlock, "compile_requirements", uv)
        return matrix_mod.load(path, {}), uv
    return make


HAPPY: dict[tuple[str, ...], Answer] = {
    ("torch==2.11.0", "sglang==0.5.16"): SGLANG, ("torch==2.11.0",): LANE, (TK130,): TOOLKIT,
}


def run(matrix: matrix_mod.Matrix, root: Path, **kw: bool) -> dict[str, lock.LockStatus]:
    return lock.lock_cells(matrix, list(matrix.buildable()), Workspace.at(root), env={}, **kw)


def test_happy_cells_share_one_lane_and_record_versions(setup: Setup, tmp_path: Path) -> None:
    matrix, uv = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}", HAPPY)
    results = run(matrix, tmp_path)
    assert {s.state for s in results.values()} == {"ok"}
    none_cell, pip_cell = matrix.buildable()
    assert results[pip_cell.id].versions["nvcc"] == "13.0.88"
    # The SGLang layer's compiler wheels are held on the lane's CUDA, so the none cell has 13.0 too.
    assert results[none_cell.id].versions["nvcc"] == "13.0.88"
    sglang_constraints = next(c for r, c in uv.calls if r == ("torch==2.11.0", "sglang==0.5.16") and c)
    assert "nvidia-cuda-nvcc==13.0.*" in sglang_constraints and "nvidia-nvvm==13.0.*" in sglang_constraints
    # The toolkit is resolved with the SGLang layer as constraints, its compiler included (already on
    # the lane's CUDA), but not the toolkit's own metapackage.
    toolkit_constraints = next(c for r, c in uv.calls if r == (TK130,))
    assert "humming-kernels==0.1.10" in toolkit_constraints
    assert "nvidia-cuda-nvcc==13.0.88" in toolkit_constraints
    assert not [c for c in toolkit_constraints if c.startswith("cuda-toolkit==")]
    # The lane lock was shaped by a joint resolve with the lane's SGLang, and constrained by it.
    assert uv.calls[0] == (("torch==2.11.0", "sglang==0.5.16"), ())
    assert uv.calls[1][0] == ("torch==2.11.0",) and "cuda-bindings==13.4.4" in uv.calls[1][1]
    paths = lock.paths_for(pip_cell, tmp_path / "lockfiles")
    assert paths.lane == tmp_path / "lockfiles/lanes/torch2.11.0-cu130-bookworm.txt"
    assert paths.toolkit == tmp_path / f"lockfiles/toolkits/{pip_cell.id}.txt"
    assert lock.paths_for(none_cell, tmp_path / "lockfiles").toolkit is None
    assert "# shaped-by: sglang==0.5.16" in paths.lane.read_text()
    for cell in matrix.buildable():
        assert lock.status_of(matrix, cell, tmp_path / "lockfiles").state == "ok"

    before = {p: p.read_bytes() for p in (tmp_path / "lockfiles").rglob("*.*")}
    uv.calls.clear()
    run(matrix, tmp_path)
    assert uv.calls == []  # unchanged inputs: nothing re-resolved ...
    assert {p: p.read_bytes() for p in (tmp_path / "lockfiles").rglob("*.*")} == before  # ... same bytes
    run(matrix, tmp_path, upgrade=True)
    assert len(uv.calls) == 4
    assert {p: p.read_bytes() for p in (tmp_path / "lockfiles").rglob("*.*")} == before


def test_stale_edited_missing_and_foreign_locks(setup: Setup,
                                                tmp_path: Path) -> None:
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}", HAPPY)
    run(matrix, tmp_path)
    cell = matrix.buildable()[1]
    paths = lock.paths_for(cell, tmp_path / "lockfiles")

    other = matrix_mod.parse(matrix.path.read_text().replace("nvrtc]==13.0.2", "nvrtc]==13.0.1"), matrix.path)
    stale = lock.status_of(other, other.buildable()[1], tmp_path / "lockfiles")
    assert stale.state == "stale"
    assert "another matrix.yaml" in (stale.reason or "") and "toolkit-requirements" in (stale.reason or "")
    untouched = other.buildable()[0]  # the none cell
    assert lock.status_of(other, untouched, tmp_path / "lockfiles").state == "ok"

    text = paths.sglang.read_text()
    paths.sglang.write_text(text.replace("sglang==0.5.16", "sglang==0.5.17"))
    edited = lock.status_of(matrix, cell, tmp_path / "lockfiles")
    shown = paths.sglang.relative_to(tmp_path)
    assert edited.state == "stale"
    assert edited.reason == f"{shown} was edited by hand (content-sha256 does not match)"
    paths.sglang.write_text(text)
    paths.toolkit.unlink()  # type: ignore[union-attr]
    assert lock.status_of(matrix, cell, tmp_path / "lockfiles").state == "missing"

    with pytest.raises(LockError, match="1 of 2 cell"):
        lock.check(matrix, list(matrix.buildable()), Workspace.at(tmp_path))


def test_cu128_declared_for_torch_211_is_incompatible(setup: Setup, tmp_path: Path) -> None:
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu128}", "  - {version: 0.5.16, torch: 2.11.0}", HAPPY,
                      tk="x==1")
    results = run(matrix, tmp_path)
    for cell in matrix.buildable():
        status = lock.status_of(matrix, cell, tmp_path / "lockfiles")
        assert status.state == "incompatible"
        assert results[cell.id] == status
        assert "torch 2.11.0 comes with the CUDA 13.0 runtime" in (status.reason or "")
        assert "declares cu128 (CUDA 12.8)" in (status.reason or "")
        assert status.versions["cuda"] == "cu130"
    assert not (tmp_path / "lockfiles/lanes").exists()  # nothing to build from
    lock.check(matrix, list(matrix.buildable()), Workspace.at(tmp_path))  # incompatible is a result, not a stale lock


def test_sglang_own_torch_pin_contradicting_the_lane(setup: Setup, tmp_path: Path) -> None:
    conflict = failed("error: No solution found when resolving dependencies cause: Because sglang==0.5.10 "
                      "depends on torch==2.9.1 and you require torch==2.11.0, ...")
    answers: dict[tuple[str, ...], Answer] = {
        ("torch==2.11.0", "sglang==0.5.10"): conflict, ("torch==2.11.0",): LANE,
        ("sglang==0.5.10",): "sglang==0.5.10\ntorch==2.9.1\n",
    }
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.10, torch: 2.11.0}", answers)
    status = run(matrix, tmp_path)[matrix.buildable()[0].id]
    assert status.state == "incompatible"
    assert "sglang 0.5.10 pins torch 2.9.1" in (status.reason or "")
    assert "lane torch2.11.0-cu130 has torch 2.11.0" in (status.reason or "")
    assert "# shaped-by: (none" in lock.paths_for(matrix.buildable()[0], tmp_path / "lockfiles").lane.read_text()


def test_unreachable_index_and_unknown_version_do_not_stop_other_lanes(setup: Setup, tmp_path: Path) -> None:
    down = failed("error: Request failed after 3 retries cause: Failed to fetch: "
                  "https://mirror.invalid/simple/torch/")
    unknown_version = failed("error: No solution found: there is no version of sglang==9.9.9")
    answers: dict[tuple[str, ...], Answer] = {
        **HAPPY, ("torch==2.9.1", "sglang==0.5.10"): down,
        ("torch==2.11.0", "sglang==9.9.9"): unknown_version, ("sglang==9.9.9",): unknown_version,
    }
    lanes = ("  - {torch: 2.9.1, cuda: cu128, index: 'https://mirror.invalid/simple'}\n"
             "  - {torch: 2.11.0, cuda: cu130}")
    sglang = ("  - {version: 0.5.10, torch: 2.9.1}\n  - {version: 0.5.16, torch: 2.11.0}\n"
              "  - {version: 9.9.9, torch: 2.11.0}")
    matrix, _ = setup(lanes, sglang, answers)
    results = run(matrix, tmp_path)
    states = {cid.split("-bookworm")[0]: s for cid, s in results.items()}
    unreachable = states["sglang0.5.10-torch2.9.1-cu128-none"]
    assert unreachable.state == "unresolvable"
    assert "the lane's index https://mirror.invalid/simple cannot be reached" in (unreachable.reason or "")
    unknown = states["sglang9.9.9-torch2.11.0-cu130-none"]
    assert unknown.state == "unresolvable" and "no version of sglang==9.9.9" in (unknown.reason or "")
    assert states["sglang0.5.16-torch2.11.0-cu130-pip"].state == "ok"
    index = json.loads((tmp_path / "lockfiles/index.json").read_text())
    assert index["cells"][unreachable_id(results)]["state"] == "unresolvable"


def unreachable_id(results: dict[str, lock.LockStatus]) -> str:
    return next(cid for cid in results if cid.startswith("sglang0.5.10"))


def test_toolkit_skew_is_refused_naming_packages(setup: Setup, tmp_path: Path) -> None:
    skewed = TOOLKIT.replace("nvidia-cuda-crt==13.0.88", "nvidia-cuda-crt==13.5.37")
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}",
                      {**HAPPY, (TK130,): skewed})
    results = run(matrix, tmp_path)
    none_cell, pip_cell = matrix.buildable()
    assert results[none_cell.id].state == "ok"
    assert results[pip_cell.id].state == "incompatible"
    assert results[pip_cell.id].reason == (
        "toolkit components are not on the lane's CUDA 13.0 (cu130): nvidia-cuda-crt 13.5.37"
    )
    assert lock.paths_for(pip_cell, tmp_path / "lockfiles").toolkit is not None
    assert not lock.paths_for(pip_cell, tmp_path / "lockfiles").toolkit.is_file()  # type: ignore[union-attr]


def test_an_sglang_layer_whose_compiler_left_the_lanes_cuda_is_incompatible(setup: Setup, tmp_path: Path) -> None:
    """Were the resolver to ignore the compiler constraints, the lock says so instead of writing it."""
    answers = {**HAPPY, ("torch==2.11.0", "sglang==0.5.16"): UNCONSTRAINED}
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}", answers)
    results = run(matrix, tmp_path)
    assert {s.state for s in results.values()} == {"incompatible"}
    reason = next(iter(results.values())).reason or ""
    assert "not on the lane's CUDA 13.0 (cu130): nvidia-cuda-cccl 13.3.5.0.6" in reason


def test_an_sglang_that_needs_a_compiler_off_the_lanes_cuda_is_told_apart(setup: Setup, tmp_path: Path) -> None:
    """Resolvable only with nvcc 13.5: the reason names the compiler hold, not the torch layer."""
    def sglang(constraints: Sequence[str]) -> str | Resolution:
        held = "nvidia-cuda-nvcc==13.0.*" in constraints
        return failed("No solution found: humming-kernels needs nvidia-cuda-nvcc>=13.5") if held else UNCONSTRAINED
    answers = {**HAPPY, ("torch==2.11.0", "sglang==0.5.16"): sglang}
    matrix, _ = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}", answers)
    results = run(matrix, tmp_path)
    reason = next(iter(results.values())).reason or ""
    assert {s.state for s in results.values()} == {"incompatible"}
    assert reason.startswith("sglang 0.5.16 needs CUDA compiler wheels off the lane's CUDA 13.0 (nvidia-cuda-cccl")
    assert "drift.compiler_constraints" in reason and "nvidia-cuda-nvcc>=13.5" in reason


def test_a_toolkit_recipe_on_another_patch_owns_its_components(setup: Setup, tmp_path: Path) -> None:
    """The recipe wants another 13.0 patch of nvcc than the SGLang layer has: kept as constraints it cannot
    resolve, so the toolkit lock resolves again owning its components, and stays on the lane's CUDA."""
    newer = SGLANG.replace("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-nvcc==13.0.99")

    def toolkit(constraints: Sequence[str]) -> str | Resolution:
        return failed("No solution found: nvcc 13.0.88 vs 13.0.99") if "nvidia-cuda-nvcc==13.0.99" in constraints \
            else TOOLKIT
    answers = {("torch==2.11.0", "sglang==0.5.16"): newer, ("torch==2.11.0",): LANE, (TK130,): toolkit}
    matrix, uv = setup("  - {torch: 2.11.0, cuda: cu130}", "  - {version: 0.5.16, torch: 2.11.0}", answers)
    results = run(matrix, tmp_path)
    assert {s.state for s in results.values()} == {"ok"}
    _, pip_cell = matrix.buildable()
    assert results[pip_cell.id].versions["nvcc"] == "13.0.88"
    tries = [c for r, c in uv.calls if r == (TK130,)]
    assert len(tries) == 2 and "nvidia-cuda-nvcc==13.0.99" in tries[0]
    assert not [c for c in tries[1] if c.startswith(("nvidia-cuda-nvcc==", "nvidia-nvvm=="))]
