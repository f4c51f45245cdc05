"""Where `here`'s images come from and how their verdicts are asked: a registry read through a fake client (its tag
list, a two-platform index, each platform's image config and labels), a results file read with its schema, and the
checker that asks `check`'s own library (trust/sources.py) with real signed envelopes. The end-to-end run against a
real loopback registry from a built wheel is another test's."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from buildscripts.errors import RegistryError
from buildscripts.here import candidates
from buildscripts.here.candidates import Candidate
from buildscripts.here.checked import SignedVerdicts
from buildscripts.here.choosing import fit
from buildscripts.matrix.schema import LABEL_PREFIX
from buildscripts.registry.manifests import Manifest
from buildscripts.results import ImageInfo, RunResults, Status, store
from buildscripts.trust import dsse, keys, sources, statement
from buildscripts.trust.seen import History
from buildscripts.trust.sources import Source
from buildscripts.verify.gpus import Gpu
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

REPO = "registry.example:5000/sglang-images"
INDEX = "sha256:" + "1" * 64
AMD64 = "sha256:" + "a" * 64
ARM64 = "sha256:" + "b" * 64
ATTESTATION = "sha256:" + "c" * 64
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def labels(cuda: str, archs: str, platform: str | None = None) -> dict[str, str]:
    found = {f"{LABEL_PREFIX}.cell": f"sglang0.5.23-torch2.14.1-{cuda}-pip-bookworm", f"{LABEL_PREFIX}.cuda": cuda,
             f"{LABEL_PREFIX}.sglang": "0.5.23", f"{LABEL_PREFIX}.archs": archs}
    return found | ({f"{LABEL_PREFIX}.platform": platform} if platform else {})


class FakeRegistry:
    """Tags -> an index of two platforms (and buildx's attestation entry), each platform's config with its labels."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.manifests: list[dict[str, Any]] = [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": AMD64, "size": 1,
             "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": ARM64, "size": 1,
             "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": ATTESTATION, "size": 1,
             "platform": {"os": "unknown", "architecture": "unknown"}}]
        self.index: dict[str, Any] = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": self.manifests}
        self.configs = {
            AMD64: {"os": "linux", "architecture": "amd64", "config": {
                "Labels": labels("cu130", "sm_90a sm_100a sm_120a"),
                "Env": ["PATH=/usr/bin", "SGLANG_CACHE_DIR=/var/cache/sglang"]}},
            ARM64: {"os": "linux", "architecture": "arm64", "config": {
                "Labels": labels("cu130", "sm_90a sm_100a sm_103a sm_121a", "linux/arm64"), "Env": ["PATH=/usr/bin"]}},
        }

    def tags(self, repository: str) -> list[str]:
        assert repository == REPO
        return ["0.5.23-torch2.14.1-cu130-pip", "0.5.23-torch2.14.1-cu130-pip-verified-sm121",
                "0.5.23-torch2.14.1-cu130-pip-verified-sm90", "sha256-" + "a" * 64 + ".att"]

    def manifest(self, ref: str) -> Manifest | None:
        self.read.append(ref)
        return Manifest(ref, INDEX, self.index) if ref.startswith(f"{REPO}:0.5.23") else None

    def config(self, ref: str) -> dict[str, Any]:
        self.read.append(ref)
        return self.configs[ref.split("@", 1)[1]]


def test_only_the_good_tags_of_this_arch_are_read_and_this_platforms_image_described() -> None:
    registry = FakeRegistry()
    [spark] = candidates.from_registry(registry, REPO, "linux/arm64", "sm_121")
    assert spark.tag == "0.5.23-torch2.14.1-cu130-pip-verified-sm121" and spark.reference == f"{REPO}@{INDEX}"
    assert spark.platform_digest == ARM64 and spark.platforms == ("linux/amd64", "linux/arm64")
    assert spark.cuda == "13.0" and spark.sglang == "0.5.23" and "sm_121a" in spark.targets
    assert registry.read == [f"{REPO}:0.5.23-torch2.14.1-cu130-pip-verified-sm121", f"{REPO}@{ARM64}"]
    [h200] = candidates.from_registry(registry, REPO, "linux/amd64", "sm_90")
    assert h200.platform_digest == AMD64 and h200.targets == ("sm_90a", "sm_100a", "sm_120a")
    assert ("SGLANG_CACHE_DIR", "/var/cache/sglang") in h200.env
    assert candidates.from_registry(registry, REPO, "linux/amd64", "sm_100") == []   # no `-verified-sm100` tag


def test_an_index_without_this_platform_is_described_as_such() -> None:
    registry = FakeRegistry()
    registry.index["manifests"] = registry.manifests[:1]
    [found] = candidates.from_registry(registry, REPO, "linux/arm64", "sm_121")
    assert found.platform_digest is None and found.platforms == ("linux/amd64",) and found.targets == ()


def test_asked_tags_are_read_whatever_their_name_and_a_missing_one_is_an_error() -> None:
    registry = FakeRegistry()
    [found] = candidates.from_registry(registry, REPO, "linux/amd64", "sm_90", ["0.5.23-torch2.14.1-cu130-pip"])
    assert found.tag == "0.5.23-torch2.14.1-cu130-pip" and found.platform_digest == AMD64
    with pytest.raises(RegistryError, match=r"serves no image for .*:nothing"):
        candidates.from_registry(registry, REPO, "linux/amd64", "sm_90", ["nothing"])


