"""One strict reader and one form for every signed payload: the verdict's Statement, its envelope, the sealed record.
`check`'s side of tests/verdict_cases.py here (tests/process/test_policy_agreement.py gives the same verdicts to the
real cosign and its policy); then what a malformed verdict a trusted key signed does to its digest."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildscripts import strictjson
from buildscripts.matrix.spellings import ARCH_RE, KNOWN_ARCHS, arch_problem
from buildscripts.results import StageResult, Status
from buildscripts.trust import carried, cosign, dsse, keys, seal, verdict_form, verdicts
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell, make_run
from tests.verdict_cases import ARCH, CASES, HIDDEN, Case

DIGEST = "sha256:" + "d" * 64
KEY = keys.SigningKey("verifier", keys.generate())


def signed(payload: bytes) -> dict[str, object]:
    return dsse.sign(payload, dsse.IN_TOTO, KEY)


def case(name: str) -> Case:
    return next(c for c in CASES + HIDDEN if c.name == name)


@pytest.mark.parametrize("case", CASES + HIDDEN, ids=lambda c: c.name)
def test_check_reads_each_verdict_as_the_policy_does(case: Case) -> None:
    """`check --arch sm_90a` accepts what the policy of sm_90a accepts; HIDDEN ones (a key twice, a Statement
    field in another case) it refuses, though cosign's reader hides them from the policy."""
    judged = verdicts.judge([signed(case.payload("r.example/sglang", DIGEST))], DIGEST, [KEY.public], [ARCH])
    assert judged.verified == (case.accepted and case in CASES), (judged.archs, judged.ignored)
    if not judged.verified and judged.ignored:
        reason = judged.ignored[0]
        assert "Traceback" not in reason and len(reason) < 400
        assert re.search(r"malformed verdict: (predicate|subject|the signed payload is refused)|no signing time",
                         reason), reason


@pytest.mark.parametrize(("name", "said"), [
    ("a key twice, the last FAILED", "the key 'result' appears twice in one object"),
    ("a key in another case beside it", "the keys 'result' and 'Result' differ only in case"),
    ("a key in another case alone", "the key 'Result' differs only in case from the field 'result'"),
    ("arch SM_90A", "predicate.arch: 'SM_90A' is not a GPU target as matrix.yaml spells one"),
    ("a stage twice in passedTests", "'server@sm_90a' is listed twice (in passedTests and passedTests)"),
    ("a stage passed and warned", "'facts@cpu' is listed twice (in passedTests and warnedTests)"),
    ("a GPU stage on cpu", "predicate.passedTests: 'server@cpu' is no stage this project runs on sm_90a"),
    ("signedAt to the millisecond", "predicate.signedAt: '2026-12-01T10:00:00.500Z' is not a time to the second"),
    ("a Statement field in another case beside it", "the keys 'PredicateType' and 'predicateType' differ only"),
])
def test_a_refusal_says_where_and_why(name: str, said: str) -> None:
    with pytest.raises(verdicts.MalformedVerdict, match=re.escape(said)):
        verdicts.open_verdict(signed(case(name).payload("r.example/sglang", DIGEST)), [KEY.public])


def test_the_verdict_arch_rule_is_the_matrix_target_spelling() -> None:
    """verdict_form.ARCH and matrix/schema.py's ARCH_RE are one spelling: every known target in both, and the
    spellings the policies refuse in neither."""
    for number in KNOWN_ARCHS:
        for arch in (f"sm_{number}", f"sm_{number}a", f"sm_{number}f"):
            assert (verdict_form.arch_problem(arch) is None) == (ARCH_RE.fullmatch(arch) is not None), arch
    for bad in ("SM_90A", " sm_90a", "sm_90a ", "sm_\uff190a", "sm90a", "sm_90A", "sm_90a\n", "sm_٩0a"):
        assert verdict_form.arch_problem(bad) is not None and arch_problem(bad) is not None, bad


