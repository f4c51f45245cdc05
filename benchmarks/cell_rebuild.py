"""A cell rebuilt from cold on both engines of this machine and compared (`compare --rebuild`), issue 46's measure.

    python benchmarks/cell_rebuild.py --cell CELL [--out benchmarks/cell-rebuild.md] [--skip-20]

1. Docker 20.10, the machine's engine (its own builder, BuildKit 0.8, as `nox -s build` builds there): the cell as
   `nox -s build` made it, against `python -m buildscripts compare --rebuild CELL` (every layer again, no cache).
2. Docker 26 with the containerd image store, a throw-away engine beside it (tests/second_engine.py), whose builder
   stamps (SOURCE_DATE_EPOCH, rewrite-timestamp): the base copied in from the machine's engine, the cell built cold
   there by `python -m buildscripts build --only CELL --no-verify` (a fresh engine has no cache), then
   `compare --rebuild CELL` there: two cold stamped builds.
3. The Docker 26 image copied into the machine's engine and compared with Docker 20.10's build of the same inputs.

Every command is the project's own, run as a user runs it, timed from outside; what `compare` found is read from the
compare.json each run writes. The second engine and everything in it go at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.second_engine import second_engine  # noqa: E402

PY = sys.executable


def timed(argv: list[str], env: Mapping[str, str], log: Path) -> tuple[int, float]:
    """Run a project command, its output to `log` (and the console's last lines to ours)."""
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(argv, cwd=ROOT, env=dict(env), stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = round(time.monotonic() - started, 1)
    tail = log.read_text(errors="replace").splitlines()[-12:]
    print(f"$ {' '.join(argv[2:])}: exit {done.returncode}, {seconds} s", *tail, sep="\n  ", flush=True)
    return done.returncode, seconds


def found(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "compare.json").read_text())
    examples: dict[str, list[str]] = {}
    for d in data["differences"]:
        shown = examples.setdefault(d["reason"], [])
        if len(shown) < 4:
            shown.append(f"{d['path']}: {d['detail']}"[:220])
    return {"a": data["a"], "b": data["b"], "identical": data["identical"], "files": data["files"],
            "counts": data["counts"], "examples": examples}


def candidate_of(env: Mapping[str, str], cell: str) -> str:
    """The candidate tag the engine in `env` holds for `cell` (the newest image labelled with that cell)."""
    done = subprocess.run(["docker", "images", "--filter", f"label=io.sglang-images.cell={cell}", "--format",
                           "{{.Repository}}:{{.Tag}}"], env=dict(env), capture_output=True, text=True, check=True)
    tags = [t for t in done.stdout.split() if "-rebuild" not in t and "<none>" not in t]
    if not tags:
        sys.exit(f"no image of {cell} in that engine: build it first (nox -s build -- --only {cell} --no-verify)")
    return tags[0]


def base_of(env: Mapping[str, str], image: str) -> str:
    """The tag of the base `image` was built on (its `base.id` label names the base image's id)."""
    def inspect(ref: str, fmt: str) -> str:
        return subprocess.run(["docker", "image", "inspect", ref, "--format", fmt], env=dict(env),
                              capture_output=True, text=True, check=True).stdout.strip()

    base_id = inspect(image, '{{index .Config.Labels "io.sglang-images.base.id"}}')
    return inspect(base_id, "{{index .RepoTags 0}}")


def copy_out(engine_env: Mapping[str, str], tag: str, as_tag: str) -> None:
    """`tag` of the second engine into the machine's engine as `as_tag`: never under the build's own tag, which the
    machine's engine may hold for its own build of the same inputs."""
    subprocess.run(["docker", "tag", tag, as_tag], env=dict(engine_env), check=True)
    with subprocess.Popen(["docker", "save", as_tag], stdout=subprocess.PIPE, env=dict(engine_env)) as saving:
        loaded = subprocess.run(["docker", "load"], stdin=saving.stdout, capture_output=True, text=True, check=False)
    if saving.returncode != 0 or loaded.returncode != 0:
        sys.exit(f"docker save {tag} | docker load failed: {loaded.stderr[-2000:]}")


def report(cell: str, rows: list[dict[str, Any]], pairs: list[tuple[str, dict[str, Any]]]) -> str:
    out = ["# A cell rebuilt from cold on both engines", "",
           f"`python benchmarks/cell_rebuild.py --cell {cell}` on the 2-core build machine. Each build is the "
           "project's own command, timed from outside; each comparison is `python -m buildscripts compare`'s "
           "(compare.json). Cold: no BuildKit cache (`--no-cache`, or a fresh engine), every wheel downloaded.", "",
           "| engine | command | exit | wall (s) |", "|---|---|---:|---:|"]
    out += [f"| {r['engine']} | `{r['command']}` | {r['exit']} | {r['seconds']} |" for r in rows]
    for title, pair in pairs:
        out += ["", f"## {title}", "", f"`{pair['a']}` against `{pair['b']}`: "
                + ("**identical**" if pair["identical"] else "differ") + f", {pair['files'][0]} and "
                f"{pair['files'][1]} files a container sees.", ""]
        if not pair["identical"]:
            out += ["| reason | count |", "|---|---:|", *(f"| {k} | {v} |" for k, v in pair["counts"].items()), ""]
            for reason, shown in pair["examples"].items():
                out += [f"- {reason}: " + "; ".join(f"`{e}`" for e in shown)]
    return "\n".join([*out, ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cell-rebuild.md")
    parser.add_argument("--skip-20", action="store_true", help="leave out the Docker 20.10 rebuild (step 1)")
    args = parser.parse_args()
    runs = ROOT / "runs" / "bench-cell-rebuild"
    runs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[str, dict[str, Any]]] = []
    here = dict(os.environ)
    mine = candidate_of(here, args.cell)
    if not args.skip_20:
        code, secs = timed([PY, "-m", "buildscripts", "compare", "--rebuild", args.cell, "--out", str(runs / "d20")],
                           here, runs / "d20.log")
        rows.append({"engine": "Docker 20.10", "command": f"compare --rebuild {args.cell}", "exit": code,
                     "seconds": secs})
        pairs.append(("Docker 20.10: the build's image against its cold rebuild", found(runs / "d20")))
    with tempfile.TemporaryDirectory(prefix="cell-rebuild-", dir="/var/tmp") as tmp, \
            second_engine(Path(tmp) / "engine", nat=True) as engine:
        engine.load(base_of(here, mine))
        there = {**here, "DOCKER_HOST": engine.host}
        code, secs = timed([PY, "-m", "buildscripts", "build", "--only", args.cell, "--no-verify", "--run-id",
                            "bench-d26-build"], there, runs / "d26-build.log")
        rows.append({"engine": "Docker 26 (containerd store, stamped)",
                     "command": f"build --only {args.cell} --no-verify", "exit": code, "seconds": secs})
        code, secs = timed([PY, "-m", "buildscripts", "compare", "--rebuild", args.cell, "--out", str(runs / "d26")],
                           there, runs / "d26.log")
        rows.append({"engine": "Docker 26 (containerd store, stamped)", "command": f"compare --rebuild {args.cell}",
                     "exit": code, "seconds": secs})
        pairs.append(("Docker 26, stamped: two cold builds", found(runs / "d26")))
        theirs = f"sglang-images-bench/docker26:{args.cell}"
        copy_out(engine.env, candidate_of(there, args.cell), theirs)
    code, secs = timed([PY, "-m", "buildscripts", "compare", mine, theirs, "--out", str(runs / "d20-d26")], here,
                       runs / "d20-d26.log")
    rows.append({"engine": "both", "command": f"compare {mine} {theirs}", "exit": code, "seconds": secs})
    pairs.append(("Docker 20.10's build against Docker 26's", found(runs / "d20-d26")))
    subprocess.run(["docker", "rmi", theirs], capture_output=True, check=False)
    args.out.write_text(report(args.cell, rows, pairs))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
