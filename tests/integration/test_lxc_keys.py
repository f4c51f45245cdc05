"""LXC mode against code under test that goes for the keys (verify/lxcrunner.py, lxc/privileged.py,
docs/trust.md), on a machine without a GPU: a real unprivileged container (tests/lxc_container.py), whose
"interpreter" is a hostile script that, instead of running the probe, reads every /proc/*/environ it can see,
the verifier's key folder, and every file that names a signing key. The verifier runs as a process of its own
with the CI secret in its initial environment and this machine's key on disk. Afterwards: no key material in
what the script found, and the record sealed (the container is unprivileged: its root is uid 100000 here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildscripts import results
from buildscripts.lxc import privileged
from buildscripts.lxc.target import Target
from buildscripts.trust import keys, seal
from tests import needs
from tests.lxc_container import unprivileged

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = r"""#!/bin/sh
# The code under test in the container: instead of the probe, it goes for the verifier's keys.
{
  echo "uid $(id -u)"
  for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
  cat KEYS/* 2>&1
  grep -r -l -a 'PRIVATE KEY' /root /tmp /etc /run 2>/dev/null
  env
} > /root/loot 2>&1
echo "{}"
exit 1
"""


@pytest.fixture(autouse=True)
def _lxc() -> None:
    needs.tools("lxc-start", "lxc-attach", "lxc-info", hint="apt-get install lxc")
    if os.geteuid() != 0:
        needs.unavailable("root (LXC containers with an idmap are started by root here)", "run the tests as root")


def test_lxc_mode_code_under_test_reaches_no_key(open_tmp: Path) -> None:
    secret = keys.SigningKey("ci", keys.generate())
    key_dir = open_tmp / "keys"
    key_dir.mkdir(mode=0o700)
    machine = keys.signing_key({keys.KEY_DIR_ENV: str(key_dir)})
    with unprivileged({}, ("lxc.net.0.flags = up",)) as (name, home):
        hostile = home / "rootfs" / "root" / "python3"
        hostile.write_text(HOSTILE.replace("KEYS", str(key_dir)))   # it knows where the keys lie
        hostile.chmod(0o755)
        os.chown(hostile, 100000, 100000)
        env = {**os.environ, keys.KEY_ENV: keys.private_pem(secret.private).decode(),
               keys.KEY_DIR_ENV: str(key_dir)}
        env.pop(keys.KEY_FILE_ENV, None)
        verifier = ("import os, sys; from pathlib import Path; from buildscripts.commands import verify; "
                    "from buildscripts.workspace import Workspace; "
                    "verify.run(verify.parse(sys.argv[2:], Workspace.at(runs=Path(sys.argv[1])), dict(os.environ)))")
        done = subprocess.run([sys.executable, "-c", verifier, str(open_tmp / "runs"), "--lxc-name", name,
                               "--python", "/root/python3", "--run-id", "r", "--stages", "facts,import",
                               "--stage-timeout", "20"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        loot_file = home / "rootfs" / "root" / "loot"
        assert loot_file.exists(), done.stdout + done.stderr
        loot = loot_file.read_text(errors="replace")
    assert loot.startswith("uid 0"), loot                  # the container's root: uid 100000 on this machine
    flat = loot.replace("\n", "")
    for key in (secret, machine):
        body = "".join(keys.private_pem(key.private).decode().splitlines()[1:-1])[:40]
        assert body not in flat, loot
    assert "PRIVATE KEY" not in loot and keys.KEY_ENV not in loot, loot
    tried = next(line for line in loot.splitlines() if f"{key_dir}/*" in line)
    assert "No such file or directory" in tried                       # the verifier's folder is not there at all
    cell = next(results.load(p).cells[0] for p in (open_tmp / "runs" / "r").glob("**/results.json"))
    assert seal.signer(cell, [secret.public]).keyid == secret.public.keyid, done.stderr


def test_a_container_whose_config_clears_its_id_map_is_privileged_and_not_sealed() -> None:
    """An empty `lxc.idmap =` clears the lines before it (LXC's confile.c): the config names an idmap, the
    container runs privileged. The running container's own id map decides."""
    with unprivileged({}, ("lxc.net.0.flags = up", "lxc.idmap =")) as (name, _):
        target = Target.named(name)
        assert "privileged" in str(privileged.why_unsealed(target))
    with unprivileged({}, ("lxc.net.0.flags = up",)) as (name, _):
        assert privileged.why_unsealed(Target.named(name)) is None
