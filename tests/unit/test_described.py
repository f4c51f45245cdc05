"""The one reader of an attached SBOM or provenance (trust/described.py): what counts, what is refused and why,
and what is set aside from the verdicts."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from buildscripts.attest import signed
from buildscripts.publish import described_view
from buildscripts.report import html
from buildscripts.results import CellResult, ImageInfo
from buildscripts.trust import described, dsse, keys
from tests.attest_world import key_env

DIGEST, OTHER = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def envelope(key: keys.SigningKey, kind: str, digest: str, predicate: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps(signed.statement(kind, predicate, "registry.example/x", digest)).encode()
    return dsse.sign(payload, dsse.IN_TOTO, key)


def test_only_a_trusted_keys_attestation_for_this_digest_counts_and_each_other_says_why(tmp_path: Path) -> None:
    key, stranger = (keys.signing_key(key_env(tmp_path / n)) for n in ("ours", "theirs"))
    good = envelope(key, described.SBOM, DIGEST, {"components": []})
    edited = dict(good, payload=base64.b64encode(base64.b64decode(good["payload"]).replace(b"[]", b"[{}]")).decode())
    elsewhere = envelope(key, described.SBOM, OTHER, {"components": []})
    theirs = envelope(stranger, described.SBOM, DIGEST, {"components": []})
    found = described.find([edited, elsewhere, theirs, good], described.SBOM, DIGEST, [key.public])
    assert found.used is not None and found.used.signer == key.public
    assert len(found.refused) == 3
    assert "attestation 1: the SBOM is refused: no valid signature by a trusted key" in found.refused[0]
    assert f"it is signed for {OTHER}, not for {DIGEST}" in found.refused[1]
    assert "no valid signature" in found.refused[2]
    alone = described.find([edited], described.SBOM, DIGEST, [key.public])
    assert alone.used is None
    problem = described_view.sbom_problem([(DIGEST, alone)])
    assert problem and problem.startswith(f"no verified SBOM for {DIGEST}: attestation 1: the SBOM is refused")


def test_a_verdict_is_no_described_attestation_and_a_provenance_is_not_an_sbom(tmp_path: Path) -> None:
    key = keys.signing_key(key_env(tmp_path / "k"))
    verdict = dsse.sign(json.dumps({"_type": "https://in-toto.io/Statement/v1", "subject": [],
                                    "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
                                    "predicate": {}}).encode(), dsse.IN_TOTO, key)
    made = envelope(key, described.PROVENANCE, DIGEST, {"buildDefinition": {"externalParameters": {"cell": "c"}}})
    assert not described.is_described(verdict) and described.is_described(made)
    assert described.find([made], described.SBOM, DIGEST, [key.public]).used is None
    found = described.find([made], described.PROVENANCE, DIGEST, [key.public])
    assert found.used is not None and described_view.provenance_facts(found.used.predicate)["cell"] == "c"


def test_the_report_links_a_staged_cells_sbom_and_names_the_run_of_a_merged_one() -> None:
    image = ImageInfo(repository="registry.example/x", digest=DIGEST)
    cell = CellResult(cell_id="sglang0.5.16-torch2.11.0-cu130-pip-bookworm", image=image)
    assert 'href="../described/sglang0.5.16-torch2.11.0-cu130-pip-bookworm/sbom.json"' in html._described(cell)
    merged = cell.model_copy(update={"run_id": "gh1"})
    assert "runs/gh1/described/sglang0.5.16-torch2.11.0-cu130-pip-bookworm/" in html._described(merged)
    assert html._described(CellResult(cell_id="x")) == ""
