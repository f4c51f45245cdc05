"""The host owns the record's shape (verify/stagelines.py, the one rule of verify/output.py): one entry per stage
it asked for, in order, each parsed once; every other result line from inside is refused and noted."""

from __future__ import annotations

import json
from typing import Any

from buildscripts.probe.core import RESULT_PREFIX
from buildscripts.results import Status
from buildscripts.verify import importprobe, output, stagelines
from buildscripts.verify.stagelines import REFUSED, StageLines

ASKED = ("facts", "import", "flavour")


def line(name: object, status: str = "passed", **evidence: object) -> str:
    return RESULT_PREFIX + json.dumps({"name": name, "status": status, "evidence": evidence})


def read(lines: list[str], planned: tuple[str, ...] = ASKED, **kwargs: Any) -> output.ProbeRun:
    run = output.ProbeRun.of(planned, mode="host", **kwargs)
    for text in lines:
        run.add_line(text)
    return run


def test_forged_extra_duplicate_and_early_lines_make_no_entries() -> None:
    run = read([
        line("facts", "passed", forged=True),            # printed first: it is the stage's one entry
        line("server", "passed"),                        # a stage the host did not ask for
        line("flavour", "passed"),                       # not due yet: import is
        line("facts", "failed"),                         # the probe's own, second: refused
        line("import", "failed", why="no torch"),
        line("import", "passed"),                        # a forged second pass after the real failure
        line("flavour", "passed"),
        line("bogus\x1b[2J" * 30, "passed"),             # a name made to mislead a terminal, and long
    ], exit_code=0)
    stages = output.interpret(run, stage_timeout=5)
    assert [(s.name, s.status) for s in stages] == [("facts", Status.PASSED), ("import", Status.FAILED),
                                                    ("flavour", Status.PASSED)]
    notes = {s.name: s.evidence.get(REFUSED, []) for s in stages}
    assert len(notes["facts"]) == 3 and "'server'" in notes["facts"][0] and "did not ask for" in notes["facts"][0]
    assert "out of the order asked" in notes["facts"][1] and "import was due" in notes["facts"][1]
    assert "a second one for that stage" in notes["facts"][2]
    assert len(notes["import"]) == 1 and "'import' ('passed')" in notes["import"][0]
    assert len(notes["flavour"]) == 1 and "\x1b" not in notes["flavour"][0] and "…" in notes["flavour"][0]
    assert all(s.where == "host (cpu)" for s in stages)


def test_a_stage_counts_by_its_one_entry_whatever_follows() -> None:
    """Its status is the first line's: a later 'passed' for a failed stage does not flip it, nor add an entry."""
    stages = output.interpret(read([line("facts"), line("import", "failed"), line("import"), line("import")]), 5)
    assert [s.name for s in stages] == list(ASKED)
    assert stages[1].status is Status.FAILED and stages[2].status is Status.FAILED   # flavour: the probe ended
    assert len(stages[1].evidence[REFUSED]) == 2


def test_the_probe_cannot_write_the_hosts_notes_itself() -> None:
    forged = RESULT_PREFIX + json.dumps({"name": "facts", "status": "passed", "evidence": {REFUSED: ["none"]}})
    stages = output.interpret(read([forged]), 5)
    assert REFUSED not in stages[0].evidence


def test_refused_lines_do_not_extend_the_stage_deadline() -> None:
    run = read([])
    assert not run.add_line(line("import")) and not run.add_line(line("facts-again"))
    assert run.add_line(line("facts"))                 # only an accepted result resets a deadline
    assert run.lines.due == "import"


def test_notes_are_bounded_and_the_rest_counted() -> None:
    run = read([line("facts")] + [line("facts")] * 500)
    stages = output.interpret(run, 5)
    said = stages[0].evidence[REFUSED]
    assert len(said) == stagelines.MAX_NOTES + 1
    assert said[-1] == f"and {500 - stagelines.MAX_NOTES} more result line(s) refused"


def test_lines_before_any_stage_go_with_the_first_entry_even_when_the_probe_could_not_run() -> None:
    run = read([line("server")], exit_code=1)
    stages = output.interpret(run, 5)
    assert stages[0].name == "probe" and "'server'" in stages[0].evidence[REFUSED][0]


def test_a_probe_output_file_is_held_to_the_same_rule() -> None:
    raws: list[dict[str, Any]] = [{"name": "import", "status": "passed"}, {"name": "facts", "status": "passed"},
                                  {"name": "facts", "status": "failed"}, {"name": "nonsense", "status": "passed"}]
    stages = importprobe.file_stages(raws)
    assert [s.name for s in stages] == ["facts"]   # import came out of ladder order: refused, not reordered
    assert len(stages[0].evidence[REFUSED]) == 3


def test_a_line_names_its_stage_once() -> None:
    lines = StageLines(("facts",))
    assert lines.offer({"name": "facts", "status": "passed"}) and lines.due is None
    assert not lines.offer({"name": "facts", "status": "passed"})
    assert lines.notes_for(["facts"]) == {"facts": [lines.notes[0][1]]}
