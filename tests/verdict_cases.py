"""One set of signed verdicts for sm_90a, good and malformed, with what `check --arch sm_90a` and the cosign policy
of sm_90a must both say of each: tests/unit/test_verdict_form.py feeds them to `check`'s reader alone,
tests/process/test_policy_agreement.py to both `check` and the real cosign.

Each case is a payload, bytes as signed: a verdict the project's verifier writes, edited. `HIDDEN` are the ones
cosign's own reader (Go's encoding/json) changes before its policy sees them: a key twice (Go keeps the last) and
a Statement field spelled in another case (Go folds it into the field). `check` refuses them; the policy cannot
see them (docs/checking-an-image.md says so).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from buildscripts.trust import statement
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

ARCH = "sm_90a"
SIGNED_AT = "2026-12-01T10:00:00Z"
Edit = Callable[[dict[str, Any]], bytes]


@dataclass(frozen=True)
class Case:
    name: str
    edit: Edit
    accepted: bool                   # by `check --arch sm_90a` and by the policy of sm_90a alike

    def payload(self, repository: str, digest: str) -> bytes:
        return self.edit(document(repository, digest))


def document(repository: str, digest: str) -> dict[str, Any]:
    """A verdict for sm_90a as the verifier signs it: every stage passed on an H200."""
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA H200", "sm_90"))
    return statement.statement(cell, ARCH, subject=repository, digest=digest,
                               configuration={"matrix.yaml": "a" * 64}, url=None, signed_at=SIGNED_AT)


def dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def predicate(**changes: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> bytes:
        doc["predicate"].update(changes)
        return dumps(doc)
    return edit


def tests_of(change: Callable[[dict[str, Any]], None]) -> Edit:
    def edit(doc: dict[str, Any]) -> bytes:
        change(doc["predicate"])
        return dumps(doc)
    return edit


def move(*stages: str, to: str = "warnedTests") -> Callable[[dict[str, Any]], None]:
    def change(found: dict[str, Any]) -> None:
        for stage in stages:
            found["passedTests"].remove(stage)
            found[to].append(stage)
    return change


def warned(*stages: str) -> Edit:
    """A WARNED verdict, as statement.py writes one: those stages passed with warnings."""
    def change(found: dict[str, Any]) -> None:
        move(*stages)(found)
        found["result"] = "WARNED"
    return tests_of(change)


def respelled(old: str, new: str) -> Edit:
    """The arch spelled otherwise everywhere: in `arch` and in every GPU test."""
    return lambda doc: dumps(doc).replace(f'"{old}"'.encode(), f'"{new}"'.encode()) \
        .replace(f'@{old}"'.encode(), f'@{new}"'.encode())


def text(old: str, new: str) -> Edit:
    def edit(doc: dict[str, Any]) -> bytes:
        before = dumps(doc)
        after = before.replace(old.encode(), new.encode(), 1)
        assert after != before, f"{old} is not in the verdict"
        return after
    return edit


def failed(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    move(f"server@{ARCH}", to="failedTests")(doc["predicate"])
    doc["predicate"]["result"] = "FAILED"
    return doc


def predicate_twice(doc: dict[str, Any]) -> bytes:
    """The FAILED predicate, then the PASSED one: Python's and Go's lenient readers take the second."""
    head = json.dumps({k: v for k, v in doc.items() if k != "predicate"})[:-1]
    return f'{head}, "predicate": {json.dumps(failed(doc)["predicate"])}, ' \
           f'"predicate": {json.dumps(doc["predicate"])}}}'.encode()


def with_subject_digest(**more: str) -> Edit:
    def edit(doc: dict[str, Any]) -> bytes:
        doc["subject"][0]["digest"].update(more)
        return dumps(doc)
    return edit


CASES = [
    Case("PASSED", dumps, True),
    Case("WARNED", warned(f"server@{ARCH}", "facts@cpu"), True),
    Case("WARNED on every GPU stage", warned(*(f"{s}@{ARCH}" for s in (
        "gpu-visible", "kernel-smoke", "nccl-allreduce", "server", "first-generation"))), True),
    Case("an older verifier's, without nccl-allreduce", tests_of(lambda p: p["passedTests"].remove(
        f"nccl-allreduce@{ARCH}")), True),
    Case("FAILED", lambda doc: dumps(failed(doc)), False),
    Case("PASSED, with a failed test", tests_of(move(f"server@{ARCH}", to="failedTests")), False),
    Case("a result in lower case", predicate(result="passed"), False),
    Case("a key twice, the last FAILED", text('"result": "PASSED"', '"result": "PASSED", "result": "FAILED"'), False),
    Case("a key in another case beside it", predicate(Result="FAILED"), False),
    Case("a key in another case alone", text('"result"', '"Result"'), False),
    Case("axes keys equal but for case", predicate(axes={"cuda": "12.9", "CUDA": "13.0"}), False),
    Case("a digest key in another case beside it", with_subject_digest(SHA256="b" * 64), False),
    Case("arch SM_90A", respelled(ARCH, "SM_90A"), False),
    Case("arch sm_90 (the family)", respelled(ARCH, "sm_90"), False),
    Case("arch with a trailing space", predicate(arch=f"{ARCH} "), False),
    Case("arch with a full-width digit", respelled(ARCH, "sm_\uff190a"), False),
    Case("an unknown stage", tests_of(lambda p: p["passedTests"].append(f"bonus@{ARCH}")), False),
    Case("another arch's stage", tests_of(lambda p: p["passedTests"].append("server@sm_100a")), False),
    Case("a GPU stage on cpu", tests_of(lambda p: p["passedTests"].append("server@cpu")), False),
    Case("a stage twice in passedTests", tests_of(lambda p: p["passedTests"].append(f"server@{ARCH}")), False),
    Case("a stage passed and warned", tests_of(lambda p: p["warnedTests"].append("facts@cpu")), False),
    Case("a test that is no string", tests_of(lambda p: p["passedTests"].append(5)), False),
    Case("no failedTests", tests_of(lambda p: p.pop("failedTests")), False),
    Case("no server stage", tests_of(lambda p: p["passedTests"].remove(f"server@{ARCH}")), False),
    Case("a GPU-only run's: no CPU stage", tests_of(lambda p: p.update(
        passedTests=[t for t in p["passedTests"] if not t.endswith("@cpu")])), False),
    Case("one CPU stage left out (arch-audit)", tests_of(lambda p: p["passedTests"].remove("arch-audit@cpu")), False),
    Case("no signedAt", tests_of(lambda p: p.pop("signedAt")), False),
    Case("signedAt to the millisecond", predicate(signedAt="2026-12-01T10:00:00.500Z"), False),
    Case("signedAt on 30 February", predicate(signedAt="2026-02-30T10:00:00Z"), False),
    Case("a field no verdict has", predicate(verifiedBy="me"), False),
]

# What cosign 2.5's reader hides from its policy: `check` refuses these, cosign judges what Go made of them.
HIDDEN = [
    Case("a key twice, the last PASSED", text('"result": "PASSED"', '"result": "FAILED", "result": "PASSED"'), True),
    Case("the predicate twice, the last PASSED", predicate_twice, True),
    Case("a Statement field in another case beside it",
         text('"predicateType"', f'"PredicateType": "{statement.TEST_RESULT}", "predicateType"'), True),
]
