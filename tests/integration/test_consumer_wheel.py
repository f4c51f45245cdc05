"""The package users install, as they install it: the sdist and the wheel built from this tree (`python -m build`:
the wheel from the sdist, as the release job builds them), the wheel installed into a clean venv with its base
dependencies alone (no `build` extra) from the package index, and its `sglang-images` console script run from an
empty folder with PYTHONPATH unset, so that nothing of this checkout can be imported by it.

Against a loopback registry holding indexes of two platforms with real signed verdicts (tests/attest_world.py):
`check` passes the good one, and refuses a tampered and a missing verdict with the findings and exit codes of
`check` run from this checkout; the CT export of a tag is an OCI archive that `check` vouches for. The package
index is needed (the build's setuptools, the base dependencies): without it the tests skip, and fail under CI=true.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
from packaging.requirements import Requirement

from buildscripts.registry import through_engine
from buildscripts.trust import carried, verdicts
from tests import needs
from tests.attest_world import NOT_VERIFIED, World, attach_directly, fixtures
from tests.cli import cli
from tests.registry_writer import RegistryWriter

pytestmark = pytest.mark.registry
world = fixtures("wheel")[0]   # a registry of its own for this module
ROOT = Path(__file__).resolve().parents[2]
# The build system's own dependencies (the `build` extra): a user who only pulls images never installs them.
BUILD_EXTRA = {"testcontainers", "numpy", "safetensors", "cyclonedx-python-lib"}
# What would let the installed script import this checkout, or another environment's packages, instead of its own.
# How old a verdict is, as `check` says it beside its signing time (trust/freshness.py).
AGE = re.compile(r" \(\d+ \w+ (?:ago|ahead of this machine's clock)\)")
LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in LEAKS}, **(extra or {})}


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env or clean_env(), timeout=timeout)


@dataclass(frozen=True)
class Installed:
    """A venv of its own, run from an empty folder with nothing of the checkout reachable."""

    venv: Path
    cwd: Path

    def python(self, code: str) -> Any:
        done = run([str(self.venv / "bin" / "python"), "-c", code], cwd=self.cwd)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        """pip of the venv, with the machine's pip configuration (its index), as `pipx install` uses it."""
        return run([str(self.venv / "bin" / "python"), "-m", "pip", *args], cwd=self.cwd)

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run([str(self.venv / "bin" / "sglang-images"), *args], cwd=self.cwd, env=clean_env(env))


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A new venv (the standard library's, with its own pip), the package index reachable from it."""
    folder = tmp_path_factory.mktemp("user")
    made = Installed(folder / "venv", folder / "elsewhere")
    made.cwd.mkdir()
    done = run([sys.executable, "-m", "venv", str(made.venv)], cwd=made.cwd)
    assert done.returncode == 0, done.stderr
    # The build's isolated environment and the base dependencies come from the package index: reachable, or this
    # is a skip (a failure under CI=true).
    probe = made.pip("download", "--quiet", "--no-deps", "--dest", str(folder / "probe"), "setuptools>=69")
    if probe.returncode != 0:
        needs.unavailable("the package index", f"pip could not fetch setuptools: {probe.stderr.strip()[-300:]}")
    return made


@pytest.fixture(scope="module")
def dists(user_venv: Installed, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel of this tree, built as the release job builds them: (sdist, wheel)."""
    if importlib.util.find_spec("build") is None:
        needs.unavailable("the build package", "install the test extra: `pip install -e '.[build,test]'`")
    out = tmp_path_factory.mktemp("dist")
    done = run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return sdist, wheel


@pytest.fixture(scope="module")
def installed(user_venv: Installed, dists: tuple[Path, Path]) -> Installed:
    """`pip install WHEEL` into the new venv: the base dependencies alone, as `pipx install sglang-images` does."""
    done = user_venv.pip("install", "--quiet", str(dists[1]))
    assert done.returncode == 0, done.stderr[-3000:]
    return user_venv


def check_both(world: World, installed: Installed, *args: str) -> subprocess.CompletedProcess[str]:
    """`check ARGS --json` from the wheel, which must say what `check` of this checkout says (the same JSON
    findings, the same exit code); the wheel's answer."""
    key = ("--key", str(world.verifier_pub))
    ours = installed("check", *args, "--json", *key, env=world.checker_env)
    theirs = cli("check", *args, "--json", *key, env=world.checker_env, timeout=300)
    assert "Traceback" not in ours.stderr, ours.stderr
    assert (ours.returncode, findings(ours)) == (theirs.returncode, findings(theirs))
    return ours


def findings(done: subprocess.CompletedProcess[str]) -> Any:
    """`check --json`'s findings, less the age each verdict is said to have now (`(3 s ago)`): the two checks
    run a second or two apart; and less what each reader's own state folder says it saw before (`seen`)."""
    found = json.loads(AGE.sub("", done.stdout) or "null")
    return [{k: v for k, v in f.items() if k != "seen"} for f in found] if isinstance(found, list) else found


# ---------------------------------------------------------------- the package itself


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(dists: tuple[Path, Path]) -> None:
    tracked = run(["git", "ls-files", "-z", "buildscripts"], cwd=ROOT)
    if tracked.returncode != 0:
        needs.unavailable("a git checkout", "run the tests from a clone of the repository")
    files = {f for f in tracked.stdout.split("\0") if f and (ROOT / f).is_file()}
    names = set(zipfile.ZipFile(dists[1]).namelist())
    assert {"buildscripts/data/gpus.yaml", "buildscripts/data/failures.yaml", "buildscripts/probe/__main__.py"} <= files
    assert files - names == set()   # the data files the commands read, the probe's sources: all of it
    ours = {n for n in names if not n.startswith("buildscripts/")}
    assert {n.split("/", 1)[0] for n in ours} == {dists[1].name.split("-py3")[0] + ".dist-info"}


def test_the_install_is_the_users_alone(installed: Installed) -> None:
    """No dependency of the build system, no checkout: `buildscripts` is the venv's own copy."""
    where = installed.python("import buildscripts, json, sys, sysconfig; "
                             "print(json.dumps([buildscripts.__file__, sysconfig.get_path('purelib'), sys.path]))")
    module, site, path = Path(where[0]).resolve(), Path(where[1]).resolve(), where[2]
    assert module.is_relative_to(site) and site.is_relative_to(installed.venv.resolve())
    assert not any((installed.cwd / p).resolve().is_relative_to(ROOT) for p in path)   # "" is its cwd
    found = {d["name"].lower() for d in installed.python(
        "import json, importlib.metadata as m; print(json.dumps([{'name': d.metadata['Name']} "
        "for d in m.distributions()]))")}
    assert "sglang-images" in found and found & BUILD_EXTRA == set()
    requires = installed.python("import json, importlib.metadata as m; print(json.dumps(m.requires('sglang-images')))")
    assert {Requirement(r).name for r in requires if 'extra == "build"' in r} == BUILD_EXTRA
    assert installed("--help").returncode == 0


# ---------------------------------------------------------------- `check` against a registry


@dataclass(frozen=True)
class Index:
    tag: str
    amd64: str
    arm64: str


# What the build labels an image with, as `here` reads it (buildscripts/here/candidates.py): a cu130 cell for sm_100a.
CELL_LABELS = {"io.sglang-images.cell": "sglang0.5.16-torch2.11.0-cu130-pip-bookworm",
               "io.sglang-images.sglang": "0.5.16",
               "io.sglang-images.cuda": "cu130", "io.sglang-images.archs": "sm_100a"}
# A B200 host's nvidia-smi, as the verifier queries it (tests/unit/data/machines/b200-host): R580, sm_100.
B200_SMI = """#!/bin/sh
echo "0, NVIDIA B200, GPU-00000000-b200-4000-8000-00000000b200, 10.0, 580.82.07, 183359"
"""


def two_platforms(world: World, name: str) -> Index:
    """A tiny image and its arm64 twin (its config rewritten, every digest to match) under one index `name`."""
    amd64 = world.push(f"{name}-amd64", labels=CELL_LABELS)
    writer = RegistryWriter(world.server.url)
    arm64 = writer.rewrite_config(world.name, amd64, f"{name}-arm64", architecture="arm64", variant="v8")
    writer.index(world.name, name, {"linux/amd64": amd64, "linux/arm64/v8": arm64})
    return Index(f"{world.repository}:{name}", amd64, arm64)


def promote(world: World, digest: str) -> list[Path]:
    """A verdict for `digest` that a verifier signed, attached by the promote side's own function."""
    files = world.sign(digest)
    assert verdicts.attach_verdicts(files, world.ref(digest), trusted=world.trusted()) == files
    return files


def tamper(world: World, files: list[Path], digest: str) -> None:
    """The signed verdict with its claims edited (the arch it names, and the stages) and its signature kept,
    attached by hand as anyone who can write the registry can."""
    envelope = json.loads(files[0].read_text())
    document = json.loads(base64.b64decode(envelope["payload"]))
    claims = document["predicate"]
    claims["arch"], claims["passedTests"] = "sm_120a", [t.replace("sm_100a", "sm_120a") for t in claims["passedTests"]]
    attach_directly(world, {**envelope, "payload": base64.b64encode(json.dumps(document).encode()).decode()}, digest)


@pytest.fixture(scope="module")
def indexes(world: World) -> dict[str, Index]:
    """good: both platforms verified. tampered: linux/amd64's verdict edited after signing (and only that one).
    missing: linux/arm64 has none."""
    good, tampered, missing = (two_platforms(world, n) for n in ("good-index", "tampered-index", "missing-index"))
    for digest in (good.amd64, good.arm64, tampered.arm64, missing.amd64):
        promote(world, digest)
    tamper(world, world.sign(tampered.amd64), tampered.amd64)
    return {"good": good, "tampered": tampered, "missing": missing}


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64"])
def test_check_from_the_wheel_passes_a_verified_index(world: World, installed: Installed,
                                                      indexes: dict[str, Index], platform: str) -> None:
    good = indexes["good"]
    done = check_both(world, installed, good.tag, "--platform", platform)
    assert done.returncode == 0, done.stderr
    found = {f["platform"]: f for f in json.loads(done.stdout)}
    assert set(found) == {"linux/amd64", "linux/arm64/v8"} and all(f["verified"] for f in found.values())
    assert found["linux/arm64/v8"]["digest"] == good.arm64 and list(found["linux/amd64"]["archs"]) == ["sm_100a"]


def test_check_from_the_wheel_refuses_a_tampered_verdict(world: World, installed: Installed,
                                                         indexes: dict[str, Index]) -> None:
    tampered = indexes["tampered"]
    done = check_both(world, installed, tampered.tag, "--platform", "linux/amd64")
    assert done.returncode == NOT_VERIFIED
    found = {f["platform"]: f for f in json.loads(done.stdout)}
    assert not found["linux/amd64"]["verified"] and found["linux/arm64/v8"]["verified"]
    assert any("no valid signature by a trusted key" in reason for reason in found["linux/amd64"]["ignored"])
    assert f"is not verified for {tampered.amd64} (linux/amd64)" in done.stderr


def test_check_from_the_wheel_refuses_a_missing_verdict(world: World, installed: Installed,
                                                        indexes: dict[str, Index]) -> None:
    missing = indexes["missing"]
    done = check_both(world, installed, missing.tag, "--platform", "linux/arm64")
    assert done.returncode == NOT_VERIFIED
    assert f"is not verified for {missing.arm64} (linux/arm64/v8): no valid signed verdict is attached" in done.stderr
    assert check_both(world, installed, missing.tag, "--platform", "linux/amd64").returncode == 0


# ---------------------------------------------------------------- the way into a CT


@pytest.fixture
def pulled(world: World, indexes: dict[str, Index], client: docker.DockerClient) -> Iterator[str]:
    """The good index's tag, pulled into the engine as a user pulls it before exporting it."""
    tag = indexes["good"].tag
    world.images.append(through_engine.pull(client, tag))
    yield tag


def test_the_ct_export_from_the_wheel_is_an_archive_check_vouches_for(world: World, installed: Installed,
                                                                     indexes: dict[str, Index], pulled: str) -> None:
    out = installed.cwd / "exports"
    done = installed("export", pulled, "--out", str(out), "--name", "good", "--force",
                     "--trust-key", str(world.verifier_pub), env=world.checker_env)
    assert done.returncode == 0, done.stderr
    archive = out / "good.oci.tar"
    assert carried.sidecar(archive).is_file() and (out / "good.proxmox.md").is_file()
    checked = check_both(world, installed, f"oci-archive:{archive}")
    assert checked.returncode == 0, checked.stderr
    (found,) = json.loads(checked.stdout)
    assert found["digest"] == indexes["good"].amd64 and list(found["archs"]) == ["sm_100a"]


# ---------------------------------------------------------------- `here`


def test_here_from_the_wheel_answers_for_this_machine(world: World, installed: Installed,
                                                      indexes: dict[str, Index], tmp_path: Path) -> None:
    """`here` without a source says what it read of this machine and what it needs; on a machine whose nvidia-smi
    says B200 (R580), given the registry's repository and a tag, it names the good index's linux/amd64 digest,
    verified on sm_100a by its signed verdict, and the `docker run` line pinned to it; the tampered index is refused
    as `check` refuses it."""
    alone = installed("here", env=world.checker_env)
    assert "Traceback" not in alone.stderr and alone.returncode == 2, alone.stderr
    assert "registry repository or a results file" in alone.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(B200_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**world.checker_env, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    key = ["--trust-key", str(world.verifier_pub)]
    done = installed("here", "--repository", world.repository, "--tag", "good-index", *key, "--json", env=env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert indexes["good"].amd64 in done.stdout and "docker run" in json.dumps(found), found
    refused = installed("here", "--repository", world.repository, "--tag", "tampered-index", *key, env=env)
    assert refused.returncode == NOT_VERIFIED, refused.stderr


# ---------------------------------------------------------------- verify --here from the wheel


def test_verify_here_from_the_wheel_says_what_the_base_install_lacks(installed: Installed) -> None:
    """The ladder's host side (the tiny model, its reference decode) needs the `build` extra: the base install says
    which distributions are missing and how to add them, before any stage, with no traceback."""
    done = installed("verify", "--here", "--python", sys.executable, "--stages", "facts,import")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "numpy" in done.stderr and "sglang-images[build]" in done.stderr


def test_verify_here_from_the_wheel_runs_the_ladder_in_place(user_venv: Installed, dists: tuple[Path, Path],
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """With the extra (`pipx install 'sglang-images[build]'`), installed in a folder others cannot pass (as pipx
    installs under root's 0700 home: the probe travels as a copy in the run's folder), from an empty folder: no
    matrix.yaml there, so the matrix the wheel carries gives the plan; this machine's Python has no SGLang, so the
    ladder in place fails at import with its class, and the record says so under runs/ of that folder."""
    folder = tmp_path_factory.mktemp("with-extra")   # pytest's folders are 0700: the venv's place, as root's home
    # The folder the command runs in holds runs/, which the code under test's identity must reach.
    cwd = Path(tempfile.mkdtemp(prefix="sglang-images-here-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None))
    cwd.chmod(0o755)
    user = Installed(folder / "venv", cwd)
    assert run([sys.executable, "-m", "venv", str(user.venv)], cwd=user.cwd).returncode == 0
    done = user.pip("install", "--quiet", f"{dists[1]}[build]")
    assert done.returncode == 0, done.stderr[-3000:]
    python = Path("/usr/bin/python3")   # the system's: the identity the code under test runs as must reach it
    if not python.is_file():
        needs.unavailable("the system Python", "install python3 (Debian: apt-get install python3)")
    done = user("verify", "--here", "--python", str(python), "--stages", "facts,import", "--run-id", "here")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode not in (0, 2), done.stderr   # a verification that ran and failed, not bad arguments
    record = json.loads((user.cwd / "runs" / "here" / "results.json").read_text())
    cell = record["cells"][0]
    assert cell["verdict"] == "failed" and "required-module-missing" in cell["verdict_reason"], cell
    assert record["matrix_digest"].startswith("sha256:")
    shutil.rmtree(cwd)
