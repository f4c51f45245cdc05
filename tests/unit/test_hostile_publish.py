"""Hostile values for `tag`, `promote`, `verify`, `export` and matrix.yaml (issue 27): what would fail after the
harm is done is said before it; references Docker refuses are refused as bad references; nothing selected,
empty or stray-newline values are errors, not silent defaults; no password is echoed."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from buildscripts import engine, matrix, proc, results
from buildscripts.build import cache
from buildscripts.commands import export as export_command
from buildscripts.commands import promote as promote_command
from buildscripts.commands import tag as tag_command
from buildscripts.commands import verify as verify_command
from buildscripts.errors import ConfigError, DiskSpaceError, ExportError, RegistryError, ResultsError, SelectionError
from buildscripts.publish import oci_export, recorded, tags
from buildscripts.registry import through_engine
from buildscripts.trust.keys import KEY_DIR_ENV
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import make_run, sealed

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A workspace with the project's matrix and a results file of a verified cell and two others of that
    matrix, sealed; the engine unreachable."""
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    run = make_run(kinds=("verified", "expected-failure", "incompatible"))
    run.matrix_digest = results.matrix_digest(matrix.load(ROOT / "matrix.yaml").spec)
    run.cells = [sealed(cell, matrix_digest=run.matrix_digest) for cell in run.cells]
    results.save(run, tmp_path / "runs" / "r" / "results.json")

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the engine was contacted before the arguments were checked")
    monkeypatch.setattr(engine, "connect", refuse)
    return Workspace.at(tmp_path)


def results_file(ws: Workspace) -> str:
    return str(ws.runs / "r" / "results.json")


