"""Thin nox sessions over the `buildscripts` package (`nox -l` lists them)."""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "fast"]   # a bare `nox` is cheap: the suite that installs engines is asked for by name

PYTHON = "3.11"
# What a session installs (pyproject.toml): the commands a user of the images runs need the base alone, so their
# sessions install only that (a dependency they pick up by accident fails here first); the build system and the
# verification ladder need the `build` extra, the tests everything.
USER = ("-e", ".")
BUILDER = ("-e", ".[build]")
TESTER = ("-e", ".[build,test]")


def _cli(session: nox.Session, command: str, install: tuple[str, str] = USER) -> None:
    session.install(*install)
    session.run("python", "-m", "buildscripts", command, *session.posargs)


# The test sessions write bytecode even where PYTHONDONTWRITEBYTECODE is set (empty is unset): the project's own
# modules, compiled once instead of by each of the Pythons the tests start, and pytest's rewritten test modules,
# which it caches only where bytecode may be written (collection 4.2 s -> 0.9 s per worker). __pycache__ is ignored.
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def _install_for_tests(session: nox.Session) -> None:
    """The project with its build and test extras, and the bytecode of what is installed. The tests start Python
    some fifty times, and where PYTHONDONTWRITEBYTECODE is set (as on the project's test machine) none of them could
    cache what it compiled: 0.66 s to list the matrix instead of 0.28 s. uv installs without bytecode, and an
    environment made earlier has none either; compileall skips what is current (under half a second)."""
    session.install(*TESTER)
    site = Path(session.bin).parent / "lib" / f"python{PYTHON}" / "site-packages"
    session.run("python", "-m", "compileall", "-q", "-j", "0", str(site), silent=True)


def _machine(session: nox.Session, purpose: str, build_args: list[str] | None = None) -> None:
    """Bring up what the session needs before any work: on Debian as root the engine, buildx, mmdebstrap
    (and the tests' tools) are installed and started; elsewhere it names the line that fixes it. A build's own
    arguments go along: its selection says which CPUs need QEMU user emulation here."""
    session.run("python", "-m", "buildscripts", "setup", "--for", purpose, *(["--", *build_args] if build_args else []))


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """Main job: select cells, build them with BuildKit, verify inside containers, tag, report."""
    session.install(*BUILDER)
    _machine(session, "build", session.posargs)
    session.run("python", "-m", "buildscripts", "build", *session.posargs)


@nox.session(python=PYTHON)
def matrix(session: nox.Session) -> None:
    """List the selected cell ids (`-- --json` for machines, `-- --all` excluded too, `-- --github` CI jobs)."""
    session.install(*USER)
    # stderr apart (nox merges it into stdout by default): machines read stdout (`-- --github` goes
    # to $GITHUB_OUTPUT), and an error must reach the log instead of the JSON.
    session.run("python", "-m", "buildscripts", "matrix", *session.posargs, stderr=None)


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Resolve hash-pinned lockfiles per layer (`-- --check` in CI, `-- --upgrade` on purpose)."""
    _cli(session, "lock")


@nox.session(python=PYTHON)
def watch(session: nox.Session) -> None:
    """Releases on the index newer than matrix.yaml holds (`-- --json`; `-- --propose [--branch B] [--build]`)."""
    session.install(*BUILDER)   # `--propose --build` builds and verifies the new cells
    # stderr apart, as for `matrix`: `-- --json` is read from stdout, errors and progress go to the log.
    session.run("python", "-m", "buildscripts", "watch", *session.posargs, stderr=None)


@nox.session(python=PYTHON)
def bisect(session: nox.Session) -> None:
    """The smallest set of lock changes that breaks a cell (`-- CELL --good REF --bad REF [--stage S] [--dry-run]`)."""
    _cli(session, "bisect", BUILDER)


@nox.session(python=PYTHON)
def verify(session: nox.Session) -> None:
    """Run the verification ladder on an image (`-- IMAGE`), here (`-- --host`) or in LXC (`-- --lxc CTID`)."""
    _cli(session, "verify", BUILDER)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Rebuild console, Markdown, HTML, JUnit and JSON reports from saved results (`-- --update-readme`: README)."""
    _cli(session, "report")


@nox.session(python=PYTHON)
def tag(session: nox.Session) -> None:
    """Apply the good tags that verified cells of results files earned (`-- --results GLOB`)."""
    _cli(session, "tag")


@nox.session(python=PYTHON)
def promote(session: nox.Session) -> None:
    """Push cells that earned good tags to the configured registry, by digest."""
    _cli(session, "promote")


@nox.session(python=PYTHON)
def export(session: nox.Session) -> None:
    """Export a verified image as an OCI archive for Proxmox VE (`-- CELL_OR_IMAGE [--out DIR]`)."""
    _cli(session, "export")


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """Was this very image verified on a GPU (`-- IMAGE|TAG|oci-archive:PATH [--arch sm_120a] [--key PUB]`)?"""
    _cli(session, "check")


