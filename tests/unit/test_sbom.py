"""The SBOM of an image: its inventory read from a fake file system (attest/scan.py, as it reads an image), the
CycloneDX document the library writes from it with the pip cell's locks, and what `check --sbom` reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buildscripts.attest import inventory, sbom
from buildscripts.errors import EngineError
from buildscripts.publish import described_view
from tests.sbom_tree import KEY, LOCKS, PIP_CELL, make_tree, pinned

DIGEST = "sha256:" + "d" * 64


def made(root: Path) -> dict[str, Any]:
    subject = sbom.Subject(repository="registry.example/sglang", digest=DIGEST, cell_id=PIP_CELL, apt=("g++",),
                           pip=("cuda-toolkit[nvcc]==13.0.2",))
    document = json.loads(sbom.to_json(sbom.bom(inventory.from_tree(root), subject, LOCKS)))
    assert isinstance(document, dict)
    return document


def test_the_pip_cells_sbom_names_its_key_packages_with_the_versions_and_hashes_of_its_lock(tmp_path: Path) -> None:
    document = made(make_tree(tmp_path))
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    listed = {c["name"]: c for c in document["components"]}
    pins = pinned()
    for name in KEY:
        component = listed[name]
        assert component["version"] == pins[name].version
        assert sorted(f"sha256:{h['content']}" for h in component["hashes"]) == sorted(pins[name].hashes)
        assert pins[name].hashes, f"{name}: the lock lists no hash"
        assert {"name": "sglang-images:lock-match", "value": "true"} in component["properties"]
    assert listed["nvidia-cuda-nvcc"]["purl"].startswith("pkg:pypi/nvidia-cuda-nvcc@")
    assert {"name": "sglang-images:kind", "value": "cuda-toolkit"} in listed["nvidia-cuda-nvcc"]["properties"]
    assert listed["libstdc++6"]["purl"] == "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14?arch=amd64"
    assert "gone" not in listed and "broken" not in listed and "not me" not in listed
    assert document["metadata"]["component"]["version"] == DIGEST


def test_an_installed_version_other_than_the_locks_carries_no_hash_and_says_so(tmp_path: Path) -> None:
    document = made(make_tree(tmp_path, versions={"torch": "2.10.0"}))
    torch = next(c for c in document["components"] if c["name"] == "torch")
    assert torch["version"] == "2.10.0" and "hashes" not in torch
    assert {"name": "sglang-images:lock-match", "value": "false"} in torch["properties"]
    row = next(r for r in described_view.key_packages(document) if r["name"] == "torch")
    assert "locked 2.11.0" in row["lock"]


def test_check_counts_each_kind_and_lists_the_key_packages(tmp_path: Path) -> None:
    document = made(make_tree(tmp_path))
    counts = described_view.counts(document)
    assert counts == {"os": 1, "deb": 2, "python": 5, "cuda-toolkit": 1, "kernel-cache": 1}
    rows = {r["name"]: r for r in described_view.key_packages(document)}
    assert set(rows) == {"torch", "sglang", "sglang-kernel", "flashinfer-python", "nvidia-cuda-nvcc", "libstdc++6"}
    assert rows["sglang"]["version"] == pinned()["sglang"].version and "sha256" in rows["sglang"]["lock"]
    cache = next(c for c in document["components"] if c["name"] == "rope")
    assert {"name": "sglang-images:archs", "value": "sm_90a sm_100a"} in cache["properties"]


def test_an_inventory_that_is_not_the_scanners_is_refused_with_where() -> None:
    with pytest.raises(EngineError, match="the inventory of IMG cannot be read"):
        inventory.read('{"debian": [], "debian": []}', "IMG")
    with pytest.raises(EngineError, match="cannot be read"):
        inventory.read('{"debian": [{"name": 1}], "python": [], "os": {}, "toolkit_lock": false}', "IMG")