def unwritable(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`folder` refuses new files, as a read-only mount does (root ignores permission bits, so they won't do)."""
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if Path(kwargs.get("dir", "")) == folder:
            raise PermissionError(errno.EROFS, "Read-only file system", str(folder))
        made: tuple[int, str] = real(*args, **kwargs)
        return made
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


# ---------------------------------------------------------------- tag and promote


def test_tag_only_matching_nothing_is_an_error(ws: Workspace) -> None:
    with pytest.raises(SelectionError, match="--only 'nothing-\\*' matches no cell of"):
        call(tag_command, ["--results", results_file(ws), "--only", "nothing-*"], ws, {})


def test_tag_checks_the_results_file_writable_before_tagging(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    unwritable(ws.runs / "r", monkeypatch)
    with pytest.raises(ConfigError, match="Read-only file system") as exc:
        call(tag_command, ["--results", results_file(ws)], ws, {})
    assert "--results" in exc.value.message


def test_a_save_that_fails_after_tagging_names_the_tags(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "connect", object)
    monkeypatch.setattr(tags, "apply_good_tags", lambda client, cell, cfg: ["sglang-images:good"])

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(results, "save", full)
    with pytest.raises(ResultsError) as exc:
        call(tag_command, ["--results", results_file(ws)], ws, {KEY_DIR_ENV: os.environ[KEY_DIR_ENV]})
    assert "was tagged sglang-images:good, but it could not be recorded" in exc.value.message
    assert "No space left on device" in exc.value.message


def test_promote_checks_selection_and_writability_before_pushing(ws: Workspace,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["--registry", "127.0.0.1:5000", "--results", results_file(ws)]
    with pytest.raises(SelectionError, match="matches no cell"):
        call(promote_command, [*base, "--only", "nothing-*"], ws, {})
    unwritable(ws.runs / "r", monkeypatch)
    with pytest.raises(ConfigError, match="Read-only file system"):
        call(promote_command, base, ws, {})


def test_a_selection_across_files_needs_a_match_in_one_of_them() -> None:
    runs = {Path("a.json"): make_run(kinds=("verified",)), Path("b.json"): make_run(kinds=("failed",))}
    recorded.check_selection(runs, ["*-pip-bookworm"])  # in a.json only: fine
    with pytest.raises(SelectionError, match=r"matches no cell of a\.json, b\.json"):
        recorded.check_selection(runs, ["nothing"])


@pytest.mark.parametrize("url", ["user:hunter2@ghcr.io", "https://bob:hunter2@ghcr.io/org", "a:hunter2@b:c@host"])
def test_a_registry_with_credentials_is_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(RegistryError) as exc:
        through_engine.check_url(url)
    assert "hunter2" not in str(exc.value) and "***@" in exc.value.message


@pytest.mark.parametrize("url", ["127.0.0.1:５０００", "host:5000\n/ns"])
def test_a_registry_url_is_ascii_and_one_line(url: str) -> None:
    with pytest.raises(RegistryError):
        through_engine.check_url(url)


# ---------------------------------------------------------------- verify


@pytest.mark.parametrize(("image", "needle"), [
    (" ", "it is empty"), ("Foo", "lower case"), ("img@sha256:abc", "64 hex digits"),
    ("a\nb", "line break"), ("x" * 5000, "longer than 255"), ("../../etc/passwd", "'..' path component"),
    ("http://host/img", "no scheme"), ("host:99999/img", "port 99999"),
])
def test_a_bad_image_reference_is_said_to_be_one(image: str, needle: str, ws: Workspace) -> None:
    with pytest.raises(ConfigError) as exc:
        call(verify_command, [image], ws, {})
    assert "is not an image reference" in exc.value.message and needle in exc.value.message
    assert "engine" not in str(exc.value)


def test_an_empty_image_is_a_usage_error(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        call(verify_command, [""], ws, {})
    assert "give an IMAGE" in capsys.readouterr().err


def test_verify_host_with_an_empty_python_is_refused(ws: Workspace) -> None:
    with pytest.raises(ConfigError, match="--python '' names no interpreter"):
        call(verify_command, ["--host", "--python", ""], ws, {})


@pytest.mark.parametrize("where", ["folder", "below-a-file"])
def test_verify_out_is_checked_before_the_ladder(where: str, ws: Workspace) -> None:
    (ws.root / "a-file").write_text("x")
    out = ws.root if where == "folder" else ws.root / "a-file" / "results.json"
    with pytest.raises(ConfigError, match="is a folder" if where == "folder" else "a-file is a file, not a folder"):
        call(verify_command, ["some-image", "--out", str(out)], ws, {})


# ---------------------------------------------------------------- export


def test_export_name_too_long_is_refused_before_the_engine(ws: Workspace) -> None:
    with pytest.raises(ConfigError, match="at most 237 fit a file name"):
        call(export_command, ["some-image", "--name", "a" * 300], ws, {})


@pytest.mark.parametrize("what", ["a\nb", "", " ", "../../etc/passwd", "Foo Bar"])
def test_export_of_no_reference_and_no_cell_says_so(what: str) -> None:
    with pytest.raises(ConfigError, match=r"is not an image reference.*nor a cell id"):
        oci_export.resolve(object(), what)  # type: ignore[arg-type]  # never reaches the client


@pytest.mark.parametrize(("free", "need", "says"), [(512, 2_000, "only 512 bytes free"),
                                                   (40_000_000, 90_000_000, "needs about 90 MB")])
def test_export_space_is_said_in_units_that_fit(free: int, need: int, says: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(free * 2, free, free))
    with pytest.raises(DiskSpaceError, match=says) as exc:
        oci_export.check_target(tmp_path, need)
    assert "0.0 GB" not in exc.value.message


def test_a_disk_that_fills_during_export_is_an_export_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Image:
        id = "sha256:" + "ab" * 32
        labels: ClassVar[dict[str, str]] = {}
        attrs: ClassVar[dict[str, int]] = {"Size": 10}

    def full(skopeo: str, image: object, work: Path, out: Path, *rest: object) -> str:
        work.mkdir()
        (work / "x.oci.tar").write_bytes(b"half an archive")
        raise OSError(errno.ENOSPC, "No space left on device", str(work / "x.oci.tar"))
    monkeypatch.setattr(proc, "which", lambda name, hint: "/bin/true")
    monkeypatch.setattr(oci_export, "_made", full)
    with pytest.raises(ExportError, match="No space left on device") as exc:
        oci_export.export(object(), Image(), tmp_path, oci_export.Archive(name="x"))  # type: ignore[arg-type]
    assert "free space there" in str(exc.value) and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- matrix.yaml values


def load_with(change: dict[str, object], tmp_path: Path) -> str:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data.update(change)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        matrix.load(path, {})
    return exc.value.message


@pytest.mark.parametrize("ref", ["a//b", "a/../b", "host:65536/cache", "host:abc/cache", "127.0.0.1:abc/cache",
                                 "http://host/cache", "a" * 300, "Host/Cache", "host/cache:tag"])
def test_cache_refs_docker_refuses_are_refused(ref: str, tmp_path: Path) -> None:
    assert "cache.ref" in load_with({"cache": {"ref": ref}}, tmp_path)


def test_a_malformed_registry_host_does_not_crash_the_reachability_check() -> None:
    """`127.0.0.1:abc` once raised http.client.InvalidURL out of the build; now a reason (and refused earlier)."""
    assert "did not answer" in str(cache.unreachable("127.0.0.1:abc/cache", timeout=1))


@pytest.mark.parametrize("runners", [{"default": ["gpu\n"]}, {"default": ["self-hosted", "gpu\n"]}])
def test_a_runner_label_with_a_trailing_newline_is_refused(runners: dict[str, object], tmp_path: Path) -> None:
    assert "runner label" in load_with({"runners": runners}, tmp_path)


def test_a_tag_repository_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    assert "not a valid repository name" in load_with({"tags": {"repository": "sglang-images\n"}}, tmp_path)
