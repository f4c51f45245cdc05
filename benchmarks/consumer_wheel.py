"""The package users install, against the build system's environment (results: benchmarks/consumer-wheel-results.md).

    python benchmarks/consumer_wheel.py [--runs N] [--out PATH]

The sdist and the wheel are built from this tree as the release job builds them (`python -m build`). Then, each
run in a new venv (the standard library's, from an empty folder, PYTHONPATH unset) with the machine's pip
configuration: `pip install WHEEL` (what `pipx install sglang-images` installs) and `pip install 'WHEEL[build]'`
(the build system's environment), timed; for each, the distributions installed beside the package and the size
of its site-packages. pip's own cache is as the machine has it (warm after the first run: the runs after it time
the install, not the download). Then, from the installed package, each a new process: `sglang-images --help` (the
interpreter's start and the command line), and `sglang-images here` without a registry; `check` and `here` of a
tag on a loopback registry (tests/registry_server.py) holding an index of two platforms with signed verdicts
(tests/attest_world.py: needs the Docker engine, skopeo and cosign). The rows of `here` say why they did not run
while the installed package has no `here` command. The issue's goal for `here`: at most 2 s
without a registry, 3 s with one on loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "consumer-wheel-results.md"
LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
# The distributions a venv starts with: not dependencies of the package.
SEEDED = {"pip", "setuptools"}
# How `here` is asked about a repository's tag (tests/integration/test_consumer_wheel.py asks it the same way).
HERE_WITH_REGISTRY = ("here", "--repository", "{repository}", "--tag", "bench", "--trust-key", "{pub}")
WHY_NO_HERE = "skipped: the installed package has no `here` command"
# `here` on this CPU machine reads a B200's nvidia-smi answer (recorded: tests/unit/data/machines/b200-host), so that
# it has a GPU arch to choose for; everything else it reads of the machine is this machine's own.
B200_SMI = """#!/bin/sh
echo "0, NVIDIA B200, GPU-00000000-b200-4000-8000-00000000b200, 10.0, 580.82.07, 183359"
"""
CELL_LABELS = {"io.sglang-images.cell": "sglang0.5.16-torch2.11.0-cu130-pip-bookworm",
               "io.sglang-images.sglang": "0.5.16", "io.sglang-images.cuda": "cu130",
               "io.sglang-images.archs": "sm_100a"}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in LEAKS}, **(extra or {})}


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=900)


def must(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, done.args))} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return done


@dataclass(frozen=True)
class Install:
    """One `pip install` into a new venv: its wall time, what it installed, how big it is."""

    seconds: float
    distributions: tuple[str, ...]   # beside the package itself and what a venv starts with
    megabytes: float


def install(scratch: Path, what: str, name: str) -> tuple[Install, Path]:
    venv = scratch / name
    cwd = scratch / "elsewhere"
    cwd.mkdir(exist_ok=True)
    must(run([sys.executable, "-m", "venv", str(venv)], cwd))
    started = time.monotonic()
    must(run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", what], cwd))
    seconds = time.monotonic() - started
    listed = must(run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m\n"
                       "print('\\n'.join(sorted({d.metadata['Name'].lower() for d in m.distributions()})))"], cwd))
    names = tuple(n for n in listed.stdout.split() if n not in SEEDED | {"sglang-images"})
    site = next((venv / "lib").glob("python3*/site-packages"))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())
    return Install(seconds, names, size / 1e6), venv


def timed(argv: list[str], cwd: Path, runs: int, env: dict[str, str] | None = None,
          answers: tuple[int, ...] = (0,)) -> tuple[float, float] | str:
    """(median, best) seconds of `runs` new processes, or why it failed (an exit code not among `answers`)."""
    seconds = []
    for _ in range(runs):
        started = time.monotonic()
        done = run(argv, cwd, env)
        seconds.append(time.monotonic() - started)
        if done.returncode not in answers:
            return f"failed: exit {done.returncode}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    return statistics.median(seconds), min(seconds)


@contextlib.contextmanager
def loopback_index(scratch: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A loopback registry with an index of two platforms, each with a signed verdict: (tag, public key, a
    user's environment)."""
    sys.path.insert(0, str(ROOT))
    import docker

    from buildscripts.trust import verdicts
    from tests.attest_world import opened
    from tests.registry_writer import RegistryWriter

    client = docker.from_env()
    (scratch / "world").mkdir()
    try:
        with opened(client, scratch / "world") as world:
            amd64 = world.push("bench-amd64", labels=CELL_LABELS)
            writer = RegistryWriter(world.server.url)
            arm64 = writer.rewrite_config(world.name, amd64, "bench-arm64", architecture="arm64", variant="v8")
            writer.index(world.name, "bench", {"linux/amd64": amd64, "linux/arm64/v8": arm64})
            for digest in (amd64, arm64):
                verdicts.attach_verdicts(world.sign(digest), world.ref(digest), trusted=world.trusted())
            yield world.repository, world.verifier_pub, world.checker_env
    finally:
        client.close()


