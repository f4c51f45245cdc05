"""What the SBOM and the provenance cost per cell: inventory, CycloneDX SBOM, provenance, signing, attaching.

    python benchmarks/attest_cost.py [--runs 3] [--out benchmarks/attest-cost-results.md]

For every SGLang image this engine holds (`docker images sglang-images`; nothing is built or pruned): the inventory
read by running attest/scan.py inside the image (network off), the CycloneDX SBOM written by the library with the
cell's locks, the SLSA provenance, both signed with a throw-away key (the steps attest/describe.py runs). Attaching
is timed on a loopback registry (tests/registry_server.py) against a tiny image: cosign uploads one small blob and
a manifest per attestation, so its time does not grow with the image (the staged image itself is never pushed
here). Median of --runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker
import docker.models.images

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from buildscripts.attest import inventory, provenance, sbom, signed  # noqa: E402
from buildscripts.lock import paths_for  # noqa: E402
from buildscripts.matrix import load  # noqa: E402
from buildscripts.matrix.schema import LABEL_PREFIX  # noqa: E402
from buildscripts.trust import described, keys  # noqa: E402

DIGEST = "sha256:" + "0" * 64


def one_cell(client: docker.DockerClient, image: docker.models.images.Image, key: keys.SigningKey,
             folder: Path) -> dict[str, float]:
    matrix = load(ROOT / "matrix.yaml")
    cell = matrix.cell(image.labels[f"{LABEL_PREFIX}.cell"])
    assert cell is not None
    paths = paths_for(cell, ROOT / "lockfiles")
    locks = [(p.relative_to(ROOT / "lockfiles").as_posix(), p) for p in (paths.lane, paths.sglang, paths.toolkit) if p]
    times: dict[str, float] = {}
    started = time.perf_counter()
    found = inventory.from_image(client, str(image.id))
    times["inventory"] = time.perf_counter() - started
    started = time.perf_counter()
    bom = sbom.to_json(sbom.bom(found, sbom.Subject(repository="r", digest=DIGEST, cell_id=cell.id), locks))
    times["sbom"] = time.perf_counter() - started
    started = time.perf_counter()
    facts = provenance.BuildFacts(cell_id=cell.id, definition_digest=cell.definition_digest, parameters={},
                                  locks=locks, base={}, engine="", builder_id=provenance.LOCAL_BUILDER, run_id="b",
                                  finished="")
    made = provenance.make(facts, provenance.images_tree(ROOT))
    times["provenance"] = time.perf_counter() - started
    started = time.perf_counter()
    for kind, predicate in ((described.SBOM, json.loads(bom)), (described.PROVENANCE, made.predicate())):
        signed.write(folder, cell.id, signed.statement(kind, predicate, "r", DIGEST), key)
    times["sign"] = time.perf_counter() - started
    times["sbom_bytes"] = len(bom)
    times["components"] = len(json.loads(bom)["components"])
    return times


def attach_time(folder: Path, key: keys.SigningKey, runs: int) -> float:
    from tests.process.test_policy_agreement import Registry
    from tests.registry_server import RegistryServer
    from tests.registry_writer import RegistryWriter

    server = RegistryServer(folder / "registry")
    server.folder.mkdir()
    server.start()
    try:
        registry = Registry(server, RegistryWriter(server.url), folder, key, folder / "k.pub", name="bench/attach")
        seconds = []
        for _ in range(runs):
            digest = registry.image()
            files = [signed.write(folder / digest[7:19], "c", signed.statement(kind, {"x": 1}, registry.repository,
                                                                               digest), key)
                     for kind in (described.SBOM, described.PROVENANCE)]
            started = time.perf_counter()
            signed.attach(files, f"{registry.repository}@{digest}", trusted=[key.public])
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds)
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "attest-cost-results.md")
    a = ap.parse_args()
    client = docker.from_env()
    images = [i for i in client.images.list("sglang-images") if f"{LABEL_PREFIX}.cell" in i.labels]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        key = keys.signing_key({"SGLANG_IMAGES_KEY_DIR": str(folder / "key")})
        attach = attach_time(folder, key, a.runs)
        for image in images:
            runs = [one_cell(client, image, key, folder / "runs") for _ in range(a.runs)]
            median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            size = image.attrs["Size"] / 1e9
            total = sum(median[k] for k in ("inventory", "sbom", "provenance", "sign")) + attach
            rows.append(f"| {image.tags[0].split(':', 1)[1]} | {size:.2f} | {int(median['components'])} | "
                        f"{median['sbom_bytes'] / 1e3:.0f} | {median['inventory']:.2f} | {median['sbom']:.2f} | "
                        f"{median['provenance']:.2f} | {median['sign']:.2f} | {attach:.2f} | **{total:.2f}** |")
    text = "\n".join([
        "# SBOM and provenance: seconds per cell", "",
        f"`python benchmarks/attest_cost.py --runs {a.runs}` on a 2-core {platform.machine()} build machine "
        f"(shared, loaded), {time.strftime('%Y-%m-%d', time.gmtime())}; the median of {a.runs} runs. Real images "
        "this engine held (none built for this); attaching timed on a loopback registry (tiny image: its time does "
        "not grow with the image). The arm64 image's inventory runs under QEMU user emulation.", "",
        "| image | GB | components | SBOM kB | inventory s | SBOM s | provenance s | sign s | attach s | total s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", *rows, ""])
    a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
