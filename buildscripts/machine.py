"""What the README's two commands need on this machine, and bringing it up before any work.

`nox -s build` needs the Docker CLI, a reachable engine, the buildx plugin and mmdebstrap; `nox -s tests`
needs those and the tools its tiers drive (a registry server, Chromium, skopeo, cosign, umoci, LXC, gcc and
the throw-away second engine); `nox -s check` and the promote job need skopeo and cosign (`--for check`).
On Debian as root, whatever is missing is installed and the engine started by the one installer of the
project, `.ci/install-engine` (idempotent: it skips what is there), which says what it installs.
Elsewhere, or with SGLANG_IMAGES_NO_SETUP=1, `build` stops before any work with the line that fixes it;
`tests` warns with that line and goes on (a test whose tool is missing skips, naming it), except under
CI=true, where a missing tool is an error.

    python -m buildscripts setup [--for build|tests|check] [-- BUILD_ARGS]

BUILD_ARGS are the build's own arguments (`nox -s build` passes them on): its --matrix, --only and --skip say
which cells this run builds, and so which CPUs need QEMU user emulation here (an arm64 build runner building
only the arm64 cells needs none; the whole matrix on it needs the x86_64 handler).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import hostenv, log, proc
from .errors import EngineError, ToolMissingError
from .workspace import Workspace

NO_SETUP_ENV = "SGLANG_IMAGES_NO_SETUP"
SECOND_ENGINE = Path("/opt/docker-26/usr/sbin/dockerd")   # where the installer puts it (tests/second_engine.py)


@dataclass(frozen=True)
class Need:
    what: str                     # as a person names it
    present: Callable[[], bool]
    install: str                  # how to get it on another system
    engine: bool = False          # part of the Docker engine (its absence is an engine error)


def _program(name: str) -> Callable[[], bool]:
    return lambda: shutil.which(name) is not None


def _succeeds(*argv: str) -> Callable[[], bool]:
    def check() -> bool:
        if shutil.which(argv[0]) is None:
            return False
        try:
            return subprocess.run(list(argv), capture_output=True, timeout=60, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    return check


ENGINE = "Docker >= 20.10 with the buildx plugin (https://docs.docker.com/engine/install/)"
BUILD = (
    Need("the docker CLI", _program("docker"), ENGINE, engine=True),
    Need("a running Docker engine", _succeeds("docker", "info"),
         "start it: `sudo systemctl start docker` or `dockerd &`", engine=True),
    Need("the docker buildx plugin", _succeeds("docker", "buildx", "version"), ENGINE, engine=True),
    Need("mmdebstrap", _program("mmdebstrap"), "Debian's mmdebstrap package, 1.3 or later"),
)
COSIGN = Need("cosign", _program("cosign"), "cosign 2.x: Debian trixie's cosign package (.ci/install-engine unpacks "
              "it on bookworm) or a release from sigstore/cosign")
# `nox -s check` and the promote job: the registry read with skopeo, the verdicts attached and read with cosign.
SKOPEO = Need("skopeo", _program("skopeo"), "skopeo")
CHECK = (SKOPEO, COSIGN)
TESTS = (
    *BUILD,
    COSIGN,
    Need("gcc", _program("gcc"), "a C compiler and linker (gcc, libc6-dev)"),
    Need("a registry server (docker-registry)", _program("docker-registry"), "Debian's docker-registry package"),
    Need("Chromium", _program("chromium"), "Debian's chromium package"),
    SKOPEO,
    Need("umoci", _program("umoci"), "umoci"),
    Need("jq", _program("jq"), "jq"),
    Need("LXC", _program("lxc-create"), "LXC (lxc-create, lxc-start, lxc-attach)"),
    Need("the second engine (Docker 26) for the shared-cache test", SECOND_ENGINE.exists,
         "Debian trixie's docker.io unpacked under /opt/docker-26 (.ci/install-engine shows how)"),
)
NEEDS = {"build": BUILD, "tests": TESTS, "check": CHECK}


def missing(needs: Sequence[Need]) -> list[Need]:
    return [need for need in needs if not need.present()]


def is_debian(os_release: Path = Path("/etc/os-release")) -> bool:
    """Debian itself (the installer reads Debian's mirror and fetches from trixie); Ubuntu and others
    derived from it carry /etc/debian_version too, so os-release's ID decides."""
    try:
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
    except OSError:
        return False
    return fields.get("ID", "").strip().strip('"') == "debian"


def can_install(env: Mapping[str, str]) -> str | None:
    """Why this machine cannot be set up here (None: it can): Debian, root, not turned off, a local engine."""
    if hostenv.switch(env, NO_SETUP_ENV):
        return f"{NO_SETUP_ENV}=1"
    if not is_debian():
        return "not a Debian system"
    if os.geteuid() != 0:
        return "not root"
    if env.get("DOCKER_HOST"):
        return f"DOCKER_HOST names another engine ({env['DOCKER_HOST']})"
    return None


@dataclass(frozen=True)
class Selection:
    """The cells a build will build, as its own arguments select them (`matrix`: the workspace's when None)."""

    matrix: Path | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


def setup(purpose: str, selection: Selection, ws: Workspace, env: Mapping[str, str]) -> int:
    """What `purpose` (build, tests, check) needs, there or brought up; for a build, QEMU user emulation for the
    CPUs of the cells `selection` picks. 0, or the error that says what is missing and how to fix it."""
    lacking = missing(NEEDS[purpose])
    if not lacking:
        return _emulation(ws, env, selection) if purpose == "build" else 0
    names = ", ".join(need.what for need in lacking)
    installer = ws.root / ".ci" / "install-engine"
    refused = can_install(env)
    if refused is None:
        log.info(f"`nox -s {purpose}` needs {names}: installing and starting them with {ws.shown(installer)}")
        done = proc.run(["bash", str(installer)], log=ws.runs / "setup.log", timeout=3600, on_line=log.info)
        lacking = missing(NEEDS[purpose])
        if not lacking:
            if not done.ok:   # it installs more than one command needs: what failed is not needed here
                log.warn(f"{ws.shown(installer)} exited {done.returncode}, but `nox -s {purpose}` has all it "
                         f"needs (its output: {ws.shown(ws.runs / 'setup.log')})")
            return _emulation(ws, env, selection) if purpose == "build" else 0
        names = ", ".join(need.what for need in lacking)
        refused = f"{ws.shown(installer)} exited {done.returncode}"
        if purpose == "tests" and env.get("CI") != "true":
            log.warn(f"{refused} and this machine still lacks {names}: the tests that need them are skipped")
            return 0
        msg = f"{refused} and this machine still lacks {names}"
        raise ToolMissingError(msg, hint=f"its output is in {ws.shown(ws.runs / 'setup.log')}:\n{done.tail(15)}")
    if refused == "not root":
        fix = "run `sudo bash .ci/install-engine` (it installs and starts all of it)"
        if all(need.engine for need in lacking) and shutil.which("docker"):
            fix += ("; if the engine runs but its socket refuses you, join the docker group: "
                    "`sudo usermod -aG docker $USER`")
    else:
        fix = "; ".join(f"{need.what}: {need.install}" for need in lacking)
    msg = f"`nox -s {purpose}` needs {names}, and it installs nothing here ({refused})"
    if purpose == "tests" and env.get("CI") != "true":
        # The tests that need a missing tool skip with its name (tests/needs.py); only CI must have all.
        log.warn(f"{msg}: the tests that need them are skipped; to run them: {fix}")
        return 0
    error = EngineError if all(need.engine for need in lacking) else ToolMissingError
    raise error(msg, hint=fix)


def _emulation(ws: Workspace, env: Mapping[str, str], selection: Selection = Selection()) -> int:
    """QEMU user emulation for every CPU of the cells this build selects that is not this machine's (an arm64
    cell on x86_64, an amd64 one on an arm64 runner): registered here on Debian as root, saying what it does;
    elsewhere the fix, before any work. Cells the selection leaves out (an opt-in platform's unless named) need
    nothing here."""
    from .build import emulation  # the matrix, for a build only: `setup --for tests` starts without it
    from .matrix import load, select

    path = selection.matrix or ws.matrix
    if not path.is_file():
        return 0
    cells = [c for c in select(load(path).buildable(), list(selection.only), list(selection.skip))
             if emulation.needed(c.base.cpu)]
    for oci, cpu in {c.base.cpu.oci: c.base.cpu for c in cells}.items():
        problem = emulation.handler_problem(cpu)
        if problem is None:
            continue
        refused = can_install(env)
        if refused is None:
            log.info(f"this run builds {oci} cells and {problem}: setting up QEMU user emulation")
            problem = emulation.register(cpu, log.info, ws.runs / "setup.log")
        if not problem:
            continue
        msg = f"this run builds {oci} cells, which this machine builds only under emulation: {problem}"
        why = f" (it installs nothing here: {refused})" if refused else ""
        raise ToolMissingError(msg + why, hint=emulation.FIX.format(qemu=cpu.qemu)
                               + "; or leave them out (`--skip`), or build them on a machine of their CPU")
    return 0
