"""Build once, verify by digest, promote the tested digest, with the real 0.5.16 pip cell and real parts:

- engine A, this machine's engine, builds the cell (`nox -s build`'s code path with `--stage`) and pushes it
  to a staging repository on a loopback registry; the digest the results record is the registry's;
- the verify jobs of that build are the matrix's jobs of the cell with that digest;
- engine B, a wiped throw-away Docker 26 engine (a fresh GPU runner: no image, no cache), pulls the digest
  and verifies it (`verify --pull REPO@sha256:…`): the CPU stages for real;
- the GPU jobs' records (sm_100, sm_120) are engine B's record with GPU stages from a signed fixture, only
  because no GPU run is possible on this machine: their CPU stages, subject, image id and seal are real;
- promotion points each good tag at the tested digest, which `skopeo inspect` of every tag gives back;
- beside engine B, LXC's own `oci` template makes real LXC containers straight from the staging registry (as
  `lxc-create -t oci --url docker://…` does for a user; `nox -s export`'s archives take the template's same path
  in tests/integration/test_lxc_delivery.py), each started with the image's init and verified in place
  (`verify --lxc-name`, the container's Python):
  - the staged digest: every CPU stage passes, the JIT compiles included, so CUDA_HOME and PATH arrived. The
    environment reaches an attach shell, a login shell, an empty-environment login shell (what Proxmox leaves
    when the image's Env goes to the init only) and the init; systemd units get it through DefaultEnvironment
    (the images have no systemd: the file is checked, no unit is run);
  - the seed incident, the 0.5.16 `none` cell pushed to the same repository (its torch and SGLang layers are
    the pip cell's, which the registry holds already, so only its own small ones are compressed): inside LXC
    too it fails at import with cuda-home-missing, its expected failure.

Holds up to ~26 GB of disk while it runs (the registry's copy, engine B's, one LXC container at a time), all
removed at the end: it reserves that room first (tests/disk_room.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

from buildscripts import matrix, results
from buildscripts.attest import signed
from buildscripts.publish import described_view
from buildscripts.results import RunResults, Verdict
from buildscripts.trust import cosign, described, keys, verdicts
from tests import needs, second_engine
from tests.digest_records import PIP_CELL, arch_runners_matrix, gpu_job, save
from tests.disk_room import disk_room
from tests.lxc_container import LXC_WRITES, attach, container, verified_in
from tests.registry_server import RegistryServer, push_as_is

ROOT = Path(__file__).resolve().parents[2]
# The registry's copy (3.4 GB) and engine B's (11 GB) beside one LXC container at a time, the template's copy of
# its blobs, kept until it is made, and the root file system (3.4 + 7.4 GB for the pip cell, 3.3 + 7.2 GB for the
# seed incident's, made after the first is destroyed): 25.2 GB, and a little for the seed cell's own layers in the
# registry. Two containers side by side needed 36 GB, more than a whole-matrix build leaves free on an 80 GB disk.
NEEDS_BYTES = 26 * 10**9
CPU_STAGES = ",".join(results.CPU_STAGES)
SEED_CELL = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
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


def test_one_build_verified_by_digest_and_its_tested_digest_promoted(docker_engine: None, run: RunResults,
                                                                     tmp_path: Path) -> None:
    second_engine.require()
    needs.tools("skopeo", "cosign", "umoci", "jq", "lxc-create")
    seed = run.cell(SEED_CELL)
    assert seed is not None and seed.image.id
    # The registry and engine B keep their data under tmp_path, LXC's template and root file systems theirs where
    # LXC_WRITES says; engine A (pushing what it holds) writes little.
    with disk_room(NEEDS_BYTES, "a registry's, a second engine's and two LXC containers' copies of real cells",
                   [tmp_path, *LXC_WRITES]):
        build_verify_promote(tmp_path, seed)


def assert_described(run_dir: Path, repository: str, built: results.CellResult) -> None:
    """The build wrote the staged digest's signed SBOM and provenance beside its results, and they are attached to
    that platform manifest in `repository`: the SBOM names the cell's key packages, the provenance its locks."""
    digest = str(built.image.platform_digest or built.image.digest)
    files = signed.files(run_dir, PIP_CELL)
    assert [f.name for f in files] == ["sbom.json", "provenance.json"]
    trusted = keys.trusted(ROOT, dict(os.environ))
    attached = cosign.download(f"{repository}@{digest}", dict(os.environ))
    bom = described.find(attached, described.SBOM, digest, trusted)
    made = described.find(attached, described.PROVENANCE, digest, trusted)
    assert bom.used is not None and made.used is not None, (bom.refused, made.refused)
    rows = {r["name"]: r for r in described_view.key_packages(bom.used.predicate)}
    assert rows["torch"]["version"] == "2.11.0" and "sha256" in rows["torch"]["lock"]
    assert described_view.provenance_facts(made.used.predicate)["cell"] == PIP_CELL


