"""Signed envelopes, sealed records and test-result Statements (buildscripts/trust)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from buildscripts import cli
from buildscripts.errors import ConfigError
from buildscripts.results import Status
from buildscripts.trust import dsse, keys, seal, statement
from tests.results_factory import finish, make_cell


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("test", keys.generate())


def test_envelope_round_trip_names_the_key(key: keys.SigningKey) -> None:
    env = dsse.sign(b'{"a":1}', "application/x", key)
    payload, signer = dsse.verify(env, "application/x", [key.public])
    assert payload == b'{"a":1}'
    assert signer.keyid == key.public.keyid


def test_edited_payload_other_key_and_other_type_are_refused(key: keys.SigningKey) -> None:
    env = dsse.sign(b'{"result":"FAILED"}', "application/x", key)
    forged = {**env, "payload": base64.b64encode(b'{"result":"PASSED"}').decode()}
    with pytest.raises(dsse.EnvelopeError, match="no valid signature"):
        dsse.verify(forged, "application/x", [key.public])
    other = keys.SigningKey("other", keys.generate())
    with pytest.raises(dsse.EnvelopeError, match="no valid signature"):
        dsse.verify(env, "application/x", [other.public])
    with pytest.raises(dsse.EnvelopeError, match="not 'application/y'"):
        dsse.verify(env, "application/y", [key.public])
    # a signature over another type's PAE does not verify even when the type field is rewritten
    with pytest.raises(dsse.EnvelopeError, match="no valid signature"):
        dsse.verify({**env, "payloadType": "application/y"}, "application/y", [key.public])


@pytest.mark.parametrize("junk", [None, [], {"payloadType": "application/x", "payload": "@@", "signatures": []},
                                  {"payloadType": "application/x", "payload": "", "signatures": [{"sig": "%%"}]}])
def test_malformed_envelopes_are_errors_not_crashes(key: keys.SigningKey, junk: object) -> None:
    with pytest.raises(dsse.EnvelopeError):
        dsse.verify(junk, "application/x", [key.public])


def test_sealed_record_is_trusted_until_edited(key: keys.SigningKey) -> None:
    cell = seal.seal(make_cell("cpu-checked", image_id="sha256:" + "a" * 64), key)
    assert seal.signer(cell, [key.public]).keyid == key.public.keyid
    # what tagging and promotion add later does not break the seal
    later = cell.model_copy(update={"tags": ["r:t"], "promoted": {"x/r:t": "sha256:" + "b" * 64}})
    assert seal.signer(later, [key.public])
    # a passed GPU stage written in afterwards does
    stages = [s.model_copy(update={"status": Status.PASSED, "gpu": "NVIDIA B200", "arch": "sm_100"})
              if s.status is Status.SKIPPED else s for s in cell.stages]
    forged = finish(cell, stages=stages)
    with pytest.raises(dsse.EnvelopeError, match=r"changed after it was sealed.*stages"):
        seal.signer(forged, [key.public])


def test_unsealed_and_foreign_records_are_refused(key: keys.SigningKey) -> None:
    cell = make_cell("verified", image_id="sha256:" + "a" * 64)
    with pytest.raises(dsse.EnvelopeError, match="not sealed"):
        seal.signer(cell, [key.public])
    other = keys.SigningKey("other", keys.generate())
    with pytest.raises(dsse.EnvelopeError, match="seal is not valid"):
        seal.signer(seal.seal(cell, other), [key.public])


def test_seal_survives_the_results_file(key: keys.SigningKey, tmp_path: Path) -> None:
    from buildscripts.results import RunResults, load, save

    cell = seal.seal(make_cell("failed", image_id="sha256:" + "c" * 64), key)
    save(RunResults(run_id="r", started="now", cells=[cell]), tmp_path / "results.json")
    assert seal.signer(load(tmp_path / "results.json").cells[0], [key.public])


def test_local_key_is_made_once_owner_only(tmp_path: Path) -> None:
    env = {keys.KEY_DIR_ENV: str(tmp_path / "k")}
    assert keys.trusted(tmp_path, env) == []          # no key yet: nothing trusted, nothing made
    first = keys.signing_key(env)
    mode = (tmp_path / "k" / keys.LOCAL_KEY).stat().st_mode
    assert stat.S_IMODE(mode) == 0o600
    assert keys.signing_key(env).public.keyid == first.public.keyid
    assert [k.keyid for k in keys.trusted(tmp_path, env)] == [first.public.keyid]


def test_configured_key_and_project_keys(tmp_path: Path, key: keys.SigningKey) -> None:
    env = {keys.KEY_ENV: keys.private_pem(key.private).decode(), keys.KEY_DIR_ENV: str(tmp_path / "none")}
    assert keys.signing_key(env).public.keyid == key.public.keyid
    project = keys.SigningKey("p", keys.generate())
    (tmp_path / keys.PROJECT_KEYS).mkdir()
    (tmp_path / keys.PROJECT_KEYS / "ci.pub").write_bytes(project.public.pem)
    found = {k.keyid for k in keys.trusted(tmp_path, env)}
    assert found == {key.public.keyid, project.public.keyid}
    assert not (tmp_path / "none").exists()            # a configured key never makes a local one


def test_bad_keys_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        keys.signing_key({keys.KEY_ENV: "not a key"})
    (tmp_path / "x.pub").write_text("junk")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        keys.read_public(tmp_path / "x.pub")


def test_keygen_writes_a_pair_and_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["keygen", str(tmp_path / "ci")]) == 0
    private = keys.parse_private((tmp_path / "ci" / "signing-key.pem").read_bytes(), "pem")
    public = keys.read_public(tmp_path / "ci" / "signing-key.pub")
    assert private.public.keyid == public.keyid
    assert stat.S_IMODE((tmp_path / "ci" / "signing-key.pem").stat().st_mode) == 0o600
    assert cli.main(["keygen", str(tmp_path / "ci")]) == 2
    assert "never overwritten" in capsys.readouterr().err


def test_statement_per_arch() -> None:
    cell = make_cell("verified", image_id="sha256:" + "a" * 64)   # GPU stages passed on an H200 (sm_90)
    doc = statement.statement(cell, "sm_90a", subject="reg/sglang", digest="sha256:" + "d" * 64,
                              configuration={"matrix.yaml": "sha256:" + "e" * 64}, url="https://ci/run/1",
                              signed_at="2026-12-01T21:05:09Z", index="sha256:" + "f" * 64)
    assert doc["subject"] == [{"name": "reg/sglang", "digest": {"sha256": "d" * 64}}]   # the platform that ran
    assert doc["predicateType"] == statement.TEST_RESULT
    predicate = doc["predicate"]
    assert predicate["result"] == "PASSED" and predicate["arch"] == "sm_90a"
    assert predicate["signedAt"] == "2026-12-01T21:05:09Z" and predicate["imageIndex"] == "sha256:" + "f" * 64
    assert "server@sm_90a" in predicate["passedTests"] and "import@cpu" in predicate["passedTests"]
    assert predicate["configuration"] == [{"name": "matrix.yaml", "digest": {"sha256": "e" * 64}}]
    # on an arch where no GPU stage ran, the verdict is not PASSED
    other = statement.statement(cell, "sm_100a", subject="reg/sglang", digest="sha256:" + "d" * 64,
                                configuration={}, url=None, signed_at="2026-12-01T21:05:09Z")
    assert other["predicate"]["result"] == "FAILED"
    assert "url" not in other["predicate"] and "imageIndex" not in other["predicate"]
    json.dumps(doc)
