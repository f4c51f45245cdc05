"""`verify REPO@sha256:… --cpu-record RESULTS` through the real command: a registry on 127.0.0.1, the pull by digest,
the probe in a container of the pulled image, the record sealed. The build runner's record is what `build --stage`
writes for the pip cell (tests/unit/test_carry.py `staged`: sealed with this session's verifier key, which the
command trusts as its own) of the digest pushed here. Asked for `facts` and `gpu-visible`, the command carries
`facts` from that record and runs only `gpu-visible` in the image (skipped: no GPU here); given a record of another
digest, it says why it is not used, notes it in the record and runs `facts` itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from contextlib import suppress
from pathlib import Path

import docker
import pytest

from buildscripts import results
from buildscripts.trust import keys
from tests import needs
from tests.integration.tinyimages import python_image
from tests.registry_server import RegistryServer
from tests.unit.test_carry import staged

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
PIP_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


def verify(ref: str, record: Path, out: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "buildscripts", "verify", ref, "--cell-id", PIP_CELL,
                           "--stages", "facts,gpu-visible", "--cpu-record", str(record), "--out", str(out),
                           "--run-id", run_id], cwd=ROOT, env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)


def probe_said(run_id: str) -> list[str]:
    log = (ROOT / "runs" / run_id / PIP_CELL / "probe.log").read_text()
    return [json.loads(line.split(" ", 1)[1])["name"] for line in log.splitlines()
            if line.startswith("@@probe-result ")]


def test_verify_by_digest_carries_the_cpu_stages_of_that_digest_only(
        client: docker.DockerClient, server: RegistryServer, tmp_path: Path) -> None:
    needs.tool("skopeo")
    base = python_image(client)
    repository = f"{server.url}/sglang-images-staging"
    client.api.tag(base, repository, "carried")
    try:
        client.images.push(repository, tag="carried")
    finally:
        client.images.remove(f"{repository}:carried")
    digest = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                             f"docker://{repository}:carried"], capture_output=True, text=True,
                            check=True).stdout.strip()
    own = keys.signing_key(dict(os.environ))   # this session's verifier key: the command trusts its own
    ref, run_ids = f"{repository}@{digest}", [f"carried-{uuid.uuid4().hex[:8]}", f"refused-{uuid.uuid4().hex[:8]}"]
    try:
        out = tmp_path / "carried" / "results.json"
        done = verify(ref, staged(tmp_path, key=own, digest=digest), out, run_ids[0])
        assert done.returncode == 0, done.stdout + done.stderr
        assert "CPU stages carried from gh1.1-build" in done.stdout + done.stderr
        cell = results.load(out).cells[0]
        facts, visible = cell.stage("facts"), cell.stage("gpu-visible")
        assert facts is not None and facts.carried_from and facts.sealed_by == own.public.keyid
        assert visible is not None and not visible.carried_from and visible.status is results.Status.SKIPPED
        assert cell.carried is not None and cell.carried.digest == digest and cell.carried.stages == ["facts"]
        assert probe_said(run_ids[0]) == ["gpu-visible"]   # the image was asked for the GPU stage alone
        assert cell.seal and not cell.notes

        other = tmp_path / "other" / "results.json"
        done = verify(ref, staged(tmp_path, key=own, digest="sha256:" + "b" * 64, name="other-build"), other,
                      run_ids[1])
        said = done.stdout + done.stderr
        assert done.returncode == 0, said
        assert "--cpu-record not used, the CPU stages run here: no record in" in " ".join(said.split())
        cell = results.load(other).cells[0]
        assert cell.carried is None and not any(s.carried_from for s in cell.stages)
        assert cell.notes and "--cpu-record not used" in cell.notes[0]
        assert probe_said(run_ids[1]) == ["facts", "gpu-visible"]
    finally:
        with suppress(docker.errors.NotFound):   # the reference the pull added (the base image itself stays)
            client.images.remove(ref)
        for run_id in run_ids:
            shutil.rmtree(ROOT / "runs" / run_id, ignore_errors=True)
