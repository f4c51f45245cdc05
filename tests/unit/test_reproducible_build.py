"""What makes a build come out the same, without an engine: the base image's config (the bytes its id is the hash
of), the builder's BuildKit version and the output flags of a stamped build."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from buildscripts import proc
from buildscripts.build import buildx, cache, imagearchive, rootfs
from buildscripts.errors import BaseBuildError

SPEC = imagearchive.Spec(platform="linux/amd64", env=("PATH=/usr/bin",), labels={"b": "2", "a": "1"},
                         epoch=1783764997, created_by="mmdebstrap --variant=minbase bookworm (python3)")


def layer(tmp_path: Path, payload: bytes = b"hello\n") -> Path:
    source = tmp_path / "layer.tar"
    with tarfile.open(source, "w") as tar:
        info = tarfile.TarInfo("etc/hello")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return source


def test_the_config_is_one_string_of_bytes_whose_hash_is_the_id(tmp_path: Path) -> None:
    source = layer(tmp_path)
    first = imagearchive.write(source, SPEC, tmp_path / "a.tar", tag="x/base:1")
    again = imagearchive.write(source, SPEC, tmp_path / "b.tar", tag="x/base:2")   # the tag is not in the id
    assert first == again
    with tarfile.open(tmp_path / "a.tar") as archive:
        manifest = json.loads(archive.extractfile("manifest.json").read())   # type: ignore[union-attr]
        config = archive.extractfile(manifest[0]["Config"]).read()            # type: ignore[union-attr]
    assert "sha256:" + hashlib.sha256(config).hexdigest() == first
    body = json.loads(config)
    assert body["created"] == "2026-07-11T10:16:37Z" == body["history"][0]["created"]
    assert body["rootfs"]["diff_ids"] == [imagearchive.sha256_of(source)]
    assert (body["architecture"], body["os"], "variant" in body) == ("amd64", "linux", False)


def test_what_the_image_says_changes_its_id(tmp_path: Path) -> None:
    source = layer(tmp_path)
    ids = {imagearchive.write(source, spec, tmp_path / "x.tar", tag="x:1") for spec in (
        SPEC, SPEC.__class__(**{**SPEC.__dict__, "epoch": SPEC.epoch + 1}),
        SPEC.__class__(**{**SPEC.__dict__, "labels": {"a": "1"}}),
        SPEC.__class__(**{**SPEC.__dict__, "platform": "linux/arm64"}))}
    other = tmp_path / "other"
    other.mkdir()
    ids.add(imagearchive.write(layer(other, b"other\n"), SPEC, tmp_path / "y.tar", tag="x:1"))
    assert len(ids) == 5


def test_an_arm64_base_says_so_in_its_config() -> None:
    body = json.loads(imagearchive.config(SPEC.__class__(**{**SPEC.__dict__, "platform": "linux/arm64"}), "sha256:0"))
    assert (body["architecture"], body["variant"]) == ("arm64", "v8")


def helper(tmp_path: Path) -> Path:
    """A stand-in for apt's apt-helper (proc.run is faked: it only has to be there)."""
    path = tmp_path / "apt-helper"
    path.write_text("")
    return path


def test_the_release_date_is_the_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def download(argv: Sequence[str], **_: object) -> proc.Completed:
        Path(argv[-1]).write_text("-----BEGIN PGP SIGNED MESSAGE-----\nOrigin: Debian\n"
                                  "Date: Sat, 11 Jul 2026 10:16:37 UTC\nSuite: stable\n")
        assert argv[-2] == "http://mirror.invalid/debian/dists/bookworm/InRelease"
        return proc.Completed(tuple(argv), 0, "", 0.1)

    monkeypatch.setattr(proc, "run", download)
    monkeypatch.setattr(rootfs, "APT_HELPER", helper(tmp_path))
    assert rootfs.release_epoch("http://mirror.invalid/debian", "bookworm", log=tmp_path / "log") == (
        1783764997, "Sat, 11 Jul 2026 10:16:37 UTC")


