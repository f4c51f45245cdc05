"""The reports say only what the gate would say: "verified" (✅, a GPU named as verified) only for a record a
trusted key sealed and today's rules accept; everything else shown with its marks."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from buildscripts import matrix, report, results
from buildscripts.commands import report as report_command
from buildscripts.publish import trusted
from buildscripts.report import console, weigh
from buildscripts.results import RunResults, StageResult, Status, Verdict
from buildscripts.trust import keys, seal
from buildscripts.trust.keys import SigningKey
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import (
    B200,
    PROJECT_MATRIX,
    cpu_passed,
    finish,
    gpu_passed,
    make_cell,
    sealed,
)

PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
DIGEST = results.matrix_digest(matrix.load(PROJECT_MATRIX).spec)
VERIFIED_B200 = re.compile(r"verified[^\n]*NVIDIA B200")


def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "matrix.yaml").write_text(PROJECT_MATRIX.read_text())
    (tmp_path / "README.md").write_text(f"{report.markdown.START}\n{report.markdown.END}\n")
    return Workspace.at(tmp_path)


def b200_record() -> results.CellResult:
    """The project's pip cell, every stage passed on a B200: what a verifier on a B200 would write."""
    return finish(make_cell("verified"), stages=cpu_passed() + gpu_passed(B200, "sm_100"))


def save(ws: Workspace, run_id: str, *cells: results.CellResult, where: str = "runs",
         finished: str = "2026-12-01T10:00:00+00:00") -> Path:
    digest = results.matrix_digest(matrix.load(ws.matrix).spec)
    run = RunResults(run_id=run_id, started=finished, finished=finished, matrix_digest=digest, cells=list(cells))
    path = ws.root / where / run_id / "results.json"
    results.save(run, path)
    return path


def rendered(ws: Workspace, *args: str) -> tuple[str, str, str]:
    out = ws.root / "reports"
    assert call(report_command, ["--out", str(out), *args], ws, env=dict(os.environ)) == 0
    return tuple((out / name).read_text() for name in ("compat.md", "compat.html", "junit.xml"))  # type: ignore[return-value]


