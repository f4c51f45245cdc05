"""Host mode against code under test that goes for the keys (verify/identity.py, docs/trust.md).

A real verifier process (`python -m buildscripts verify --host`) is started with the CI secret in its initial
environment and a machine key on disk, and handed a hostile "interpreter": a script that, instead of running
the probe, reads every /proc/*/environ it can, the key folder and the verifier's memory, writes what it found
where it could read it later, and leaves a process behind that waits for the signer. What it got is looked at
after the run: no key material, no process of its identity left, and a record sealed by the verifier's key.
Needs root (the identity is given by root); without it the test is `unavailable` (a failure under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from buildscripts import results
from buildscripts.trust import keys, seal
from buildscripts.verify import identity, procs
from tests import needs

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = r"""#!/bin/sh
# The code under test: instead of the probe, it goes for the verifier's keys.
loot=$HOME/loot
{
  echo "uid $(id -u)"
  for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null | grep -a 'SGLANG_IMAGES_SIGNING' ; done
  cat "$KEYS"/* 2>&1
  ls -la "$KEYS" 2>&1
  cat /proc/$PPID/mem 2>&1 | head -c 64
  grep -a -h 'PRIVATE KEY' /proc/[0-9]*/environ 2>/dev/null
  env
} > "$loot" 2>&1
# a process left behind for later: it waits for the signer, then tries again
(sleep 600; cat "$KEYS"/* > "$loot.later" 2>&1) &
echo "{}"
exit 1
"""


def test_host_mode_code_under_test_reaches_no_key(open_tmp: Path) -> None:
    if not identity.is_root():
        needs.unavailable("root", "host mode gives the code under test an identity of its own only as root")
    secret = keys.SigningKey("ci", keys.generate())
    key_dir = open_tmp / "keys"
    key_dir.mkdir(mode=0o700)
    machine = keys.signing_key({keys.KEY_DIR_ENV: str(key_dir)})   # this machine's key, on disk, 0600
    hostile = open_tmp / "python3"
    hostile.write_text(HOSTILE)
    hostile.chmod(0o755)
    out = open_tmp / "runs" / "r" / "results.json"
    env = {**os.environ, keys.KEY_ENV: keys.private_pem(secret.private).decode(), keys.KEY_DIR_ENV: str(key_dir),
           "KEYS": str(key_dir), "PYTHONPATH": ""}
    env.pop(keys.KEY_FILE_ENV, None)
    argv = ["--host", "--python", str(hostile), "--run-id", "r", "--stages", "facts,import", "--stage-timeout", "20"]
    verifier = ("import os, sys; from pathlib import Path; from buildscripts.commands import verify; "
                "from buildscripts.workspace import Workspace; "
                "verify.run(verify.parse(sys.argv[2:], Workspace.at(runs=Path(sys.argv[1])), dict(os.environ)))")
    done = subprocess.run([sys.executable, "-c", verifier, str(open_tmp / "runs"), *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    home = out.parent / "host" / "work" / "home"
    assert (home / "loot").exists(), done.stdout + done.stderr
    loot = (home / "loot").read_text(errors="replace")
    assert loot.startswith("uid ") and "uid 0" not in loot, loot            # it ran, not as root
    pem = keys.private_pem(secret.private).decode()
    body = "".join(pem.splitlines()[1:-1])[:40]
    machine_body = "".join(keys.private_pem(machine.private).decode().splitlines()[1:-1])[:40]
    flat = loot.replace("\n", "")
    assert "PRIVATE KEY" not in loot and body not in flat and machine_body not in flat, loot
    assert keys.KEY_ENV not in loot, loot
    assert not (home / "loot.later").exists()
    uid = int(loot.split()[1])
    assert uid in identity.UID_RANGE and procs.processes_of(uid, uid) == []   # the process it left was killed
    cell = results.load(out).cells[0]
    assert seal.signer(cell, [secret.public]).keyid == secret.public.keyid, done.stderr
    assert json.loads(seal.canonical(cell))["matrix_digest"]   # the matrix it was judged with is sealed too
