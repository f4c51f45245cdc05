"""Build once and verify by digest against today's CI shape, side by side in one run (results go to
benchmarks/build-once-results.md).

Two target archs (a B200 runner for sm_100a, an RTX PRO 6000 runner for sm_120a, one of each), the default
matrix. Today every cell × arch job builds its cell on its GPU runner and verifies what it built; the new
shape builds every cell once on a CPU runner, stages what passed its CPU stages, and each GPU runner pulls
and verifies the staged digests. Per shape: builds per cell, seconds of building on GPU runners, GPU jobs,
and the wall time of the workflow.

What is measured here, with real parts, on this machine: the staging step of the 0.5.16 `pip` cell (its
push to a loopback registry and the digest read back), the pull of that digest into a wiped throw-away
Docker 26 engine (a fresh GPU runner), its CPU verification there, and one promotion by digest. What is
read: the build time and CPU verification of every cell (benchmarks/main-job-results.json, the main job
on this machine) and the GPU ladder of a verified cell (the H200 test machine's container run,
evidence/h200-container-2026-11-30). Cells other than the measured one push and pull in proportion to
their image size (an estimate, said so in the results). No GPU is here: the GPU legs are those measured
verification times, not run.

Usage: python benchmarks/build_once.py [--out benchmarks/build-once-results.md] [--render]
The measurements are kept in benchmarks/build-once-results.json; `--render` writes the page again from them.
Needs root, the engine-26 binaries (`.ci/install-engine`), docker-registry, skopeo and ~15 GB free; the
0.5.16 `pip` cell's image in this engine (a cache hit: nothing is rebuilt).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from buildscripts import matrix, results  # noqa: E402
from buildscripts.matrix.cijobs import github_jobs  # noqa: E402
from buildscripts.publish import staging  # noqa: E402
from tests.digest_records import PIP_CELL, arch_runners_matrix, gpu_job, save  # noqa: E402
from tests.registry_server import RegistryServer  # noqa: E402
from tests.second_engine import second_engine  # noqa: E402

MAIN_JOB = ROOT / "benchmarks" / "main-job-results.json"
MEASURED = ROOT / "benchmarks" / "build-once-results.json"
GPU_EVIDENCE = ROOT / "evidence" / "h200-container-2026-11-30" / "results.json"
ARCHS = ("sm_100a", "sm_120a")


def timed(argv: list[str], env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed (exit {done.returncode}); log: {log}\n{done.stderr[-2000:]}")
    return seconds


def measure(work: Path) -> dict[str, Any]:
    """The new shape's own steps, for real, on the 0.5.16 pip cell."""
    # A verifier key of this run only (the fixture records are sealed with it too, in this process).
    os.environ["SGLANG_IMAGES_KEY_DIR"] = str(work / "keys")
    env = {**os.environ, "SGLANG_IMAGES_LOCK_DIR": str(work / "locks")}
    py = [sys.executable, "-m", "buildscripts"]
    found: dict[str, Any] = {}
    with ExitStack() as stack:
        server = RegistryServer(work / "registry")
        server.folder.mkdir()
        stack.callback(server.stop)
        server.start()
        repository = f"{server.url}/sglang-images-staging"
        found["build_cached_s"] = timed([*py, "build", "--only", PIP_CELL, "--runs", str(work / "runs"), "--run-id",
                                         "build", "--keep-superseded", "--cache-keep", "none"], env,
                                        work / "build.log")
        record = results.load(work / "runs" / "build" / "results.json").cells[0]
        client = docker.from_env()
        started = time.monotonic()
        image = staging.stage(client, record, repository, env)
        found["stage_s"] = time.monotonic() - started
        client.close()
        found["image_bytes"] = record.image.size_bytes
        subject = str(image.subject)
        engine = stack.enter_context(second_engine(work / "engine-b"))
        engine.wipe()
        started = time.monotonic()
        engine.client().images.pull(str(image.repository), tag=str(image.digest))
        found["pull_s"] = time.monotonic() - started
        out = work / "collected" / "verify-cpu" / "results.json"
        found["verify_cpu_wall_s"] = timed([*py, "verify", "--pull", subject, "--out", str(out)],
                                           {**env, "DOCKER_HOST": engine.host}, work / "verify.log")
        pulled = results.load(out).cells[0]
        found["verify_cpu_stages_s"] = sum(s.duration_s for s in pulled.stages)
        spec_path = arch_runners_matrix(work / "project")
        loaded = matrix.load(spec_path)
        for arch in ("sm_100", "sm_120"):   # the GPU legs' records: fixture GPU stages (no GPU here)
            save(gpu_job(pulled, arch), work / "collected" / f"verify-{arch}" / "results.json", loaded)
        found["promote_s"] = timed([*py, "promote", "--matrix", str(spec_path), "--registry", server.url,
                                    "--results", str(work / "collected" / "*" / "results.json")], env,
                                   work / "promote.log")
        shutil.rmtree(server.folder / "data", ignore_errors=True)
    return found


