"""Bad input through the real CLI: a clear message, a non-zero exit, no traceback, nothing built."""

from __future__ import annotations

import os
import subprocess
import uuid
from contextlib import closing
from functools import partial
from pathlib import Path

import docker
import pytest

from buildscripts import engine as engines
from buildscripts.build import base
from buildscripts.errors import DiskSpaceError, EngineError, ToolMissingError
from buildscripts.matrix import schema as config
from tests.cli import cli as run_cli
from tests.session import OWNER

ROOT = Path(__file__).resolve().parents[2]
cli = partial(run_cli, timeout=120)  # every error here is answered within seconds


def owner() -> dict[str, str]:
    """A name of its own for what one command builds: everything `build` makes carries it (build/base.py)."""
    return {base.OWNER_ENV: f"{OWNER}-{uuid.uuid4().hex[:8]}"}


def images_of(made_by: dict[str, str]) -> list[str]:
    """The images that carry `made_by`'s owner label. Not a diff of the engine's whole list: other tests build
    and remove images beside these (`nox -s tests` runs the tiers in parallel)."""
    with closing(docker.from_env()) as client:
        return sorted(str(i.id) for i in client.images.list(
            filters={"label": f"{base.OWNER_LABEL}={made_by[base.OWNER_ENV]}"}))


def bases_named(name: str) -> list[str]:
    with closing(docker.from_env()) as client:
        return [t for i in client.images.list(name=base.BASE_REPOSITORY) for t in i.tags
                if t.startswith(f"{base.BASE_REPOSITORY}:{name}-")]


def assert_clean_failure(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_bad_matrix_file_builds_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text((ROOT / "matrix.yaml").read_text().replace("archs: [sm_90a,", "archs: [sm_9x,"))
    made_by = owner()
    assert_clean_failure(cli("build", "--matrix", str(bad), env=made_by), 2, "'sm_9x' is not a GPU target", "line ")
    assert images_of(made_by) == []


def test_selection_matching_nothing() -> None:
    assert_clean_failure(cli("build", "--only", "nothing-*"), 3, "matches no buildable cell", "hint:")
    assert_clean_failure(cli("matrix", "--only", "nothing-*"), 3, "matches no buildable cell")


def test_user_text_in_messages_is_shown_literally() -> None:
    """Names and references the user typed are never read as console markup (which ate or crashed on them)."""
    assert_clean_failure(cli("verify", "--lxc-name", "[/]"), 2, "--lxc-name '[/]' is not an LXC container name")
    assert_clean_failure(cli("export", "[bold]x"), 2, "'[bold]x' is not an image reference")


def test_unreachable_engine_is_one_clear_error() -> None:
    done = cli("build", "--only", "sglang0.5.16-*-pip-*", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_clean_failure(done, 4, "Docker engine is not reachable", "hint:")


def test_missing_buildx_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "docker"  # a docker CLI that knows no buildx, first on PATH
    fake.write_text("#!/bin/sh\necho \"docker: 'buildx' is not a docker command.\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(EngineError, match="buildx plugin is missing"):
        engines.check(engines.connect())


def test_missing_mmdebstrap_builds_no_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find
    spec = config.Base(debootstrap=config.Debootstrap(suite="bookworm", include=("nonexistent-pkg-for-test",)),
                       python="3.11", platform="x86_64-manylinux_2_36")
    made_by = owner()
    with pytest.raises(ToolMissingError, match="'mmdebstrap' was not found"):
        base.ensure("missing-tool-test", spec, client=docker.from_env(), logs=tmp_path,
                    labels={base.OWNER_LABEL: made_by[base.OWNER_ENV]})
    assert images_of(made_by) == [] and bases_named("missing-tool-test") == []


def test_no_space_left(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engines.check(engines.connect())

    class Usage:
        free = 1024**3

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage)
    with pytest.raises(DiskSpaceError, match=r"only 1\.0 GB free"):
        engines.check_disk(engine, cells=1)


def test_hostile_matrix_files_through_the_real_cli(tmp_path: Path) -> None:
    """A FIFO would block a read forever; a duplicate key was silently dropped; markup ate user text."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert_clean_failure(cli("matrix", "--matrix", str(fifo), timeout=30), 2, "not a regular file")
    text = (ROOT / "matrix.yaml").read_text()
    dup = tmp_path / "dup.yaml"
    dup.write_text(text.replace("schema: 1\n", "schema: 1\nschema: 1\n", 1))
    assert_clean_failure(cli("build", "--matrix", str(dup)), 2, "duplicate key 'schema'")
    markup = tmp_path / "markup.yaml"
    markup.write_text(text.replace("archs: [sm_90a,", "archs: ['[bold]sm_90a', '[/]',"))
    assert_clean_failure(cli("matrix", "--matrix", str(markup)), 2, "'[bold]sm_90a' is not a GPU target")
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes(text.encode("utf-16"))
    assert_clean_failure(cli("lock", "--check", "--matrix", str(utf16)), 2, "is UTF-16")


def test_names_that_would_leave_runs_are_refused_before_anything_runs() -> None:
    """Refused with exit 2 before the engine is asked anything (it is shared: its image list is no witness)."""
    assert_clean_failure(cli("verify", "busybox", "--run-id", "../../escape"), 2, "--run-id '../../escape'")
    assert_clean_failure(cli("verify", "busybox", "--cell-id", "a/../../b"), 2, "cannot be a folder name")
    assert_clean_failure(cli("build", "--only", "sglang0.5.16-*-pip-*", "--run-id", ".."), 2, "run id '..'")
    assert_clean_failure(cli("verify", "busybox", "--stage-timeout", "-1"), 2, "is not a number of seconds")
    assert_clean_failure(cli("verify", "busybox", "--archs", "sm_999"), 2, "'sm_999' is not a known GPU target")
    assert_clean_failure(cli("verify", "busybox", "--shm-size", "lots"), 2, "is not a size as docker's --shm-size")
    assert not (ROOT / "escape").exists() and not (ROOT / "runs" / "..").resolve().joinpath("b").exists()


def test_report_and_lock_check_on_hostile_files(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_bytes(b"[" * 100_000)
    assert_clean_failure(cli("report", "--no-readme", "--results", str(bad), "--out", str(tmp_path / "r")), 8,
                         "nested deeper than 64 levels")
    (tmp_path / "file").write_text("x")
    assert_clean_failure(cli("report", "--no-readme", "--out", str(tmp_path / "file")), 2, "is a file, not a folder")
