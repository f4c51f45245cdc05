"""Which manifest of an index `verify REPO@sha256:…` records and checks the engine's pull against: the entry the
engine itself takes for its platform, however the index spells it, and none when two entries are that platform."""

from __future__ import annotations

import pytest

from buildscripts import distribution

A, B, C = ("sha256:" + c * 64 for c in "abc")
INDEX = "application/vnd.oci.image.index.v1+json"


def _index(*entries: tuple[str, dict[str, str]]) -> distribution.Manifest:
    return distribution.Manifest("r/x@" + C, C, {"mediaType": INDEX, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1, "platform": p}
        for d, p in entries]})


@pytest.mark.parametrize("spelled", [{"os": "linux", "architecture": "x86_64"},
                                     {"os": "Linux", "architecture": "x86-64"},
                                     {"os": "linux", "architecture": "amd64"}])
def test_an_entry_is_found_as_the_engine_reads_its_platform(spelled: dict[str, str]) -> None:
    index = _index((A, {"os": "linux", "architecture": "arm64", "variant": "v8"}), (B, spelled))
    assert index.platform("linux", "amd64") == B
    assert index.platform("linux", "arm64") == A


def test_aarch64_is_arm64() -> None:
    assert _index((A, {"os": "linux", "architecture": "aarch64"})).platform("linux", "arm64") == A


def test_two_entries_of_one_platform_are_refused() -> None:
    index = _index((A, {"os": "linux", "architecture": "amd64"}), (B, {"os": "linux", "architecture": "x86_64"}))
    with pytest.raises(distribution.AmbiguousManifest, match="2 manifests for linux/amd64"):
        index.platform("linux", "amd64")


def test_attestation_manifests_and_other_platforms_are_not_taken() -> None:
    index = _index((A, {"os": "unknown", "architecture": "unknown"}), (B, {"os": "linux", "architecture": "arm64"}))
    assert index.platform("linux", "amd64") is None