CLASSIC = {"ServerVersion": "20.10.24", "DriverStatus": [["Backing Filesystem", "extfs"]]}
CONTAINERD_26 = {"ServerVersion": "26.1.5", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
CONTAINERD_25 = {"ServerVersion": "25.0.3", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}


@pytest.mark.parametrize(("inspect", "info", "version", "rewrites"), [
    ("Driver: docker\nNodes:\nName: default\nBuildKit version: v0.8+unknown\n", CLASSIC, "v0.8+unknown", False),
    # Debian's docker.io 26 names no version: the engine's release says it vendors BuildKit 0.13
    ("Driver: docker\nNodes:\nName: default\nBuildKit version: v0.0.0+unknown\n", CONTAINERD_26, "v0.0.0+unknown",
     True),
    ("Driver: docker\nNodes:\nName: default\nBuildKit version: v0.12.5\n", CONTAINERD_25, "v0.12.5", False),
    # the classic store takes no docker archive from its own builder, whatever its BuildKit
    ("Driver: docker\nNodes:\nName: default\nBuildKit version: v0.13.2\n", CLASSIC, "v0.13.2", False),
    ("Driver: docker-container\nNodes:\nBuildkit:  v0.20.1\n", CLASSIC, "v0.20.1", True),
    ("Driver: docker-container\nNodes:\nBuildkit:  v0.12.0\n", CLASSIC, "v0.12.0", False),
    ("Driver: docker\nNodes:\nName: default\n", CLASSIC, "", False),
])
def test_the_builder_says_whether_it_can_rewrite_timestamps(monkeypatch: pytest.MonkeyPatch, inspect: str,
                                                            info: dict[str, object], version: str,
                                                            rewrites: bool) -> None:
    monkeypatch.setattr(proc, "run", lambda argv, **_: proc.Completed(tuple(argv), 0, inspect, 0.1))
    found = cache.builder(None, info)
    assert (found.buildkit, found.rewrites_timestamps) == (version, rewrites)


def test_a_builder_that_rewrites_names_its_own_output_instead_of_load() -> None:
    assert cache.Builder("b", "docker-container", exports_cache=True).args() == ["--builder", "b", "--load"]
    assert cache.Builder("b", "docker-container", exports_cache=True, rewrites_timestamps=True).args() == [
        "--builder", "b"]


def test_a_stamped_build_writes_an_archive_and_an_unstamped_one_is_as_today(tmp_path: Path) -> None:
    with buildx.reproducible_output(None, tmp_path) as plain:
        assert plain == buildx.Output()
    with buildx.reproducible_output(1783764997, tmp_path) as stamped:
        assert stamped.archive is not None and stamped.archive.parent.parent == tmp_path
        assert list(stamped.args) == ["--build-arg", "SOURCE_DATE_EPOCH=1783764997", "--provenance=false",
                                      "--output", f"type=docker,dest={stamped.archive},rewrite-timestamp=true"]
    assert list(tmp_path.iterdir()) == []   # the archive's folder goes with the build


@pytest.mark.parametrize("date", ['Sat, 11 Jul 2026 10:16:37 UTC"; touch /tmp/x; "', "Sat, 11 Jul 2026 10:16:37",
                                  "$(reboot)", "Sat, 11 Jul 2026 99:99:99 UTC"])
def test_a_release_date_that_is_not_a_plain_date_stops_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  date: str) -> None:
    """The Date goes into a shell hook: a mirror that writes more than a date there gets no shell."""
    def download(argv: Sequence[str], **_: object) -> proc.Completed:
        Path(argv[-1]).write_text(f"Origin: Debian\nDate: {date}\n")
        return proc.Completed(tuple(argv), 0, "", 0.1)

    monkeypatch.setattr(proc, "run", download)
    monkeypatch.setattr(rootfs, "APT_HELPER", helper(tmp_path))
    with pytest.raises(BaseBuildError, match="not an RFC 2822 date"):
        rootfs.release_epoch("http://mirror.invalid/debian", "bookworm", log=tmp_path / "log")
