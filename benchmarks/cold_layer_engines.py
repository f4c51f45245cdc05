"""A cell's first layer (images/Dockerfile's `pyenv` stage) rebuilt cold on both engines of this machine, compared.

    python benchmarks/cold_layer_engines.py --base REF [--out benchmarks/cold-layer-engines.md]

Twice on the machine's engine (Docker 20.10, its own builder: BuildKit 0.8, as `nox -s build` builds there), and
twice on a throw-away Docker 26 with the containerd image store, stamped as the cell builds stamp there
(build/buildx.py: SOURCE_DATE_EPOCH = the base's creation time, rewrite-timestamp, a docker archive loaded). Every
build is `--no-cache` (every wheel of the bootstrap lock downloaded). The engine-26 images are copied into the
machine's engine (`docker save | docker load`), and `compare` (buildscripts/compare) is run on the pairs: the two
20.10 builds, the two 26 builds, and one of each. The images are this script's own tags, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from buildscripts.build import buildx, cache  # noqa: E402
from buildscripts.compare import diff, images, render  # noqa: E402
from tests.second_engine import second_engine  # noqa: E402

REPOSITORY = "sglang-images-bench/pyenv"


def build(env: Mapping[str, str], base: str, tag: str, output: buildx.Output) -> float:
    started = time.monotonic()
    with buildx.build_secrets(os.environ) as secrets:
        done = subprocess.run(["docker", "buildx", "build", "--progress=plain", "--no-cache", "--target", "pyenv",
                               "--tag", tag, "--build-arg", f"BASE_IMAGE={base}", *secrets, *output.args,
                               "--file", str(ROOT / "images" / "Dockerfile"), str(ROOT)],
                              env={**env, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True, timeout=1200)
        if done.returncode == 0 and output.archive is not None:
            done = subprocess.run(["docker", "load", "--input", str(output.archive)], env=dict(env),
                                  capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"building {tag} failed:\n{done.stderr[-3000:]}")
    return round(time.monotonic() - started, 1)


def copy_out(engine_env: Mapping[str, str], tag: str) -> None:
    """`tag` of the second engine into the machine's engine."""
    with subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE, env=dict(engine_env)) as saving:
        loaded = subprocess.run(["docker", "load"], stdin=saving.stdout, capture_output=True, text=True, check=False)
    assert saving.returncode == 0 and loaded.returncode == 0, loaded.stderr


def pair(client: docker.DockerClient, a: str, b: str) -> dict[str, Any]:
    found = diff.compare(images.read(client, a), images.read(client, b))
    return {"a": a, "b": b, "lines": render.lines(found), "counts": render.record(found)["counts"],
            "examples": {reason: [f"{d.path}: {d.detail}" for d in group[:4]]
                         for reason, group in found.groups.items()}}


def report(base: str, times: dict[str, float], ids: dict[str, str], pairs: list[dict[str, Any]],
           epoch: int) -> str:
    out = ["# A cell's first layer rebuilt cold on both engines", "",
           "`python benchmarks/cold_layer_engines.py --base REF` on the 2-core build machine: images/Dockerfile's "
           "`pyenv` stage (the venv and the bootstrap lock, every wheel downloaded: `--no-cache`) on the base "
           f"`{base}`, "
           "twice on Docker 20.10's own builder (as `nox -s build` builds there) and twice on Docker 26 with the "
           f"containerd image store, stamped (SOURCE_DATE_EPOCH={epoch}, the base's creation time; "
           "rewrite-timestamp). Compared with `python -m buildscripts compare`.", "",
           "| build | wall (s) | image id |", "|---|---:|---|"]
    out += [f"| {name} | {times[name]} | `{ids[name]}` |" for name in times]
    for found in pairs:
        out += ["", f"## {found['a']} against {found['b']}", "", "```", *found["lines"], "```"]
        for reason, examples in found["examples"].items():
            out += [f"- {reason}: " + "; ".join(f"`{e}`" for e in examples)]
    return "\n".join([*out, ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a base image of the machine's engine")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cold-layer-engines.md")
    args = parser.parse_args()
    client = docker.from_env(timeout=900)
    epoch = buildx.source_date_epoch(client, args.base)
    times: dict[str, float] = {}
    tags = {name: f"{REPOSITORY}:{name}" for name in ("docker20-1", "docker20-2", "docker26-1", "docker26-2")}
    try:
        for name in ("docker20-1", "docker20-2"):
            times[name] = build(os.environ, args.base, tags[name], buildx.Output())
        with tempfile.TemporaryDirectory(prefix="cold-layer-") as tmp, \
                second_engine(Path(tmp) / "engine", nat=True) as engine:
            engine.load(args.base)
            os.environ["DOCKER_HOST"] = engine.host   # `docker buildx inspect` asks that engine
            builder = cache.builder(None, engine.client().info())
            del os.environ["DOCKER_HOST"]
            assert builder.rewrites_timestamps, builder
            for name in ("docker26-1", "docker26-2"):
                with buildx.reproducible_output(epoch, Path(tmp)) as output:
                    times[name] = build(engine.env, args.base, tags[name], output)
                copy_out(engine.env, tags[name])
        ids = {name: str(client.images.get(tag).id) for name, tag in tags.items()}
        pairs = [pair(client, tags["docker20-1"], tags["docker20-2"]),
                 pair(client, tags["docker26-1"], tags["docker26-2"]),
                 pair(client, tags["docker20-1"], tags["docker26-1"])]
    finally:
        for tag in tags.values():
            subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
    args.out.write_text(report(args.base, times, ids, pairs, epoch))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