def test_a_hand_edited_results_file_never_says_verified_on_a_b200(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ws = workspace(tmp_path)
    cpu_only = make_cell("cpu-checked")
    forged = cpu_only.model_copy(update={  # GPU stages set to passed by hand, the verdict too
        "cell_id": PIP, "axes": b200_record().axes, "verdict": Verdict.VERIFIED,
        "stages": cpu_passed() + gpu_passed(B200, "sm_100")})
    save(ws, "edited", forged)
    page, html, junit = rendered(ws)
    said = capsys.readouterr().out
    for text in (page, said):
        assert not VERIFIED_B200.search(text) and "✅ verified" not in text
    assert "❔ claimed 🔓" in page and "?sm_100" in page
    assert 'class="v v-verified"' not in html and 'class="v v-claimed"' in html
    assert 'name="evidence"' in junit and "unsealed" in junit


def test_only_a_trusted_unchanged_seal_shows_verified(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    save(ws, "ours", sealed(b200_record(), matrix_digest=DIGEST))
    page, html, _ = rendered(ws)
    assert "✅ verified sm_100" in page and 'class="v v-verified"' in html
    other = SigningKey("elsewhere", keys.generate())
    save(ws, "theirs", sealed(b200_record(), other, matrix_digest=DIGEST), finished="2026-12-01T11:00:00+00:00")
    page, _, _ = rendered(ws)
    assert "✅ verified sm_100" in page  # a record nobody vouches for never displaces one the gate lets through
    (ws.runs / "ours" / "results.json").unlink()
    page, _, _ = rendered(ws)
    assert "❔ claimed 🔏" in page and "not valid" in page and not VERIFIED_B200.search(page)
    changed = sealed(b200_record(), matrix_digest=DIGEST)
    changed = changed.model_copy(update={"stages": [*changed.stages[:-1], changed.stages[-1].model_copy(
        update={"duration_s": 1.0})]})
    save(ws, "theirs", changed, finished="2026-12-01T12:00:00+00:00")
    page, _, _ = rendered(ws)
    assert "changed after it was sealed" in page and "✅ verified<br>" not in page


def test_evidence_keys_count_for_reports_and_never_for_the_gate(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    machine = SigningKey("an H200 test machine", keys.generate())
    record = sealed(b200_record(), machine, matrix_digest=DIGEST)
    path = save(ws, "h200-rerun", record, where="evidence/h200-2026-12-02/runs")
    page = (ws.root / "README.md")
    assert call(report_command, ["--update-readme"], ws, env=dict(os.environ)) == 0
    details = ws.root / "docs" / "compatibility.md"
    assert "✅ verified" not in page.read_text() and "seal not trusted" in details.read_text()
    (ws.root / "evidence" / "keys").mkdir()
    (ws.root / "evidence" / "keys" / "h200-2026-12-02.pub").write_bytes(machine.public.pem)
    assert call(report_command, ["--update-readme"], ws, env=dict(os.environ)) == 0
    assert "✅ verified" in page.read_text() and "✅ verified sm_100" in details.read_text()
    # the gate of tag, promote and export trusts no evidence key: the same record is refused there
    gate_keys = keys.trusted(ws.root, dict(os.environ))
    assert machine.public.keyid not in {k.keyid for k in gate_keys}
    assert isinstance(trusted.check(results.load(path).cells[0], 0, matrix.load(ws.matrix), gate_keys),
                      trusted.Refused)


def test_a_verdict_judged_again_by_todays_verifier_is_marked_as_judged_by_older_rules(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    host = "host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit"
    said = finish(b200_record(), cell_id=host, axes={"base": "host"})
    assert said.verdict is Verdict.VERIFIED
    unbacked = StageResult(name="gpu-visible", status=Status.FAILED, failure_class="gpu-claim-unbacked",
                           reason="the probe says a GPU is visible; none was handed over")
    again = finish(said, stages=[*cpu_passed(), unbacked])
    save(ws, "old", said, finished="2026-11-29T10:00:00+00:00")
    save(ws, "rejudged", again)
    page, _, _ = rendered(ws)
    line = next(line for line in page.splitlines() if line.startswith(f"- `{host}`"))
    assert "❌ failed 🔓🗣️🕰️" in line and "judged by older rules" in line and "self-reported by the probe" in line
    assert "run old (2026-11-29T10:00:00+00:00) recorded verified" in page


def test_the_default_search_skips_what_is_not_a_regular_file_and_says_so(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ws = workspace(tmp_path)
    save(ws, "good", make_cell("cpu-checked"))
    (ws.runs / "dev").mkdir(parents=True)
    (ws.runs / "dev" / "results.json").symlink_to("/dev/zero")
    (ws.runs / "pipe").mkdir()
    os.mkfifo(ws.runs / "pipe" / "results.json")
    (ws.runs / "dangling").mkdir()
    (ws.runs / "dangling" / "results.json").symlink_to(tmp_path / "nowhere")
    rendered(ws)
    said = capsys.readouterr()
    text = said.out + said.err
    assert f"skipped {ws.runs / 'dev' / 'results.json'}: it is a link to a character device" in text
    assert f"skipped {ws.runs / 'pipe' / 'results.json'}: it is a fifo" in text
    assert f"skipped {ws.runs / 'dangling' / 'results.json'}: it is a link that leads nowhere readable" in text


def test_the_console_summary_fits_80_columns(tmp_path: Path) -> None:
    long_id = f"{PIP}@lxc-a-container-with-a-long-name"
    note = "sm_121a is not a target arch; no code for it in sgl_kernel/common_ops.so"
    cells = [finish(make_cell(kind), stages=[s.model_copy(update={"evidence": {"warnings": [note]}})
                                            if s.name == "arch-audit" else s for s in make_cell(kind).stages])
             for kind in ("cpu-checked", "failed")]
    cells += [finish(cells[0], cell_id=long_id), make_cell("incompatible")]
    run = RunResults(run_id="run-80", started="2026-12-01T10:00:00+00:00", cells=cells)
    shown = weigh.weigh_runs([run], matrix.load(workspace(tmp_path).matrix), [])
    out = Console(record=True, width=80, color_system=None)
    console.summary(shown, out)
    lines = out.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    for cell in cells[:3]:
        assert any(cell.cell_id in line.split(" ") for line in lines), cell.cell_id  # whole, never wrapped
    assert sum("sm_121a is not a target arch" in line for line in lines) == 1   # one line per kind, counted
    assert any("(3× in 3 cell(s))" in line for line in lines)
    assert any(line.startswith("1 cell(s) excluded (1 where the SGLang release pins another torch)")
               for line in lines)
    assert lines[-1].startswith("outcome:") or "exit 10" in " ".join(lines[-2:])


def test_weighing_keeps_one_judge(tmp_path: Path) -> None:
    """The reports and the gate share gate.py: a record the gate lets through is one the reports vouch for."""
    ws = workspace(tmp_path)
    record = sealed(b200_record(), matrix_digest=DIGEST)
    the_matrix = matrix.load(ws.matrix)
    mine = keys.trusted(ws.root, dict(os.environ))
    assert isinstance(trusted.check(record, 0, the_matrix, mine), trusted.Trusted)
    run = RunResults(run_id="r", started="2026-12-01T10:00:00+00:00", cells=[record],
                     matrix_digest=results.matrix_digest(the_matrix.spec))
    assert weigh.weigh_runs([run], the_matrix, mine).marks == {PIP: ()}
    assert seal.signer(record, mine)


def test_a_new_gpu_run_laid_out_as_documented_shows_verified_in_the_details(tmp_path: Path) -> None:
    """docs/what-ran-where.md: a run folder under evidence/FOLDER/runs/, sealed by a machine's key whose public
    half is evidence/keys/FOLDER.pub: its host-mode and in-place runs show ✅ in docs/compatibility.md, among the
    runs that are no image of the matrix (the README keeps the answer only)."""
    ws = workspace(tmp_path)
    machine = SigningKey("an H200 test machine", keys.generate())
    host = finish(b200_record(), cell_id="host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit", axes={"base": "host"})
    lxc = finish(b200_record(), cell_id=f"{PIP}@lxc-ct-good")
    old = finish(host, verdict=Verdict.VERIFIED)  # an unsealed record of the same run id, from before
    save(ws, "h200-2026-11-29", old, where="evidence", finished="2026-11-29T10:00:00+00:00")
    save(ws, "h200-rerun", sealed(host, machine, matrix_digest=DIGEST), sealed(lxc, machine, matrix_digest=DIGEST),
         where="evidence/h200-2026-12-02/runs")
    (ws.root / "evidence" / "keys").mkdir()
    (ws.root / "evidence" / "keys" / "h200-2026-12-02.pub").write_bytes(machine.public.pem)
    assert call(report_command, ["--update-readme"], ws, env={}) == 0
    text = (ws.root / "docs" / "compatibility.md").read_text()
    for cell_id in (host.cell_id, lxc.cell_id):
        line = next(line for line in text.splitlines() if line.startswith(f"- `{cell_id}`"))
        assert "✅ verified sm_100" in line, line


def test_a_run_re_dated_by_hand_does_not_outrank_a_newer_sealed_record(tmp_path: Path) -> None:
    """The run's time is outside every seal: an older sealed VERIFIED run whose `finished` was moved past a
    newer sealed FAILED run of the same image must not bring the ✅ back. The records' own times decide."""
    ws = workspace(tmp_path)
    the_matrix = matrix.load(ws.matrix)
    mine = keys.trusted(ws.root, dict(os.environ))
    good = sealed(b200_record().model_copy(update={"finished": "2026-12-01T10:00:00+00:00"}), matrix_digest=DIGEST)
    failing = [s.model_copy(update={"status": results.Status.FAILED}) if s.name == "server" else s
               for s in b200_record().stages]
    bad = sealed(finish(b200_record(), stages=failing).model_copy(update={"finished": "2026-12-01T12:00:00+00:00"}),
                 matrix_digest=DIGEST)
    older = RunResults(run_id="older", started="2026-12-01T09:00:00+00:00", finished="2026-12-02T00:00:00+00:00",
                       matrix_digest=DIGEST, cells=[good])      # re-dated by hand past the newer run
    newer = RunResults(run_id="newer", started="2026-12-01T11:00:00+00:00", finished="2026-12-01T12:00:00+00:00",
                       matrix_digest=DIGEST, cells=[bad])
    shown = weigh.weigh_runs([older, newer], the_matrix, mine)
    cell = next(c for c in shown.run.cells if c.cell_id == PIP)
    assert cell.verdict is not Verdict.VERIFIED, cell.verdict_reason
