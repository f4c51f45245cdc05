"""A fake image file system for the SBOM collector (attest/scan.py): the pip cell's key packages at the versions
its locks pin, as the image's own files say them (dpkg status, METADATA of each dist-info, the warm report)."""

from __future__ import annotations

import json
from pathlib import Path

from buildscripts.attest import sbom
from buildscripts.lock.lockfile import Pin

ROOT = Path(__file__).resolve().parents[1]
PIP_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
LOCKS = (("lanes/torch2.11.0-cu130-bookworm.txt", ROOT / "lockfiles/lanes/torch2.11.0-cu130-bookworm.txt"),
         ("sglang/sglang0.5.16-torch2.11.0-cu130-bookworm.txt",
          ROOT / "lockfiles/sglang/sglang0.5.16-torch2.11.0-cu130-bookworm.txt"),
         (f"toolkits/{PIP_CELL}.txt", ROOT / f"lockfiles/toolkits/{PIP_CELL}.txt"))
KEY = ("torch", "sglang", "sglang-kernel", "flashinfer-python", "nvidia-cuda-nvcc")
SITE = "opt/venv/lib/python3.11/site-packages"


def pinned() -> dict[str, Pin]:
    return {name: pin for name, (_, pin) in sbom.lock_pins(LOCKS).items()}


def make_tree(root: Path, *, versions: dict[str, str] | None = None) -> Path:
    """The tree at `root`: the key packages at their locked versions (or `versions`), a Debian package or two, a
    distribution of Debian's Python, a dist-info whose METADATA names nothing (skipped), the warm report."""
    pins = pinned()
    chosen = {name: pins[name].version for name in KEY} | (versions or {})
    for name, version in chosen.items():
        info = root / SITE / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nName: not me\n")
    (root / SITE / "broken-1.0.dist-info").mkdir()
    debian = root / "usr/lib/python3/dist-packages/six-1.16.0.dist-info"
    debian.mkdir(parents=True)
    (debian / "METADATA").write_text("Name: six\nVersion: 1.16.0\n")
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text("Package: libstdc++6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.2.0-14\n"
                      "Description: GNU Standard C++ Library v3\n continued line: not a field\n\n"
                      "Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n\n"
                      "Package: g++\nStatus: install ok installed\nArchitecture: amd64\nVersion: 4:12.2.0-3\n")
    (root / "etc/sglang-images").mkdir(parents=True)
    rope = {"kind": "sglang-jit", "module": "rope", "ok": True, "profile": "default"}
    failed = {"kind": "sglang-jit", "module": "failed", "ok": False, "profile": "default"}
    (root / "etc/sglang-images/warm.json").write_text(json.dumps({
        "archs": ["sm_90a", "sm_100a"], "baked": [{"arch": "sm_90a", "built": [rope, failed]},
                                                  {"arch": "sm_100a", "built": [rope]}]}))
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    return root
