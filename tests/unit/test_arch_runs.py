"""The arch audit by what a GPU runs, not by the arch's name in the file: sm_121 (GB10) runs sm_120 SASS, sm_103
(B300) runs sm_100 SASS, neither runs the other's arch-specific `a` code, and PTX is JIT-compiled at start.
Every case parses a real (synthetic) ELF file with a `.nv_fatbin` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, fatbin, gpuruns
from buildscripts.report import common, html
from buildscripts.results import RunResults, notes
from tests.results_factory import make_cell, vouched
from tests.unit.test_also_audited import audited_alone
from tests.unit.test_fatbin import ARCH_SPECIFIC, FAMILY, elf_with_sections, entry, fatbin_blob

SASS, PTX = 2, 1


def library(tmp_path: Path, *entries: bytes) -> Path:
    path = tmp_path / "libops.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 8, ".nv_fatbin": fatbin_blob(*entries)}))
    return path


def runs(tmp_path: Path, target: str, *entries: bytes) -> gpuruns.Runs:
    return gpuruns.what_runs(fatbin.read_file(str(library(tmp_path, *entries))), target)


def test_gb10_runs_plain_sm_120_sass(tmp_path: Path) -> None:
    found = runs(tmp_path, "sm_121a", entry(SASS, 90, 0x11 | ARCH_SPECIFIC), entry(SASS, 120))
    assert found == gpuruns.Runs(gpuruns.OLDER_MINOR, "sm_120", ("sm_90a", "sm_120"))
    assert found.says() == "sm_120 SASS (older minor)"


def test_gb10_runs_no_arch_specific_sm_120a_code(tmp_path: Path) -> None:
    found = runs(tmp_path, "sm_121a", entry(SASS, 120, 0x11 | ARCH_SPECIFIC))
    assert found.code == gpuruns.NOTHING
    assert found.says() == "nothing (has sm_120a)"


def test_family_code_runs_on_the_newer_minor(tmp_path: Path) -> None:
    assert runs(tmp_path, "sm_121a", entry(SASS, 120, 0x11 | FAMILY)).says() == "sm_120f SASS (older minor)"


def test_only_older_ptx_is_jit_compiled_at_start(tmp_path: Path) -> None:
    found = runs(tmp_path, "sm_121a", entry(PTX, 80, ptx=(8, 0)), entry(PTX, 90, ptx=(8, 4)), entry(SASS, 90))
    assert (found.code, found.uses) == (gpuruns.PTX_JIT, "compute_90")
    assert found.says() == "compute_90 PTX (JIT at start)"


def test_b300_runs_sm_100_sass_and_prefers_its_own(tmp_path: Path) -> None:
    assert runs(tmp_path, "sm_103a", entry(SASS, 100)).says() == "sm_100 SASS (older minor)"
    own = runs(tmp_path, "sm_103a", entry(SASS, 100), entry(SASS, 103, 0x11 | ARCH_SPECIFIC), entry(PTX, 100))
    assert (own.code, own.uses) == (gpuruns.EXACT, "sm_103a")
    assert runs(tmp_path, "sm_103a", entry(SASS, 100, 0x11 | ARCH_SPECIFIC)).code == gpuruns.NOTHING


def test_sass_of_another_major_is_never_run(tmp_path: Path) -> None:
    assert runs(tmp_path, "sm_120a", entry(SASS, 100), entry(SASS, 90)).code == gpuruns.NOTHING


@pytest.fixture
def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `kernels` (its library written by each test) that the arch audit scans alone."""
    return audited_alone(tmp_path, monkeypatch)


def audit(package: Path, archs: list[str], also: list[str], *entries: bytes) -> dict[str, Any]:
    (package / "ops.so").write_bytes(elf_with_sections({".nv_fatbin": fatbin_blob(*entries)}))
    ctx = core.Context(archs=archs, also_archs=also, results={"import:torch": {"status": core.FAILED}})
    return core.run_stage(ctx, core.REGISTRY["arch-audit"])


def test_a_gb10_target_with_sm_120_sass_passes_without_a_warning(kernels: Path) -> None:
    result = audit(kernels, ["sm_90a", "sm_121a"], [], entry(SASS, 90, 0x11 | ARCH_SPECIFIC), entry(SASS, 120))
    assert result["status"] == core.PASSED
    ev = result["evidence"]
    assert "warnings" not in ev
    assert ev["runs"]["sm_121a"] == {"kernels": "sm_120 SASS (older minor)"}
    assert ev["libraries"]["kernels"]["runs"]["sm_121a"] == {"code": "older-minor-sass", "uses": "sm_120"}
    assert ev["summary"] == ["sm_90a (target): sm_90a SASS in kernels",
                             "sm_121a (target): sm_120 SASS (older minor) in kernels"]