def command_rows(venv: Path, scratch: Path, runs: int) -> list[tuple[str, tuple[float, float] | str]]:
    """The start, `check` of the loopback index (what `here` does for a registry, and more), and `here`."""
    script = str(venv / "bin" / "sglang-images")
    cwd = scratch / "elsewhere"
    help_text = run([script, "--help"], cwd).stdout
    has_here = any(line.split()[:1] == ["here"] for line in help_text.splitlines())
    smi = scratch / "smi"
    smi.mkdir()
    (smi / "nvidia-smi").write_text(B200_SMI)
    (smi / "nvidia-smi").chmod(0o755)
    gpu = {"PATH": f"{smi}:{os.environ['PATH']}"}
    report_file = ROOT / "evidence" / "cpu-2026-12-04" / "runs" / "20261204-174555-d609fc" / "results.json"
    alone = [script, "here", "--report", str(report_file)]
    rows: list[tuple[str, tuple[float, float] | str]] = [
        ("`sglang-images --help` (the start: Python and the command line)", timed([script, "--help"], cwd, runs)),
        # The committed CPU evidence names no registry digest: `here` reads the machine and the file and answers
        # that nothing there fits (exit 20, NothingFits), the whole of its work without a registry.
        ("`sglang-images here --report results.json`, no registry (a B200's nvidia-smi; answer: exit 20)",
         timed(alone, cwd, runs, clean_env(gpu), answers=(20,)) if has_here else WHY_NO_HERE)]
    with loopback_index(scratch) as (repository, pub, user):
        rows.append(("`sglang-images check REPO:TAG`, a loopback registry (an index of 2 platforms)",
                     timed([script, "check", f"{repository}:bench", "--key", str(pub)], cwd, runs, clean_env(user))))
        argv = [script, *(a.format(repository=repository, pub=pub) for a in HERE_WITH_REGISTRY)]
        rows.append(("`sglang-images here --repository REPO --tag TAG`, the same registry (a B200's nvidia-smi)",
                     timed(argv, cwd, runs, clean_env({**user, **gpu})) if has_here else WHY_NO_HERE))
    return rows


def shown(result: tuple[float, float] | str) -> str:
    return f"{result[0]:.2f} | {result[1]:.2f}" if isinstance(result, tuple) else f"{result} | —"


def report(dists: tuple[Path, Path], user: list[Install], builder: list[Install],
           rows: list[tuple[str, tuple[float, float] | str]], runs: int, load: tuple[float, float]) -> list[str]:
    sdist, wheel = dists
    one, full = user[0], builder[0]
    extra = sorted(set(full.distributions) - set(one.distributions))
    lines = ["# The package users install, against the build system's environment (`benchmarks/consumer_wheel.py`)", "",
             f"Measured {time.strftime('%Y-%m-%d')} on a CPU machine ({os.cpu_count()} cores, {platform.machine()}, "
             f"shared with other work), Python {platform.python_version()}, pip with the machine's configuration "
             f"(its package index), load average {load[0]:.1f} before and {load[1]:.1f} after; {runs} runs of each, "
             "each into a new venv, pip's cache warm after the first.", "",
             f"The wheel `{wheel.name}` is {wheel.stat().st_size / 1024:.0f} KiB (the sdist "
             f"{sdist.stat().st_size / 1024:.0f} KiB): the same file for both, the `build` extra adds dependencies "
             "only.", "",
             "| install | distributions beside the package | site-packages MB | install s, first run | "
             "install s, median of the rest |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, made in (("`pip install WHEEL` (what `pipx install sglang-images` installs)", user),
                       ("`pip install 'WHEEL[build]'` (the build system's environment)", builder)):
        rest = statistics.median(m.seconds for m in made[1:]) if len(made) > 1 else made[0].seconds
        lines.append(f"| {name} | {len(made[0].distributions)} | {made[0].megabytes:.0f} | {made[0].seconds:.1f} | "
                     f"{rest:.1f} |")
    lines += ["", f"The user's install: {', '.join(one.distributions)}.", "",
              f"What the `build` extra adds: {', '.join(extra)}.", "",
              "| command, from the installed package | median s | best s |", "| --- | ---: | ---: |"]
    lines += [f"| {what} | {shown(result)} |" for what, result in rows]
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sglang-images-bench-wheel-") as folder:
        scratch = Path(folder)
        out = scratch / "dist"
        must(run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], scratch))
        dists = (next(out.glob("*.tar.gz")), next(out.glob("*.whl")))
        made = [install(scratch, str(dists[1]), f"user-{i}") for i in range(a.runs)]
        user = [m for m, _ in made]
        builder = [install(scratch, f"{dists[1]}[build]", f"build-{i}")[0] for i in range(a.runs)]
        venv = made[0][1]
        rows = command_rows(venv, scratch, a.runs * 3)
        lines = report(dists, user, builder, rows, a.runs, (load_before, os.getloadavg()[0]))
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