def image_bytes(cell_ids: list[str]) -> dict[str, int]:
    """Each cell's candidate image size in this engine (what scales its push and pull), by cell id."""
    sizes: dict[str, int] = {}
    client = docker.from_env()
    for image in client.images.list(name="sglang-images"):
        for tag in image.tags:
            cell = next((c for c in cell_ids if tag.split(":", 1)[1].startswith(c + "-")), None)
            if cell:
                sizes[cell] = int(image.attrs.get("Size") or 0)
    client.close()
    return sizes


def shapes(measured: dict[str, Any]) -> tuple[list[tuple[str, str, str]], list[str]]:
    main = json.loads(MAIN_JOB.read_text())["runs"]
    first = main["first"] if isinstance(main, dict) else main[0]
    cells: dict[str, Any] = first["cells"]
    gpu = json.loads(GPU_EVIDENCE.read_text())
    verified = next(c for c in gpu["cells"] if c["verdict"] == "verified")
    gpu_ladder = sum(s["duration_s"] for s in verified["stages"])
    loaded = matrix.load(arch_runners_matrix(Path(tempfile.mkdtemp(prefix="build-once-"))))
    buildable = [c for c in loaded.buildable() if c.id in cells]
    jobs_today = github_jobs(buildable, loaded.spec.runners)
    staged = [c for c in buildable if cells[c.id]["verdict"] == "cpu-checked"]
    jobs_new = github_jobs(staged, loaded.spec.runners)
    sizes = image_bytes([c.id for c in buildable])
    unit = measured["image_bytes"] or sizes.get(PIP_CELL) or 1

    def transfer(cell_id: str, seconds: float) -> float:
        return seconds * sizes.get(cell_id, unit) / unit

    def gpu_leg(cell_id: str) -> float:   # a passing cell runs the whole ladder; the others stop at a CPU stage
        return gpu_ladder if cells[cell_id]["verdict"] == "cpu-checked" else float(cells[cell_id]["verify_s"])

    build = sum(float(cells[c.id]["build_s"]) for c in buildable)
    # today: each arch's runner runs its jobs one after the other (its BuildKit cache shared between them)
    today_runner = {arch: sum(float(cells[str(j["cell"])]["build_s"]) + gpu_leg(str(j["cell"]))
                              for j in jobs_today if j["arch"] == arch) for arch in ARCHS}
    build_job = build + sum(float(cells[c.id]["verify_s"]) for c in buildable) + \
        sum(transfer(c.id, measured["stage_s"]) for c in staged)
    new_runner = {arch: sum(transfer(str(j["cell"]), measured["pull_s"]) + gpu_ladder
                            for j in jobs_new if j["arch"] == arch) for arch in ARCHS}
    wall_today = max(today_runner.values())
    wall_new = build_job + max(new_runner.values()) + measured["promote_s"]
    pushes = sum(transfer(c.id, measured["stage_s"]) for c in staged)
    rows = [
        ("builds per cell", f"{len(jobs_today) / len(buildable):.0f}", f"{1}"),
        ("GPU jobs", f"{len(jobs_today)} (every buildable cell × 2 archs)",
         f"{len(jobs_new)} (the {len(staged)} cells that passed their CPU stages × 2 archs)"),
        ("seconds of building on GPU runners", f"{len(ARCHS) * build:.0f} ({build:.0f} per runner)", "0"),
        ("seconds of building in all", f"{len(ARCHS) * build:.0f}", f"{build:.0f} (on the CPU runner)"),
        ("GPU runner busy, per arch", " / ".join(f"{today_runner[a]:.0f} s" for a in ARCHS),
         " / ".join(f"{new_runner[a]:.0f} s" for a in ARCHS)),
        ("wall time of the workflow", f"{wall_today:.0f} s (the slower GPU runner)",
         f"{wall_new:.0f} s (build job {build_job:.0f} + slower GPU runner {max(new_runner.values()):.0f} + "
         f"promote {measured['promote_s']:.0f})"),
        ("image a good tag names", "a labelled child of one runner's own build", "the digest every GPU job verified"),
    ]
    notes = [
        f"Build times: the first run of `benchmarks/main-job-results.json` ({build:.0f} s for "
        f"{len(buildable)} cells, layers shared between cells as on one runner); its two 0.5.23 cells were "
        "cache hits there, which understates both shapes' building alike (today twice, once in the new shape).",
        f"GPU legs: the ladder of the verified cell on the H200 test machine, in a container ({gpu_ladder:.0f} s, "
        "evidence/h200-container-2026-11-30), for a cell that passes its CPU stages; a cell that fails one "
        "(the `none` cells, expected to fail at import) stops there: its CPU verification time.",
        f"Measured here for `{PIP_CELL}` ({measured['image_bytes'] / 1e9:.1f} GB): staging (push + digest read "
        f"back) {measured['stage_s']:.0f} s, pull by digest into a wiped Docker 26 engine {measured['pull_s']:.0f} s, "
        f"its CPU verification there {measured['verify_cpu_stages_s']:.0f} s of stages "
        f"({measured['verify_cpu_wall_s']:.0f} s wall), one promotion by digest (the digest copied into the "
        f"release repository, three tags pointed at it) {measured['promote_s']:.1f} s, the cached build "
        f"{measured['build_cached_s']:.0f} s. One run, on a machine shared with other work; the registry is on "
        "loopback: over a network, staging and pulls take longer. Other cells' pushes and pulls are scaled by "
        "image size (an estimate).",
        f"Where the time goes: of the build job's {build_job:.0f} s, {pushes:.0f} s are the staging pushes (this "
        "engine compresses every layer with gzip on 2 busy cores); the GPU runners wait for the whole build job. "
        f"So here the workflow takes {wall_new - wall_today:.0f} s longer than today's, while each GPU runner is "
        f"busy {today_runner[ARCHS[0]] - new_runner[ARCHS[0]]:.0f} s less and builds nothing, and every good tag "
        "names the digest that was verified on both GPUs.",
    ]
    return rows, notes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "build-once-results.md")
    ap.add_argument("--render", action="store_true", help=f"the page again from {MEASURED.name}, measuring nothing")
    a = ap.parse_args()
    if a.render:
        measured = json.loads(MEASURED.read_text())
    else:
        work = Path(tempfile.mkdtemp(prefix="build-once-", dir="/var/tmp"))
        try:
            measured = measure(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        MEASURED.write_text(json.dumps({**measured, "date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
                                        "cores": os.cpu_count()}, indent=2) + "\n")
    rows, notes = shapes(measured)
    lines = [
        "# Build once, verify by digest", "",
        f"Measured {measured.get('date', time.strftime('%Y-%m-%d'))} on {measured.get('machine', platform.node())} "
        f"({platform.machine()}, {measured.get('cores', os.cpu_count())} cores), "
        "`python benchmarks/build_once.py`: the default matrix on two target archs (one B200 runner for "
        "sm_100a, one RTX PRO 6000 runner for sm_120a), today's CI shape against build once, in one run.", "",
        "| | today: every job builds | build once, verify by digest |", "| --- | --- | --- |",
        *(f"| {what} | {today} | {new} |" for what, today, new in rows), "",
        *(f"- {note}" for note in notes), "",
    ]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
