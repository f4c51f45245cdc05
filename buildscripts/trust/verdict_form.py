"""The one form of a signed verdict: what `check` counts, and what the cosign policies (policy.py) require.

A verdict's payload is read once, with the one strict reader (strictjson): no key twice, no two keys of one
object equal but for case, no key spelled in another case than a field of the Statement (at any depth but in
`axes`, whose keys are the matrix's). Then its form, here, field by field; anything else is refused, saying
where and why:
- the Statement: `_type` and `predicateType` as statement.py writes them; `subject` a non-empty list of
  `{name, digest: {sha256}}`. Other keys of the Statement and of a subject are left alone, as in-toto's readers
  and cosign's leave them (cosign's policy never sees them);
- the predicate: only the fields statement.py writes (REQUIRED and OPTIONAL), each of its type;
- `arch` spelled as matrix.yaml spells a target (ARCH: `sm_90a`; never `SM_90A`, ` sm_90a` or `sm_９0a`), and
  a verdict for sm_90 is not one for sm_90a: `check --arch sm_90a` asks for that spelling, as the policy of
  sm_90a does (verdicts.arch_matches);
- `signedAt` to the second, in UTC (STAMP: `2026-12-01T21:05:09Z`), a date that exists;
- each test `STAGE@ARCH` of a GPU stage on the verdict's own arch, or `STAGE@cpu` of a CPU stage, and each stage
  once in the three lists together: no stage this project does not run, none twice;
- `result` PASSED, WARNED or FAILED.
policy.py writes these same constants into the CUE, so that `check` and `cosign verify-attestation --policy`
accept the same verdicts (tests/process/test_policy_agreement.py feeds both the same ones).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..results import CPU_STAGES, GPU_STAGES
from . import dsse
from .statement import STATEMENT_TYPE, TEST_RESULT

# Patterns are whole-value matches, written once for Python's `re.fullmatch` and Go's RE2 (policy.py anchors
# them): ASCII classes only, as `\d` would take any Unicode digit in Python.
HEX64 = "[0-9a-f]{64}"
ARCH = "sm_[0-9]{2,3}[af]?"    # a target as matrix.yaml spells one (matrix/schema.py's ARCH_RE; a test ties them)
STAMP = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z"
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
AXIS = "[a-z0-9][a-z0-9_.-]*"  # a matrix axis name
ANY = "(?s:.*)"                # a configuration's digests: informative, any string
RESULTS = ("PASSED", "WARNED", "FAILED")
TEST_LISTS = ("passedTests", "warnedTests", "failedTests")
REQUIRED = ("result", "arch", *TEST_LISTS)
# signedAt: required by the policies; a verdict without one is an older verifier's, ignored by `check` as undated.
OPTIONAL = ("signedAt", "configuration", "url", "imageIndex", "cell", "axes")
# Every field name of a verdict: a key spelled as one of these in another case is refused wherever it is.
FIELDS = frozenset({"_type", "subject", "predicateType", "predicate", "name", "digest", "sha256",
                    *REQUIRED, *OPTIONAL})
FREE = frozenset({"axes"})


class Malformed(ValueError):
    """A signed payload that is not in the one form of a verdict; `digests` are the subjects it names, when its
    subject could be read."""

    def __init__(self, message: str, digests: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.digests = tuple(digests)


class OtherStatement(ValueError):
    """A signed document that is no in-toto test-result Statement (another kind of attestation)."""


def stage_pattern(arch: str) -> str:
    """The names a test of a verdict for `arch` (spelled as ARCH) may have: a GPU stage on `arch`, or a CPU
    stage on `cpu`."""
    return f"({'|'.join(GPU_STAGES)})@{arch}|({'|'.join(CPU_STAGES)})@cpu"


def arch_problem(arch: Any) -> str | None:
    if _full(ARCH, arch):
        return None
    return f"{shown(arch)} is not a GPU target as matrix.yaml spells one (lower-case ASCII, e.g. sm_90a or sm_120a)"


def shown(value: Any, limit: int = 80) -> str:
    """`value` for a message: its repr, cut short (a hostile payload's strings can be long)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def read(payload: bytes) -> dict[str, Any]:
    """The Statement `payload` holds, in the one form of a verdict; Malformed saying where it is not, or
    OtherStatement for a Statement of another kind."""
    try:
        document = dsse.payload_json(payload, fields=FIELDS, free=FREE)
    except dsse.EnvelopeError as exc:
        raise Malformed(exc.message) from None
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE \
            or document.get("predicateType") != TEST_RESULT:
        msg = f"a verdict is a {STATEMENT_TYPE} of {TEST_RESULT}"
        raise OtherStatement(msg)
    digests = subject_digests(document.get("subject"))
    try:
        _predicate(document.get("predicate"))
    except Malformed as exc:
        raise Malformed(str(exc), digests) from None
    return document


def subject_digests(subject: Any) -> list[str]:
    if not isinstance(subject, list) or not subject:
        msg = "subject: not a list of the digests it is for"
        raise Malformed(msg)
    digests = []
    for number, entry in enumerate(subject):
        where = f"subject[{number}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name", ""), str):
            msg = f"{where}: not an object with a name"
            raise Malformed(msg)
        digests.append("sha256:" + _digest(entry.get("digest"), f"{where}.digest"))
    return digests