def test_a_results_file_names_its_images_by_registry_digest(tmp_path: Path) -> None:
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed(),
                  image=ImageInfo(repository=REPO, digest=INDEX, platform_digest=AMD64, id="sha256:" + "e" * 64),
                  promoted={f"{REPO}:0.5.16-torch2.11.0-cu130-pip-verified-sm90": INDEX})
    unstaged = make_cell("cpu-checked")
    path = tmp_path / "results.json"
    store.save(RunResults(run_id="r", started="2026-12-01T10:00:00Z", cells=[cell, unstaged]), path)
    [found] = candidates.from_results(path)
    assert found.reference == f"{REPO}@{AMD64}" and found.platform_digest == AMD64   # the platform that ran
    assert found.tag == "0.5.16-torch2.11.0-cu130-pip-verified-sm90" and found.cuda == "13.0"
    assert found.targets == tuple(cell.targets) and "unsigned" in found.described_by


# ---------------------------------------------------------------------------------------------- the checker


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


def envelope(key: keys.SigningKey, arch: str, digest: str) -> dict[str, Any]:
    family = arch.rstrip("af")
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA H200", family))
    document = statement.statement(cell, arch, subject=REPO, digest=digest, configuration={}, url=None,
                                   signed_at="2026-12-01T10:00:00Z")
    return dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key)


def served(monkeypatch: pytest.MonkeyPatch, envelopes: list[Any]) -> None:
    """The registry's answer for the index: its amd64 manifest, with `envelopes` attached."""
    def found(what: str, env: object) -> list[Source]:
        assert what == f"{REPO}@{INDEX}"
        return [Source(f"{what} -> linux/amd64 {AMD64}", AMD64, tuple(envelopes), "linux/amd64", INDEX)]
    monkeypatch.setattr(sources, "sources", found)


def candidate() -> Candidate:
    return Candidate(f"{REPO}:t", REPO, f"{REPO}@{INDEX}", ("linux/amd64",), AMD64, targets=("sm_90a",), cuda="13.0")


def test_the_checker_asks_checks_own_rule(monkeypatch: pytest.MonkeyPatch, key: keys.SigningKey) -> None:
    check = SignedVerdicts([key.public], {}, History.at(os.environ))
    served(monkeypatch, [envelope(key, "sm_90a", AMD64)])
    verified = check(candidate(), "sm_90a", "linux/amd64")
    assert verified.verified is True and "verified on sm_90a" in verified.said and AMD64 in verified.said
    other_arch = check(candidate(), "sm_120a", "linux/amd64")
    assert other_arch.verified is False and "no valid signed verdict for sm_120a" in other_arch.said
    assert other_arch.fix and "--trust-key" in other_arch.fix
    assert check(candidate(), "sm_90a", "linux/arm64").verified is False   # the index has no arm64 image


def test_a_verdict_of_another_key_or_digest_or_edited_counts_for_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                        key: keys.SigningKey) -> None:
    stranger = keys.SigningKey("stranger", keys.generate())
    good = envelope(key, "sm_90a", AMD64)
    payload = json.loads(base64.b64decode(good["payload"]))
    payload["predicate"]["url"] = "https://ci.example/runs/1"   # one field added after signing
    edited = {**good, "payload": base64.b64encode(json.dumps(payload).encode()).decode()}
    for envelopes in ([envelope(stranger, "sm_90a", AMD64)], [envelope(key, "sm_90a", ARM64)], [edited]):
        served(monkeypatch, envelopes)
        check = SignedVerdicts([key.public], {}, History.at(os.environ))
        assert check(candidate(), "sm_90a", "linux/amd64").verified is False


def test_with_no_key_to_check_with_nothing_is_concluded(monkeypatch: pytest.MonkeyPatch, key: keys.SigningKey) -> None:
    served(monkeypatch, [envelope(key, "sm_90a", AMD64)])
    found = SignedVerdicts([], {}, History.at(os.environ))(candidate(), "sm_90a", "linux/amd64")
    assert found.verified is None and "no public key" in found.said and found.fix and "--key" in found.fix


def test_results_stages_are_not_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A results file that says everything passed earns nothing without a signed verdict for the digest."""
    served(monkeypatch, [])
    stranger = keys.SigningKey("v", keys.generate()).public
    found = SignedVerdicts([stranger], {}, History.at(os.environ))(candidate(), "sm_90a", "linux/amd64")
    assert found.verified is False
    assert all(s.status is Status.PASSED for s in gpu_passed())   # what the record claims, for contrast


def test_an_index_readers_read_apart_is_refused_not_a_crash() -> None:
    registry = FakeRegistry()
    registry.manifests[1]["platform"] = {"os": "linux", "architecture": "aarch64"}   # an alias containerd rewrites
    [found] = candidates.from_registry(registry, REPO, "linux/arm64", "sm_121")
    assert found.refused and "read it apart" in found.refused and found.platform_digest is None
    assert fit(found, "linux/arm64", Gpu(0, "NVIDIA GB10", "", "12.1", "580.142", 0)).why_not == found.refused


def test_an_entry_that_names_no_digest_is_refused_before_anything_is_read_by_it() -> None:
    registry = FakeRegistry()
    registry.manifests[0]["digest"] = "sha256:$(reboot)"
    [found] = candidates.from_registry(registry, REPO, "linux/amd64", "sm_90")
    assert found.refused and "not a sha256 digest" in found.refused
    assert not any("reboot" in ref for ref in registry.read if "@" in ref)
