"""`verify --host` against a hostile interpreter that lies about itself (verify/apart.py, verify/stagelines.py,
docs/trust.md): asked for its import path it would answer that it has none, and as the probe it prints forged,
duplicate, extra and out-of-order stage lines. Whether the record is sealed is the verifier's own finding (what
it hands on, what it imports from), so the same liar gets a sealed record where it is apart from the verifier
and none where it is not; and the record holds exactly one entry per stage asked for, the rest refused in notes.
Needs root (the identity is given by root); without it the tests are `unavailable` (a failure under CI=true).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from buildscripts import results
from buildscripts.commands import verify as verify_command
from buildscripts.errors import RunFailed
from buildscripts.trust import keys, seal
from buildscripts.verify import gpus, identity
from buildscripts.verify.stagelines import REFUSED
from buildscripts.workspace import Workspace
from tests import needs
from tests.commands import call

LIAR = rb"""#!/bin/sh
# Asked for its import path (as a verifier once did), it leaves every folder out.
case "$*" in *sys.path*) echo '[]'; exit 0;; esac
line() { printf '@@probe-result {"name": "%s", "status": "%s", "evidence": {"refused_lines": []}}\n' "$1" "$2"; }
line facts passed
line facts passed
line server passed
line flavour passed
line import failed
line import passed
line flavour passed
line gpu-visible passed
"""
ASKED = ["facts", "import", "flavour"]


@pytest.fixture
def liar(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if not identity.is_root():
        needs.unavailable("root", "host mode gives the code under test an identity of its own only as root")
    monkeypatch.setattr(gpus, "discover", lambda info: gpus.Discovery(problem="no GPU here"))
    python = open_tmp / "env" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_bytes(LIAR)
    for folder in (open_tmp / "env", python.parent):
        folder.chmod(0o755)
    python.chmod(0o755)
    return python


def run(python: Path, root: Path, secret: keys.SigningKey, **env: str) -> dict[str, Any]:
    out = root / "results.json"
    given = {**os.environ, keys.KEY_ENV: keys.private_pem(secret.private).decode(), "PYTHONPATH": "", **env}
    given.pop(keys.KEY_FILE_ENV, None)
    with pytest.raises(RunFailed):   # import failed, by its first line
        call(verify_command, ["--host", "--python", str(python), "--out", str(out), "--stages", ",".join(ASKED),
                              "--stage-timeout", "30"], Workspace.at(runs=root / "runs"), given)
    cell: dict[str, Any] = json.loads(out.read_text())["cells"][0]
    return cell


def test_one_entry_per_stage_asked_and_a_seal_where_it_is_apart(liar: Path, open_tmp: Path) -> None:
    secret = keys.SigningKey("ci", keys.generate())
    cell = run(liar, open_tmp, secret)
    stages = cell["stages"]
    assert [(s["name"], s["status"]) for s in stages] == [("facts", "passed"), ("import", "failed"),
                                                          ("flavour", "passed")]
    refused = {s["name"]: s["evidence"].get(REFUSED, []) for s in stages}
    assert len(refused["facts"]) == 3 and "a second one" in refused["facts"][0]
    assert "did not ask for" in refused["facts"][1] and "out of the order asked" in refused["facts"][2]
    assert len(refused["import"]) == 1 and "'passed'" in refused["import"][0]
    assert len(refused["flavour"]) == 1 and "'gpu-visible'" in refused["flavour"][0]
    assert all(s["where"] == "host (cpu)" for s in stages)
    record = results.load(open_tmp / "results.json").cells[0]
    assert seal.signer(record, [secret.public]).keyid == secret.public.keyid   # apart: the verifier's finding
    assert not any(note.startswith("not sealed") for note in cell["notes"])


@pytest.mark.parametrize("how", ["handed", "imported"])
def test_a_shared_folder_leaves_the_record_unsealed_whatever_the_interpreter_says(
        liar: Path, open_tmp: Path, how: str) -> None:
    """`handed`: a PYTHONPATH entry the verifier imports from too; `imported`: the verifier imports from a folder
    of the environment under test. The interpreter would deny both."""
    shared = open_tmp / "shared" if how == "handed" else open_tmp / "env" / "lib" / "site-packages"
    shared.mkdir(parents=True)
    sys.path.append(str(shared))
    try:
        cell = run(liar, open_tmp, keys.SigningKey("ci", keys.generate()),
                   **({"PYTHONPATH": str(shared)} if how == "handed" else {}))
    finally:
        sys.path.remove(str(shared))
    assert cell["seal"] is None and [s["name"] for s in cell["stages"]] == ASKED
    why = next(note for note in cell["notes"] if note.startswith("not sealed"))
    assert "imports from folders of the environment under test" in why and str(shared) in why