def _digest(value: Any, where: str, *, pattern: str = HEX64) -> str:
    if not isinstance(value, dict) or list(value) != ["sha256"] or not _full(pattern, value["sha256"]):
        said = "64 lower-case hex digits" if pattern == HEX64 else "a string"
        msg = f"{where}: not {{\"sha256\": {said}}} alone"
        raise Malformed(msg)
    return str(value["sha256"])


def _full(pattern: str, value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def _predicate(predicate: Any) -> None:
    if not isinstance(predicate, dict):
        msg = "predicate: not an object"
        raise Malformed(msg)
    unknown = [key for key in predicate if key not in REQUIRED + OPTIONAL]
    missing = [key for key in REQUIRED if key not in predicate]
    if unknown or missing:
        said = [f"no field of a verdict: {', '.join(shown(k, 40) for k in unknown[:5])}"] if unknown else []
        said += [f"missing: {', '.join(missing)}"] if missing else []
        msg = f"predicate: {'; '.join(said)}"
        raise Malformed(msg)
    if predicate["result"] not in RESULTS:
        msg = f"predicate.result: {shown(predicate['result'])} is none of {', '.join(RESULTS)}"
        raise Malformed(msg)
    problem = arch_problem(predicate["arch"])
    if problem:
        msg = f"predicate.arch: {problem}"
        raise Malformed(msg)
    _tests(predicate, predicate["arch"])
    _optional(predicate)


def _tests(predicate: dict[str, Any], arch: str) -> None:
    seen: dict[str, str] = {}
    for field in TEST_LISTS:
        names = predicate[field]
        if not isinstance(names, list):
            msg = f"predicate.{field}: not a list"
            raise Malformed(msg)
        for name in names:
            if not _full(stage_pattern(arch), name):
                msg = (f"predicate.{field}: {shown(name)} is no stage this project runs on {arch} "
                       f"(STAGE@{arch} for a GPU stage, STAGE@cpu for a CPU stage)")
                raise Malformed(msg)
            if name in seen:
                msg = f"predicate.{field}: {shown(name)} is listed twice (in {seen[name]} and {field})"
                raise Malformed(msg)
            seen[name] = field


def _optional(predicate: dict[str, Any]) -> None:
    stamp = predicate.get("signedAt")
    if "signedAt" in predicate and not (_full(STAMP, stamp) and _exists(str(stamp))):
        msg = f"predicate.signedAt: {shown(stamp)} is not a time to the second in UTC (2026-12-01T21:05:09Z)"
        raise Malformed(msg)
    configuration = predicate.get("configuration", [])
    if not isinstance(configuration, list):
        msg = "predicate.configuration: not a list"
        raise Malformed(msg)
    for number, entry in enumerate(configuration):
        if not isinstance(entry, dict) or sorted(entry) != ["digest", "name"] or not isinstance(entry["name"], str):
            msg = f"predicate.configuration[{number}]: not {{name, digest}} alone"
            raise Malformed(msg)
        _digest(entry["digest"], f"predicate.configuration[{number}].digest", pattern=ANY)
    for field in ("url", "cell"):
        if not isinstance(predicate.get(field, ""), str):
            msg = f"predicate.{field}: not a string"
            raise Malformed(msg)
    if "imageIndex" in predicate and not _full(f"sha256:{HEX64}", predicate["imageIndex"]):
        msg = "predicate.imageIndex: not sha256: and 64 lower-case hex digits"
        raise Malformed(msg)
    axes = predicate.get("axes", {})
    if not isinstance(axes, dict) or not all(_full(AXIS, k) and isinstance(v, str) for k, v in axes.items()):
        msg = "predicate.axes: not a map of axis names (lower case) to strings"
        raise Malformed(msg)


def _exists(stamp: str) -> bool:
    try:
        datetime.strptime(stamp, STAMP_FORMAT)
    except ValueError:
        return False
    return True