@nox.session(python=PYTHON)
def compare(session: nox.Session) -> None:
    """Are two images the same, file by file (`-- IMAGE_A IMAGE_B [--out DIR]`)? Else what differs, and why."""
    _cli(session, "compare")


@nox.session(python=PYTHON)
def preflight(session: nox.Session) -> None:
    """Read-only checks of an LXC host, and a container (`-- --ctid ID` or `--lxc-name NAME`), for GPUs."""
    _cli(session, "preflight")


# The whole suite's tiers side by side, a file to a worker, in the order pyproject.toml's testpaths give: the longest
# files (e2e: pushes, exports and LXC containers of 10 GB images) first, so that none is left to run alone at the
# end. Most of the suite waits (on the engine, a registry, skopeo, LXC, servers in containers) rather than computes:
# a worker more than the 2 cores of CI's machine keeps them busy while one waits (benchmarks/suite-results.md).
# `-- -n 0 ...` runs in one process: arguments after `--` come later and win.
SUITE_PARALLEL = ["-n", "3", "--dist", "loadfile", "--no-loadscope-reorder"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite: unit, integration (real Docker engine) and end-to-end (real SGLang images), in parallel."""
    _install_for_tests(session)
    _machine(session, "tests")
    session.run("pytest", *SUITE_PARALLEL, *session.posargs, env=WRITE_BYTECODE)


# The tiers that need no Docker and no GPU (docs/contributing.md): what to run while you work. Coverage is of the
# host side as these tiers import it; the probe also runs as a child process there, which it does not count.
# The process tier goes first: its longest file mostly waits (reports killed mid-write), and begun first it
# overlaps the unit tier's work instead of trailing after it.
FAST_TIERS = ["tests/process", "tests/unit"]
# One pytest worker per core (pytest-xdist), handed whole files: test by test, one worker was handed the whole
# process tier and the other sat idle for its last 25 s. pytest-cov combines the workers' coverage. `-- -n 0 ...`
# runs in one process (for --pdb): arguments after `--` come later and win.
PARALLEL = ["-n", "auto", "--dist", "loadfile"]
# The share of each fuzz property's examples (tests/unit/fuzzing.py) drawn here: a quarter unless set; `tests`
# draws them all.
FUZZ_SHARE = "SGLANG_IMAGES_FUZZ_SHARE"


@nox.session(python=PYTHON)
def fast(session: nox.Session) -> None:
    """The tests to run while you work: unit and process tiers (no Docker, no GPU), in parallel, with coverage."""
    _install_for_tests(session)
    session.run("pytest", *PARALLEL, *(session.posargs or FAST_TIERS), "--cov=buildscripts",
                "--cov-report=term:skip-covered",
                env={**WRITE_BYTECODE, FUZZ_SHARE: os.environ.get(FUZZ_SHARE, "0.25")})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict, and the import contracts (the flow's layers, no circles, a stdlib-only probe)."""
    session.install("-e", ".[build,test,lint]")
    session.run("ruff", "check", "buildscripts", "tests", "noxfile.py", "benchmarks")
    session.run("mypy", "buildscripts", "tests", "noxfile.py", "benchmarks")
    session.run("lint-imports")


BENCHMARKS = {
    # CI at scale side by side on a throw-away second engine; writes benchmarks/ci-results.md.
    "ci": "benchmarks/ci_scale.py",
    # Image size, bytecode and baked caches of the 0.5.16 pip cell against the image before them.
    "warm-lean": "benchmarks/warm_lean.py",
    # The main job on the default matrix: first and second run, time per cell and layer, disk by kind.
    "main-job": "benchmarks/main_job.py",
    # Build once and verify by digest against every job building its cell, on two target archs.
    "build-once": "benchmarks/build_once.py",
    # `nox -s check` of one image from a loopback registry and from an OCI archive; writes check-results.md.
    "check": "benchmarks/check_time.py",
    # `nox -s fast` a few times (median, load and cores recorded); writes benchmarks/fast-results.md.
    "fast": "benchmarks/fast_tests.py",
    # The wheel users install against the build environment: size, dependencies, install time, `here`'s wall time;
    # writes benchmarks/consumer-wheel-results.md.
    "consumer-wheel": "benchmarks/consumer_wheel.py",
}


@nox.session(python=PYTHON)
def benchmark(session: nox.Session) -> None:
    """Benchmarks, results in benchmarks/: `ci`, `warm-lean`, `main-job`, `build-once`, `check`, `fast`,
    `consumer-wheel`, all unless one is named first (`nox -s benchmark -- warm-lean [IMAGE]`); the arguments after a
    name go to its script."""
    name, *args = session.posargs or [""]
    if session.posargs and name not in BENCHMARKS:
        session.error(f"unknown benchmark {name!r}: name one of {', '.join(BENCHMARKS)} first, then its arguments")
    session.install(*TESTER)   # the second engine and the loopback registry come from tests/
    for each in [name] if session.posargs else list(BENCHMARKS):
        session.run("python", BENCHMARKS[each], *args)
