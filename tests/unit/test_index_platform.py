"""Which manifest of an index `verify REPO@sha256:…` records and checks the engine's pull against: the entry the
engine itself takes for its platform, however the index spells it, and none when two entries are that platform."""

from __future__ import annotations

import pytest

from buildscripts.registry import manifests

A, B, C = ("sha256:" + c * 64 for c in "abc")
INDEX = "application/vnd.oci.image.index.v1+json"


def _index(*entries: tuple[str, dict[str, str]]) -> manifests.Manifest:
    return manifests.Manifest("r/x@" + C, C, {"mediaType": INDEX, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1, "platform": p}
        for d, p in entries]})


def test_an_entry_is_found_as_the_engine_reads_its_platform() -> None:
    index = _index((A, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
                   (B, {"os": "linux", "architecture": "amd64"}))
    assert index.platform("linux", "amd64") == B
    assert index.platform("linux", "arm64") == A


@pytest.mark.parametrize("spelled", [{"os": "linux", "architecture": "x86_64"},
                                     {"os": "Linux", "architecture": "amd64"},
                                     {"os": "linux", "architecture": "aarch64"},
                                     {"os": "l\u0130nux", "architecture": "amd64"}])
def test_an_entry_readers_read_apart_refuses_the_index(spelled: dict[str, str]) -> None:
    """Any entry, even one of another platform than the one asked: which entry an engine picks depends on all."""
    index = _index((A, {"os": "linux", "architecture": "amd64"}), (B, spelled))
    for asked in ("amd64", "arm64", "s390x"):
        with pytest.raises(manifests.AmbiguousManifest, match=r"read apart: entry 2 .*skopeo and Podman"):
            index.platform("linux", asked)


def test_two_entries_of_one_platform_are_refused() -> None:
    index = _index((A, {"os": "linux", "architecture": "arm64"}),
                   (B, {"os": "linux", "architecture": "arm64", "variant": "v8"}))
    with pytest.raises(manifests.AmbiguousManifest, match="2 manifests for linux/arm64"):
        index.platform("linux", "arm64")


def test_attestation_manifests_and_other_platforms_are_not_taken() -> None:
    index = _index((A, {"os": "unknown", "architecture": "unknown"}), (B, {"os": "linux", "architecture": "arm64"}))
    assert index.platform("linux", "amd64") is None
