"""The base built twice from cold: the same image id, and the same manifest digest once pushed?

    python benchmarks/reproducible_base.py [--base bookworm] [--old REF] [--out benchmarks/reproducible-base.md]

Each build is the project's own (buildscripts.build.base.bootstrap): mmdebstrap from the host's mirror (every
package downloaded again), the tar packed, the image loaded. The first build's image is removed before the
second, so the second starts from nothing of the first. Each build's image is then pushed to a loopback registry
of its own (Debian's docker-registry) for its manifest digest, and the last one is checked to work: `python3 --version`,
and its installed packages against --old (a base made the earlier way, e.g. with debootstrap): none may be lost.
The images carry an owner label of their own and are removed at the end; nothing else is touched.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from buildscripts import matrix  # noqa: E402
from buildscripts.build import base  # noqa: E402
from buildscripts.registry import through_engine  # noqa: E402
from tests.registry_server import RegistryServer  # noqa: E402

OWNER = "reproducible-base-benchmark"
PACKAGES = ["dpkg-query", "-W", "-f", "${Package}\n"]


def build_once(client: docker.DockerClient, name: str, number: int, logs: Path) -> dict[str, Any]:
    spec = matrix.load(ROOT / "matrix.yaml", {}).spec.bases[name]
    mirror = base.host_mirror()
    digest = base.inputs_hash(name, spec, mirror)
    ref = f"sglang-images-bench/base:{name}-reproducible-{number}"
    started = time.monotonic()
    made = base.bootstrap(name, spec, client=client, logs=logs, mirror=mirror, digest=digest, ref=ref,
                          labels={base.OWNER_LABEL: OWNER})
    seconds = round(time.monotonic() - started, 1)
    attrs = client.images.get(ref).attrs
    return {"ref": ref, "id": made.id, "seconds": seconds, "created": attrs["Created"],
            "diff_id": attrs["RootFS"]["Layers"][0], "size": attrs["Size"]}


def packages(client: docker.DockerClient, ref: str) -> list[str]:
    out = client.containers.run(ref, PACKAGES, remove=True)
    return sorted(str(out.decode()).split())


def pushed(client: docker.DockerClient, registry: RegistryServer, build: dict[str, Any]) -> str:
    ref = f"{registry.url}/base:{build['ref'].rsplit(':', 1)[1]}"
    try:
        return through_engine.push(client, build["id"], ref)
    finally:
        through_engine.untag(client, ref)


def report(builds: list[dict[str, Any]], checks: dict[str, Any]) -> str:
    same_id = len({b["id"] for b in builds}) == 1
    same_manifest = len({b["manifest"] for b in builds}) == 1
    rows = ["| build | seconds (wall) | image id | layer diff_id | created | pushed manifest |",
            "|---:|---:|---|---|---|---|"]
    rows += [f"| {i} | {b['seconds']} | `{b['id']}` | `{b['diff_id']}` | {b['created']} | `{b['manifest']}` |"
             for i, b in enumerate(builds, 1)]
    lost = checks["lost"]
    return "\n".join([
        "# The base built twice from cold", "",
        "`python benchmarks/reproducible_base.py` on the 2-core build machine (Docker 20.10, its classic image "
        "store), the bookworm base: mmdebstrap from the host's mirror, every package downloaded each time, the "
        "first image removed before the second build. Each pushed to a loopback registry of its own (the "
        "engine compresses the layer again for a registry it has not pushed to).", "",
        *rows, "",
        f"- same image id: **{'yes' if same_id else 'no'}**; same manifest digest once pushed: "
        f"**{'yes' if same_manifest else 'no'}**",
        f"- `python3 --version` in it: {checks['python']}",
        f"- installed packages: {checks['count']} (the earlier base {checks['old_ref']}: {checks['old_count']}); "
        f"lost: {', '.join(lost) if lost else 'none'}; added: {', '.join(checks['added']) or 'none'}",
        "", "Regenerate: `python benchmarks/reproducible_base.py --old REF_OF_AN_EARLIER_BASE`.", ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="bookworm")
    parser.add_argument("--old", default="", help="an earlier base image to compare the package lists with")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "reproducible-base.md")
    args = parser.parse_args()
    client = docker.from_env(timeout=900)
    builds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="repro-base-") as tmp:
        # One registry per build: the engine reuses a layer it compressed for a registry before (its push
        # metadata), so a second push to the same one would not compress again.
        for number in (1, 2):
            (Path(tmp) / f"registry-{number}").mkdir()
        registries = [RegistryServer(Path(tmp) / f"registry-{number}") for number in (1, 2)]
        try:
            for number, registry in enumerate(registries, 1):
                registry.start()
                build = build_once(client, args.base, number, Path(tmp) / f"logs-{number}")
                build["manifest"] = pushed(client, registry, build)
                print(build, flush=True)
                builds.append(build)
                if number == 1:
                    client.images.remove(build["ref"])   # the second build starts from nothing of the first
            last = builds[-1]["ref"]
            python = client.containers.run(last, ["python3", "--version"], remove=True).decode().strip()
            now = packages(client, last)
            old = packages(client, args.old) if args.old else []
            checks = {"python": python, "count": len(now), "old_ref": args.old or "(none given)",
                      "old_count": len(old), "lost": sorted(set(old) - set(now)),
                      "added": sorted(set(now) - set(old)) if old else []}
            client.images.remove(last)
        finally:
            for registry in registries:
                if registry.proc is not None:
                    registry.proc.terminate()
                    registry.proc.wait(timeout=30)
    args.out.write_text(report(builds, checks))
    print(args.out.read_text())
    return 0 if len({b["id"] for b in builds}) == 1 and not checks["lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
