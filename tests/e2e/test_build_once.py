"""Build once, verify by digest, promote the tested digest, with the real 0.5.16 pip cell and real parts:

- engine A, this machine's engine, builds the cell (`nox -s build`'s code path with `--stage`) and pushes it
  to a staging repository on a loopback registry; the digest the results record is the registry's;
- the verify jobs of that build are the matrix's jobs of the cell with that digest;
- engine B, a wiped throw-away Docker 26 engine (a fresh GPU runner: no image, no cache), pulls the digest
  and verifies it (`verify --pull REPO@sha256:…`): the CPU stages for real;
- the GPU jobs' records (sm_100, sm_120) are engine B's record with GPU stages from a signed fixture, only
  because no GPU run is possible on this machine: their CPU stages, subject, image id and seal are real;
- promotion points each good tag at the tested digest, which `skopeo inspect` of every tag gives back.

Holds ~15 GB of disk while it runs (the registry's copy and engine B's), all removed at the end: it reserves
that room first (tests/disk_room.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from buildscripts import matrix, results
from buildscripts.results import Verdict
from buildscripts.trust import verdicts
from tests import needs, second_engine
from tests.digest_records import PIP_CELL, arch_runners_matrix, gpu_job, save
from tests.disk_room import disk_room
from tests.registry_server import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
NEEDS_BYTES = 15 * 10**9
GOOD = ["0.5.16-torch2.11.0-cu130-pip-verified-sm100", "0.5.16-torch2.11.0-cu130-pip-verified-sm120",
        "0.5.16-torch2.11.0-cu130-pip"]


def buildscripts(*argv: str, env: dict[str, str] | None = None, timeout: int = 3600) -> str:
    done = subprocess.run([sys.executable, "-m", "buildscripts", *argv], cwd=ROOT, env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv[0]} failed:\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def skopeo_digest(ref: str) -> str:
    done = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{ref}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_one_build_verified_by_digest_and_its_tested_digest_promoted(docker_engine: None, tmp_path: Path) -> None:
    second_engine.require()
    needs.tool("skopeo")
    needs.tool("cosign")
    # The registry and engine B keep their data under tmp_path; engine A (pushing what it holds) writes little.
    with disk_room(NEEDS_BYTES, "a registry's and a second engine's copy of a real cell", [tmp_path]):
        build_verify_promote(tmp_path)


def build_verify_promote(tmp_path: Path) -> None:
    server = RegistryServer(tmp_path / "registry")
    server.folder.mkdir()
    server.start()
    try:
        staging = f"{server.url}/sglang-images-staging"
        collected = tmp_path / "collected"
        # 1. Engine A builds once (its layers are cached here) and stages what passed its CPU stages.
        buildscripts("build", "--only", PIP_CELL, "--stage", staging, "--runs", str(tmp_path / "runs"),
                     "--run-id", "build", "--keep-superseded", "--cache-keep", "none")
        built = results.load(tmp_path / "runs" / "build" / "results.json").cells[0]
        assert built.verdict is Verdict.CPU_CHECKED and built.image.repository == staging
        candidate = str(built.image.ref).rsplit(":", 1)[1]
        assert skopeo_digest(f"{staging}:{candidate}") == built.image.digest
        shutil.copytree(tmp_path / "runs" / "build", collected / "build")
        path = arch_runners_matrix(tmp_path / "project")
        jobs = json.loads(buildscripts("matrix", "--matrix", str(path), "--github", "--staged",
                                       str(collected / "build" / "results.json")))["include"]
        assert [(j["cell"], j["arch"], j["image"]) for j in jobs] == [
            (PIP_CELL, "sm_100a", built.image.subject), (PIP_CELL, "sm_120a", built.image.subject)]
        # 2. Engine B, a fresh runner, pulls the digest and verifies it.
        with second_engine.second_engine(tmp_path / "engine-b") as engine:
            engine.wipe()
            assert engine.client().images.list() == []
            out = collected / "verify-cpu" / "results.json"
            buildscripts("verify", "--pull", jobs[0]["image"], "--run-id", "verify-cpu", "--out", str(out),
                         env=engine.env)
            pulled = results.load(out).cells[0]
            assert [i.id for i in engine.client().images.list()] == [pulled.image.id]
        assert (pulled.cell_id, pulled.verdict, pulled.image.subject) == (PIP_CELL, Verdict.CPU_CHECKED,
                                                                          built.image.subject)
        assert {s.name: s.status.value for s in pulled.stages if s.name in results.CPU_STAGES} == \
            dict.fromkeys(results.CPU_STAGES, "passed")
        # 3. The GPU jobs: engine B's record with GPU stages from a signed fixture (no GPU here).
        loaded = matrix.load(path)
        for arch in ("sm_100", "sm_120"):
            record = gpu_job(pulled, arch)
            job = save(record, collected / f"verify-{arch}" / "results.json", loaded)
            verdicts.sign_verdicts(record, job.parent, image=str(record.image.subject), matrix=path,
                                   probe="0" * 64, env=dict(os.environ))
        # 4. One promotion: every good tag on the tested digest.
        env = {**os.environ, "SGLANG_IMAGES_LOCK_DIR": str(tmp_path / "locks")}
        buildscripts("promote", "--matrix", str(path), "--registry", server.url,
                     "--results", str(collected / "*" / "results.json"), env=env)
        release = f"{server.url}/sglang-images"
        assert {tag: skopeo_digest(f"{release}:{tag}") for tag in GOOD} == dict.fromkeys(GOOD, built.image.digest)
        assert skopeo_digest(f"{release}@{built.image.digest}") == built.image.digest
    finally:
        server.stop()
        shutil.rmtree(server.folder / "data", ignore_errors=True)   # gigabytes: not left for pytest's tmp reaper
