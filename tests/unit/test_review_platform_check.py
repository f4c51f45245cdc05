"""An attack a review of "one good tag for both platforms" found open, kept as a regression, without processes:
what must hold (it failed on ca25f32) (see tests/integration/test_review_platform_tags.py for the registry-level ones).

Run: PYTHONPATH=. python -m pytest -q tests/unit/test_review_platform_check.py
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from buildscripts.registry import manifests
from buildscripts.trust import cosign, sources, verdicts

DIGEST = "sha256:" + "d" * 64
MANIFEST = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64,
                       "size": 2}, "layers": []}


def test_check_platform_refuses_a_single_manifest_whose_config_names_no_platform(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`check REPO@DIGEST --platform linux/arm64` of a single manifest: the commit reads its platform from its
    config, so that an amd64 image is no answer for arm64. A config that names no os/architecture gives None,
    and `choose` then takes the manifest for ANY asked platform: a digest verified on an amd64 GPU passes
    `--platform linux/arm64`. Nothing shows it is arm64 (containerd refuses such a manifest for a platform it
    cannot match), so it must not be verified for a platform asked."""
    monkeypatch.setattr(manifests, "lookup", lambda ref, env, log=None: manifests.Manifest(ref, DIGEST, MANIFEST))
    monkeypatch.setattr(manifests, "raw", lambda ref, env, config=False, log=None:
                        json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode() if config
                        else json.dumps(MANIFEST).encode())
    monkeypatch.setattr(cosign, "download", lambda ref, env, log_file=None: [])
    [source] = sources.sources(f"127.0.0.1:5000/r@{DIGEST}", {})
    assert source.platform is None
    passed: list[tuple[Any, verdicts.Judgement]] = [
        (source, verdicts.Judgement(DIGEST, (verdicts.ArchFinding("sm_100a", True, "PASSED on sm_100a", ()),), ()))]
    assert sources.summary("r@x", passed)[0]                       # without --platform: as it is
    verified, line = sources.summary("r@x", passed, "linux/arm64")
    assert not verified, f"an image naming no platform passed --platform linux/arm64: {line}"
