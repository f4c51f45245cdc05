"""The evaluation sets' scorer (benchmarks/classifier_eval.py): how an answer that names no cause counts, and that
every evaluation set in the corpus loads with the fields the scorer reads (eval-2026-12c adds `cause`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from buildscripts.verify import classify

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = Path(__file__).parent / "data" / "corpus"
REQUIRED = {"id", "family", "stage", "source", "error", "expected"}   # the rest (note, also, cause ...) is optional


def _scorer() -> ModuleType:
    """benchmarks/ holds scripts, not a package: the scorer is loaded from its file."""
    spec = importlib.util.spec_from_file_location("classifier_eval", ROOT / "benchmarks" / "classifier_eval.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("classifier_eval", module)   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


scorer = _scorer()


def entry(expected: str, also: tuple[str, ...] = ()) -> Any:
    return scorer.Entry(id="x", family="f", stage="server", source="s", error="e", expected=expected, also=also,
                        note="")


def test_an_answer_that_names_no_cause_is_never_a_wrong_class() -> None:
    no_cause = scorer.names_no_cause()
    assert {"server-died", "sgl-kernel-common-ops-not-loaded"} <= no_cause
    assert "cuda-out-of-memory" not in no_cause
    assert scorer.outcome(entry("unclassified"), "sgl-kernel-common-ops-not-loaded", no_cause) == scorer.RIGHT
    assert scorer.outcome(entry("shared-library-missing"), "sgl-kernel-common-ops-not-loaded", no_cause) == (
        scorer.UNRECOGNISED)
    assert scorer.outcome(entry("unclassified"), "cuda-out-of-memory", no_cause) == scorer.WRONG
    assert scorer.outcome(entry("unclassified", also=("cuda-out-of-memory",)), "cuda-out-of-memory") == scorer.RIGHT
    # strict: a generic class is a class like any other
    assert scorer.outcome(entry("unclassified"), "server-died") == scorer.WRONG


SETS = sorted(p for p in CORPUS_DIR.glob("eval-*.yaml") if not p.name.endswith("-mapping.yaml"))   # not the mappings


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_every_evaluation_set_loads_with_the_fields_the_scorer_reads(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    for raw in data["entries"]:
        assert set(raw) >= REQUIRED, (raw.get("id"), REQUIRED - set(raw))
    ids = {c.id for c in classify.load().classes} | {classify.UNCLASSIFIED}
    for loaded in scorer.load(path):
        assert loaded.error.strip() and loaded.source.startswith("https://")
        assert loaded.stage in classify.STAGES or loaded.stage in classify.STAGE_ALIASES, loaded.id
        assert loaded.expected in ids or loaded.expected == classify.UNCLASSIFIED, loaded.id