def build_verify_promote(tmp_path: Path, seed: results.CellResult) -> None:
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
        assert_described(tmp_path / "runs" / "build", staging, built)
        shutil.copytree(tmp_path / "runs" / "build", collected / "build")
        path = arch_runners_matrix(tmp_path / "project")
        jobs = json.loads(buildscripts("matrix", "--matrix", str(path), "--github", "--staged",
                                       str(collected / "build" / "results.json")))["include"]
        assert [(j["cell"], j["arch"], j["image"]) for j in jobs] == [
            (PIP_CELL, "sm_100a", built.image.subject), (PIP_CELL, "sm_120a", built.image.subject)]
        seed_ref = pushed(str(seed.image.id), staging, "seed-incident")
        # 2. Engine B, a fresh runner, pulls the digest and verifies it; beside it, LXC runs the same digest, then
        #    the seed incident (one container at a time: see NEEDS_BYTES).
        home = server.insecure_home()
        with ThreadPoolExecutor(max_workers=1) as beside:
            in_containers = beside.submit(both_in_lxc, str(built.image.subject), seed_ref, home, tmp_path)
            try:
                pulled = verify_on_engine_b(jobs[0]["image"], tmp_path, collected)
            finally:   # the LXC branch's own failure is raised too (chained to engine B's, if that failed)
                (lxc_cell, seen), seed_cell = in_containers.result()
        assert_ready_in_lxc(lxc_cell, seen)
        assert_seed_incident_in_lxc(seed_cell, seed)
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
        assert_described(tmp_path / "runs" / "build", release, built)   # carried with the verdicts' attachments
    finally:
        server.stop()
        shutil.rmtree(server.folder / "data", ignore_errors=True)   # gigabytes: not left for pytest's tmp reaper


def verify_on_engine_b(image: str, tmp_path: Path, collected: Path) -> results.CellResult:
    """`verify --pull REPO@sha256:…` on a wiped second engine: its record of the pulled digest."""
    with second_engine.second_engine(tmp_path / "engine-b") as engine:
        engine.wipe()
        assert engine.client().images.list() == []
        out = collected / "verify-cpu" / "results.json"
        buildscripts("verify", "--pull", image, "--run-id", "verify-cpu", "--out", str(out), env=engine.env)
        pulled = results.load(out).cells[0]
        assert [i.id for i in engine.client().images.list()] == [pulled.image.id]
    return pulled


def pushed(image_id: str, repository: str, tag: str) -> str:
    """The local image `image_id` pushed to `repository:tag` as it is: its REPOSITORY@sha256:… there."""
    ref = f"{repository}:{tag}"
    with contextlib.closing(docker.from_env()) as client:
        digest = push_as_is(client, image_id, ref)
    assert skopeo_digest(ref) == digest
    return f"{repository}@{digest}"


def in_lxc(staged: str, home: Path, folder: Path) -> tuple[dict[str, object], dict[str, str]]:
    """The staged digest in a real LXC container, verified in place: (its results' cell, what each way into the
    container sees of the environment)."""
    folder.mkdir()
    with container(f"docker://{staged}", home=home) as name:
        cell = verified_in(name, CPU_STAGES, folder / "lxc.json")
        shown = 'echo "$CUDA_HOME $(command -v nvcc)"'
        env = {
            "attach": attach(name, "/bin/sh", "-c", shown),
            "login": attach(name, "/bin/sh", "-lc", shown),
            "empty login": attach(name, "env", "-i", "/bin/sh", "-lc", shown),
            "init": attach(name, "/bin/sh", "-c", "tr '\\0' '\\n' < /proc/1/environ | grep ^CUDA_HOME="),
            "systemd": attach(name, "cat", "/etc/systemd/system.conf.d/sglang-images.conf"),
            "shm": attach(name, "/bin/sh", "-c", "grep ' /dev/shm ' /proc/mounts"),
        }
    return cell, env


def both_in_lxc(staged: str, seed_ref: str, home: Path, tmp_path: Path) -> tuple[tuple[dict[str, object],
                                                                                     dict[str, str]],
                                                                               dict[str, object]]:
    """The staged digest in LXC, then, once that container is destroyed, the seed incident's."""
    return in_lxc(staged, home, tmp_path / "lxc"), seed_in_lxc(seed_ref, home, tmp_path / "seed")


def seed_in_lxc(seed_ref: str, home: Path, folder: Path) -> dict[str, object]:
    """The seed incident's cell in a real LXC container, verified in place: its results' cell."""
    folder.mkdir()
    with container(f"docker://{seed_ref}", home=home) as name:
        return verified_in(name, CPU_STAGES, folder / "none.json")


def assert_ready_in_lxc(cell: dict[str, object], env: dict[str, str]) -> None:
    stages = {s["name"]: s for s in cell["stages"]}  # type: ignore[attr-defined]
    for name in results.CPU_STAGES:
        assert stages[name]["status"] == "passed", (name, stages[name].get("reason"))
        assert stages[name]["where"] == "lxc (cpu)"
    assert stages["facts"]["evidence"]["env"]["CUDA_HOME"] == "/usr/local/cuda"
    assert str(cell["cell_id"]).startswith(f"{PIP_CELL}@lxc-")
    for how in ("attach", "login", "empty login"):
        assert env[how].split() == ["/usr/local/cuda", "/usr/local/cuda/bin/nvcc"], (how, env[how])
    assert env["init"].strip() == "CUDA_HOME=/usr/local/cuda"
    assert '"CUDA_HOME=/usr/local/cuda"' in env["systemd"] and "DefaultEnvironment=" in env["systemd"]
    assert env["shm"].split()[:3] == ["tmpfs", "/dev/shm", "tmpfs"]  # mounted by the image's init


def assert_seed_incident_in_lxc(cell: dict[str, object], on_engine: results.CellResult) -> None:
    """Inside LXC the seed incident fails where, and as, it fails in a container on the engine (the main job's
    record of the same image): at import, which the matrix expects of that cell."""
    stages = {s["name"]: s for s in cell["stages"]}  # type: ignore[attr-defined]
    engine_import = next(s for s in on_engine.stages if s.name == "import")
    assert stages["import"]["status"] == engine_import.status.value == "failed"
    assert stages["import"]["failure_class"] == engine_import.failure_class, stages["import"].get("reason")
    assert stages["import"]["where"] == "lxc (cpu)"
    assert str(cell["cell_id"]).startswith(f"{SEED_CELL}@lxc-")
    assert cell["verdict"] == on_engine.verdict.value == Verdict.EXPECTED_FAILURE.value, cell["verdict_reason"]