def test_a_malformed_verdict_a_trusted_key_signed_leaves_its_digest_unverified() -> None:
    """The newest good verdict and a malformed one for the same digest: the malformed one cannot be placed
    (cosign's policy fails on it too), so no arch of that digest is verified; one for another digest is only
    ignored; one no trusted key signed is only ignored."""
    good = signed(case("PASSED").payload("r", DIGEST))
    bad = case("arch SM_90A").payload("r", DIGEST)
    judged = verdicts.judge([good, signed(bad)], DIGEST, [KEY.public], [ARCH])
    assert not judged.verified and "so no arch of this digest is verified" in judged.archs[0].detail
    elsewhere = signed(case("arch SM_90A").payload("r", "sha256:" + "e" * 64))
    stranger = dsse.sign(bad, dsse.IN_TOTO, keys.SigningKey("stranger", keys.generate()))
    judged = verdicts.judge([good, elsewhere, stranger], DIGEST, [KEY.public], [ARCH])
    assert judged.verified and len(judged.ignored) == 2


def test_an_unreadable_envelope_is_counted_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """cosign reads `Payload` as `payload` and takes the last: an envelope with both is refused, never read one
    way here and another way by cosign; so is one nested deeper than any envelope."""
    good = signed(case("PASSED").payload("r", DIGEST))
    two_faced = json.dumps(good)[:-1] + f', "Payload": "{good["payload"]}"}}'
    lines = [two_faced, "[" * 100000, json.dumps(good)]
    monkeypatch.setattr(cosign, "_run", lambda command, ref, env, log_file: (_written(command, lines), 1.0))
    found = cosign.download("r.example/sglang@" + DIGEST)
    assert isinstance(found[0], dsse.Unreadable) and "differ only in case" in found[0].reason
    assert isinstance(found[1], dsse.Unreadable) and "nested deeper" in found[1].reason
    judged = verdicts.judge(found, DIGEST, [KEY.public], [ARCH])
    assert judged.verified and judged.ignored[0].startswith("attestation 1: the envelope is not read")


def _written(command: list[str], lines: list[str]) -> object:
    Path(command[command.index("--output-file") + 1]).write_text("\n".join(lines) + "\n")
    return type("Done", (), {"ok": True, "output": ""})()


def test_a_carried_verdicts_file_is_read_strictly(tmp_path: Path) -> None:
    archive = tmp_path / "c.oci.tar"
    archive.write_bytes(b"")
    carried.sidecar(archive).write_text('{"schema": "x", "attestations": [{"payload": "a", "PAYLOAD": "b"}]}')
    with pytest.raises(Exception, match="differ only in case"):
        carried.read(archive)


def test_a_record_that_reads_two_ways_is_never_sealed_nor_trusted(tmp_path: Path) -> None:
    """The code under test writes the evidence: keys equal but for case there leave the record unsealed, and a
    seal made over such a payload by hand vouches for nothing."""
    stage = StageResult(name="facts", status=Status.PASSED, evidence={"warnings": [], "Warnings": ["x"]})
    cell = finish(make_cell("verified"), stages=[stage, *cpu_passed()[1:], *gpu_passed()])
    recorded = seal.record(make_run(kinds=()), cell, KEY, tmp_path / "results.json")
    assert recorded.seal is None
    assert seal.record(make_run(kinds=()), make_cell("verified"), KEY, tmp_path / "results.json").seal is not None
    forced = seal.seal(cell, KEY)
    with pytest.raises(dsse.EnvelopeError, match="the keys 'Warnings' and 'warnings' differ only in case"):
        seal.signer(forced, [KEY.public])


def test_the_strict_reader_takes_the_field_names_of_what_it_reads() -> None:
    fields = frozenset({"result"})
    with pytest.raises(strictjson.Ambiguous, match="from the field 'result'"):
        strictjson.loads('{"x": {"RESULT": 1}}', fields=fields, free=frozenset())
    assert strictjson.loads('{"axes": {"RESULT": 1}}', fields=fields, free=frozenset({"axes"}))
    with pytest.raises(strictjson.Ambiguous, match="nested deeper"):
        strictjson.loads("[" * 100000 + "]" * 100000)
