"""Small locks in the project's format (header, content hash, `uv pip compile` body) for the bisection's tests."""

from __future__ import annotations

from pathlib import Path

from buildscripts.lock.lockfile import Lockfile, sha256


def entry(name: str, version: str, *files: str) -> str:
    """One requirement as `uv pip compile --generate-hashes` writes it, a made-up hash per file."""
    hashes = " \\\n".join(f"    --hash=sha256:{sha256(version + '-' + f)}" for f in files)
    return f"{name}=={version} \\\n{hashes}\n    # via -r requirements.in\n"


def write_lock(path: Path, *entries: str) -> Path:
    header = {"layer": "sglang test", "python": "3.11", "platform": "x86_64-manylinux_2_36",
              "index": "(the host's pip index)", "inputs-sha256": sha256("inputs")}
    path.write_text(Lockfile(header=header, body="".join(entries)).render())
    return path
