"""JUnit XML: one test case per cell × stage (the build counts as a stage), for CI test views.

An expected failure is reported as skipped with its reason (pytest's xfail convention), so a
documented failure does not turn CI red; an unexpected pass is a failure of the cell's last stage. A record
nobody vouches for (report/weigh.py) gets a case `evidence`, skipped with its marks: what it claims is shown,
and nothing of it counts as a verification.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from ..results import CellResult, Status, Verdict
from . import bygpu, common
from .weigh import Weighed


def _case(suite: ET.Element, cell: CellResult, name: str, seconds: float) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=cell.cell_id, name=name, time=f"{seconds:.3f}")


def _add_cell(suite: ET.Element, cell: CellResult, weighed: Weighed) -> None:
    shown = common.shown(cell, weighed)
    verdict, why = shown.verdict, shown.reason
    if shown.marks:
        ET.SubElement(_case(suite, cell, "evidence", 0.0), "skipped", message=f"{shown.word}: {shown.why}")
    build = _case(suite, cell, common.BUILD, cell.build.duration_s if cell.build else 0.0)
    if cell.build is None or cell.build.status is not Status.PASSED:
        status = cell.build.status.value if cell.build else "skipped"
        reason = (cell.build.reason if cell.build else None) or cell.excluded or "not built"
        if status == "failed":
            failure = ET.SubElement(build, "failure", message=reason, type="build")
            failure.text = f"build log: {cell.build.log}" if cell.build and cell.build.log else ""
        else:
            ET.SubElement(build, "skipped", message=f"{verdict.value}: {reason}")
    runs_of = Counter(s.name for s in cell.stages)  # counted once: per stage it made rendering quadratic
    for stage in cell.stages:
        several = runs_of[stage.name] > 1  # a merged record: once per GPU arch
        case = _case(suite, cell, f"{stage.name} [{stage.arch}]" if several else stage.name, stage.duration_s)
        where = ET.SubElement(case, "properties")
        ET.SubElement(where, "property", name="where", value=stage.where)
        if stage.gpu:
            ET.SubElement(where, "property", name="gpu", value=f"{stage.gpu} ({stage.arch or '?'})")
        if stage.status is Status.FAILED:
            if verdict is Verdict.EXPECTED_FAILURE and cell.first_failure() is stage:
                ET.SubElement(case, "skipped", message=f"expected failure: {why}")
                continue
            failure = ET.SubElement(case, "failure", message=stage.reason or "failed",
                                    type=stage.failure_class or "unclassified")
            hint = f"hint: {stage.hint}" if stage.hint else None
            failure.text = "\n".join(p for p in (hint, stage.log_excerpt) if p)
        elif stage.status in (Status.SKIPPED, Status.ABORTED):
            why = stage.reason or "no reason given"
            ET.SubElement(case, "skipped", message=f"{stage.status.value}: {why}")
    if verdict is Verdict.UNEXPECTED_PASS:
        case = _case(suite, cell, "expectation", 0.0)
        ET.SubElement(case, "failure", message=why, type="unexpected-pass")


def render(weighed: Weighed) -> str:
    run = weighed.run
    root = ET.Element("testsuites", name=f"sglang-images {run.run_id}")
    suite = ET.SubElement(root, "testsuite", name="compatibility", timestamp=run.finished or run.started,
                          hostname=run.runner)
    gpus = ET.SubElement(suite, "properties")   # the view by GPU, for CI views that show suite properties
    for row in bygpu.rows(weighed):
        ET.SubElement(gpus, "property", name=f"gpu {row.arch} ({row.platform})", value=row.summary())
    for cell in common.sort_cells(run.cells):
        _add_cell(suite, cell, weighed)
    cases = suite.findall("testcase")
    counts = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
        "errors": 0,
    }
    for element in (root, suite):
        for key, value in counts.items():
            element.set(key, str(value))
    for element in root.iter():  # what XML cannot hold, from any field of the results (reasons, logs, names)
        element.text = common.plain(element.text) if element.text else element.text
        for name, text in element.attrib.items():
            element.set(name, common.plain(text))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
