"""The hand-back of a bisection: culprit, records, decisive lines, the reproduction and the upstream issue draft."""

from __future__ import annotations

from buildscripts.bisect.diff import lock_diff
from buildscripts.bisect.groups import group_changes
from buildscripts.bisect.report import Handback, issue_draft, markdown, reproduce, stages_upto
from buildscripts.bisect.search import Outcome, Target, Verdict, bisect
from buildscripts.bisect.sources import Side
from buildscripts.lock.lockfile import Lockfile, Pin


def side(ref: str, pins: dict[str, str]) -> Side:
    body = "".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n" for n, v in pins.items())
    return Side(ref, (ref,), (Lockfile({"python": "3.11"}, body),))


GOOD = side("main~3", {"torch": "2.11.0", "triton": "3.5.0", "sglang": "0.5.16", "numpy": "2.3.0"})
BAD = side("main", {"torch": "2.11.0", "triton": "3.5.1", "sglang": "0.5.16", "numpy": "2.3.4"})
TARGET = Target("jit-compile", "ptxas-unsupported-arch")


def handback() -> Handback:
    groups = group_changes(lock_diff(GOOD.pins, BAD.pins), GOOD.pins, None)

    def build(pins: object, label: str) -> Outcome:
        assert isinstance(pins, dict)
        pin = pins["triton"]
        assert isinstance(pin, Pin)
        if pin.version == "3.5.1":
            return Outcome(Verdict.FAIL, "jit-compile", "ptxas-unsupported-arch",
                           lines=("ptxas fatal : Value 'sm_120a' is not defined for option 'gpu-name'",))
        return Outcome(Verdict.PASS)

    return Handback(cell="sglang0.5.16-torch2.11.0-cu130-pip-bookworm", good=GOOD, bad=BAD, target=TARGET,
                    result=bisect(groups, GOOD.pins, build, TARGET))


def test_the_hand_back_names_the_culprit_its_lines_and_every_step() -> None:
    text = markdown(handback())
    assert "- ~ triton 3.5.0 -> 3.5.1" in text
    assert "numpy 2.3.0 -> 2.3.4" not in text.split("## Records")[0]   # only the culprit under Culprit
    assert "ptxas fatal : Value 'sm_120a'" in text
    assert "confirmed; 2 of 8 builds used." in text
    assert "| 2 | 2 | fail at jit-compile (ptxas-unsupported-arch) | confirmation |" in text


def test_the_reproduction_pins_the_culprit_on_the_good_lock_and_stops_at_the_stage() -> None:
    text = reproduce(handback())
    assert "pip install --no-deps triton==3.5.1" in text
    assert "numpy" not in text.split("# the whole")[0]
    assert f"--stages {','.join(stages_upto('jit-compile'))}" in text
    assert stages_upto("jit-compile")[-1] == "jit-compile" and "server" not in stages_upto("jit-compile")
    assert stages_upto("build") == ()


def test_the_issue_draft_says_versions_what_broke_and_where() -> None:
    text = issue_draft(handback())
    assert text.startswith("### triton 3.5.0 -> 3.5.1 breaks `jit-compile`")
    assert "torch 2.11.0" in text and "sglang 0.5.16" in text
    assert "(ptxas-unsupported-arch)" in text and "**Where it was seen.**" in text
