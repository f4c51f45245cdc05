"""The probe's own files, as every runner hands them to the code under test: its .py files and nothing else.

A container and an LXC container get them as a tar (container.probe_archive); a run on this machine gets a copy in
the run's folder, owned by the verifier. Never the folder the verifier imports from: installed from the wheel, that
is a site-packages holding the verifier's own dependencies, which the code under test has no business importing,
and it may lie where the identity the code under test runs as cannot pass (a pipx install under root's 0700 home).
"""

from __future__ import annotations

import shutil
from pathlib import Path

PROBE_SOURCE = Path(__file__).resolve().parent.parent / "probe"
PACKAGE = "probe"   # the name the probe runs under everywhere: `python -m probe`


def copy_to(folder: Path) -> Path:
    """A fresh copy of the probe package at FOLDER/probe, readable by all, writable by its owner only; FOLDER
    (to put on the import path)."""
    target = folder / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True, mode=0o755)
    folder.chmod(0o755)
    target.chmod(0o755)
    for path in sorted(PROBE_SOURCE.glob("*.py")):
        copied = target / path.name
        shutil.copyfile(path, copied)
        copied.chmod(0o644)
    return folder
