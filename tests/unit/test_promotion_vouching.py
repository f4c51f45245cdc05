"""Promotion takes a tag that serves another digest for an earlier promotion only when a trusted verdict
vouches for that digest as this very cell (and, for a per-arch tag, on that tag's arch): a registry writer who
points `…-verified-sm100` at another cell's verified image, or at one verified on sm_90 only, is a tamper.
(Logic only: the registry and cosign faked; tests/integration/test_promote_by_digest.py has the real ones.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from buildscripts.errors import RegistryError
from buildscripts.publish import platformtags
from buildscripts.registry import manifests
from buildscripts.trust import cosign, dsse, keys, statement, verdicts
from tests.results_factory import cpu_passed, finish, gpu_passed, kinds_matrix, make_cell

CURRENT, OURS = "sha256:" + "b" * 64, "sha256:" + "a" * 64
# cells of tests.results_factory.kinds_matrix
CELL_A, CELL_B = "sglang0.5.10-torch2.9.1-cu128-pip-bookworm", "sglang0.5.10-torch2.9.1-cu128-apt-bookworm"
TAG = "x-verified-sm100"


def _verdict(key: keys.SigningKey, arch: str, cell_id: str | None) -> dict[str, Any]:
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", arch.rstrip("af")))
    document = statement.statement(cell, arch, subject="dest", digest=CURRENT, configuration={}, url=None,
                                   signed_at="2026-12-01T10:00:00Z")
    if cell_id is None:   # an older verifier's verdict, naming no cell
        del document["predicate"]["cell"], document["predicate"]["axes"]
    else:
        document["predicate"]["cell"] = cell_id
    return dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key)


def fake_registry(monkeypatch: pytest.MonkeyPatch, served: dict[str, str], verdicts_served: list[dict[str, Any]],
                  platform: str = "linux/amd64") -> None:
    """A registry whose refs in `served` name plain manifests of `platform`, each carrying `verdicts_served`."""
    manifest = b'{"mediaType": "application/vnd.oci.image.manifest.v1+json"}'
    os, architecture = platform.split("/")

    def raw(ref: str, env: Any, *, config: bool = False, log: Any = None) -> bytes:
        return json.dumps({"os": os, "architecture": architecture}).encode() if config else manifest

    monkeypatch.setattr(manifests, "lookup", lambda ref, env, log=None: manifests.Manifest(
        ref, served[ref], json.loads(manifest)) if ref in served else None)
    monkeypatch.setattr(manifests, "raw", raw)
    monkeypatch.setattr(cosign, "download", lambda ref, env, log_file=None: verdicts_served)


def _plan(monkeypatch: pytest.MonkeyPatch, served: list[dict[str, Any]], key: keys.SigningKey,
          arch: str | None = "sm100") -> platformtags.TagPlan:
    """Promotion of CELL_A's manifest OURS to TAG, which serves CURRENT now."""
    fake_registry(monkeypatch, {f"dest:{TAG}": CURRENT, f"dest@{CURRENT}": CURRENT}, served)
    claim = platformtags.Claim(CELL_A, "linux/amd64", OURS, (TAG,), {TAG: arch} if arch else {})
    entry = platformtags.Entry("linux/amd64", OURS, platformtags.OCI_MANIFEST, 100)
    [plan] = platformtags.plan([(claim, entry)], kinds_matrix(), "dest", {}, [key.public], repair=False)
    return plan


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


def test_a_verdict_of_this_cell_on_the_tags_arch_is_an_earlier_promotion(monkeypatch: pytest.MonkeyPatch,
                                                                         key: keys.SigningKey) -> None:
    plan = _plan(monkeypatch, [_verdict(key, "sm_100a", CELL_A)], key)
    assert (plan.current, plan.target, plan.index) == (CURRENT, OURS, None)


@pytest.mark.parametrize(("arch", "cell_id", "said"), [
    ("sm_100a", CELL_B, f"passing verdicts for {CELL_B} on sm100, none for {CELL_A} on sm100"),
    ("sm_90a", CELL_A, "no valid signed verdict for sm100 (valid verdicts name sm_90a)"),
    ("sm_100a", None, f"passing verdicts for no cell (an older verifier) on sm100, none for {CELL_A}"),
])
def test_another_cells_or_another_archs_verdict_is_a_tamper(monkeypatch: pytest.MonkeyPatch, key: keys.SigningKey,
                                                            arch: str, cell_id: str | None, said: str) -> None:
    with pytest.raises(RegistryError, match="someone other than a promotion moved it") as raised:
        _plan(monkeypatch, [_verdict(key, arch, cell_id)], key)
    assert said in raised.value.message


def test_an_arch_free_tag_takes_this_cells_verdict_on_any_arch(monkeypatch: pytest.MonkeyPatch,
                                                               key: keys.SigningKey) -> None:
    assert _plan(monkeypatch, [_verdict(key, "sm_90a", CELL_A)], key, arch=None).target == OURS
    with pytest.raises(RegistryError, match=f"none for {CELL_A}"):
        _plan(monkeypatch, [_verdict(key, "sm_90a", CELL_B)], key, arch=None)


def test_a_verdict_says_the_cell_and_axes_it_was_judged_as(key: keys.SigningKey) -> None:
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"))
    document = statement.statement(cell, "sm_100a", subject="r", digest=CURRENT, configuration={}, url=None,
                                   signed_at="2026-12-01T10:00:00Z")
    read = verdicts.open_verdict(dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key), [key.public])
    assert read.cell == cell.cell_id and dict(read.axes) == cell.axes and read.why_not() is None