def test_a_gb10_target_with_sm_120a_sass_only_fails_and_says_why(kernels: Path) -> None:
    result = audit(kernels, ["sm_90a", "sm_121a"], [], entry(SASS, 90, 0x11 | ARCH_SPECIFIC),
                   entry(SASS, 120, 0x11 | ARCH_SPECIFIC))
    assert result["status"] == core.FAILED
    assert result["reason"] == ("kernels has no code for sm_121a (it has sm_90a, sm_120a; sm_120a is arch-specific "
                                "and runs on its own arch alone)")
    assert result["evidence"]["runs"]["sm_121a"] == {"kernels": "nothing (has sm_90a, sm_120a)"}


def test_a_gb10_audited_with_sm_120a_sass_only_is_a_warning(kernels: Path) -> None:
    result = audit(kernels, ["sm_120a"], ["sm_121a"], entry(SASS, 120, 0x11 | ARCH_SPECIFIC))
    assert result["status"] == core.PASSED
    assert result["evidence"]["warnings"] == [
        "sm_121a is not a target arch; no code it can run in kernels (it has sm_120a; sm_120a is arch-specific and "
        "runs on its own arch alone)"]
    assert result["evidence"]["summary"][1] == "sm_121a (audited, not a target): nothing (has sm_120a) in kernels"


def test_only_compute_90_ptx_warns_of_jit_at_start_for_targets_and_audited(kernels: Path) -> None:
    result = audit(kernels, ["sm_90a", "sm_120a"], ["sm_121a"], entry(SASS, 90, 0x11 | ARCH_SPECIFIC),
                   entry(PTX, 90, ptx=(8, 4)))
    assert result["status"] == core.PASSED   # it runs, slowly at first: a warning, not a failure
    assert result["evidence"]["warnings"] == [
        "sm_120a would JIT-compile PTX at start (slow first start) in kernels (compute_90); it has no SASS that runs "
        "there",
        "sm_121a would JIT-compile PTX at start (slow first start) in kernels (compute_90); it has no SASS that runs "
        "there"]
    assert result["evidence"]["runs"]["sm_90a"] == {"kernels": "sm_90a SASS"}


def test_b300_audited_beside_sm_100_sass_runs_it(kernels: Path) -> None:
    result = audit(kernels, ["sm_100a"], ["sm_103a"], entry(SASS, 100))
    assert result["status"] == core.PASSED
    assert "warnings" not in result["evidence"]
    assert result["evidence"]["runs"]["sm_103a"] == {"kernels": "sm_100 SASS (older minor)"}


def test_the_record_and_the_html_report_say_what_each_arch_runs(kernels: Path) -> None:
    probe = audit(kernels, ["sm_90a", "sm_120a"], ["sm_121a"], entry(SASS, 90, 0x11 | ARCH_SPECIFIC), entry(SASS, 120))
    cell = make_cell("verified")
    stages = [s.model_copy(update={"evidence": probe["evidence"]}) if s.name == "arch-audit" else s
              for s in cell.stages]
    seen = cell.model_copy(update={"stages": stages})
    rows = dict(notes.arch_code(seen))
    assert rows["sm_121a (audited, not a target) runs"] == "sm_120 SASS (older minor) in kernels"
    assert rows["sm_120a (target) runs"] == "sm_120 SASS in kernels"
    page = html.render(vouched(RunResults(run_id="r", started="2026-12-02T01:00:00+00:00", cells=[seen])))
    assert "sm_121a (audited, not a target) runs" in page and "sm_120 SASS (older minor) in kernels" in page
    assert common.verdict_of(seen) == common.verdict_of(cell)   # no warning: nothing to add to the verdict's reason


def test_arch_specific_ptx_of_the_older_minor_does_not_jit_to_gb10_either(kernels: Path) -> None:
    result = audit(kernels, ["sm_121a"], [], entry(SASS, 120, 0x11 | ARCH_SPECIFIC),
                   entry(PTX, 120, 0x11 | ARCH_SPECIFIC, ptx=(8, 7)))
    assert result["status"] == core.FAILED
    assert result["reason"] == ("kernels has no code for sm_121a (it has compute_120a, sm_120a; compute_120a, sm_120a "
                                "are arch-specific and run on their own arch alone)")
