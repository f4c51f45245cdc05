"""`compare IMAGE_A IMAGE_B` on real images of the engine: tiny FROM-scratch images that differ in one way each
(an mtime, a .pyc of the same source, the order of a layer's members, a file's bytes) are told apart by that
reason, and two loads of the same layer are identical (exit 0); a difference exits 22 (docs/exit-codes.md).
The images are made as the bases are (build/imagearchive.py: a config without the time of making), so that
nothing but the intended difference is there; each carries this session's owner label and is removed after."""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from buildscripts.build import base, imagearchive
from tests.cli import cli
from tests.session import OWNER

PYC = b"\xa7\r\r\n" + b"\0" * 4   # 3.11's magic, flags 0
FILES: list[tuple[str, bytes, int]] = [
    ("app/m.py", b"print('hello')\n", 1000), ("app/__pycache__/m.cpython-311.pyc", PYC + b"s1\0\0\0\0\0\0CODE", 1000),
    ("etc/conf", b"a=1\n", 1000), ("usr/bin/tool", b"#!/bin/sh\necho tool\n", 1000)]


def variant(kind: str) -> list[tuple[str, bytes, int]]:
    files = list(FILES)
    if kind == "mtime":
        files[2] = ("etc/conf", b"a=1\n", 2000)
    elif kind == "pyc":    # recompiled: another source mtime in its header, the same source beside it
        files[1] = (files[1][0], PYC + b"s2\0\0\0\0\0\0CODE", 1000)
    elif kind == "order":
        files.reverse()
    elif kind == "content":
        files[2] = ("etc/conf", b"a=2\n", 1000)
    return files


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    client = docker.from_env()
    made: list[str] = []

    def build(kind: str) -> str:
        layer = tmp_path / f"{kind}-{uuid.uuid4().hex[:6]}.tar"
        with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data, mtime in variant(kind):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), mtime, 0o644
                tar.addfile(info, io.BytesIO(data))
        tag = f"sglang-images-test/compare:{kind}-{uuid.uuid4().hex[:8]}"
        spec = imagearchive.Spec(platform="linux/amd64", env=("PATH=/usr/bin",), labels={base.OWNER_LABEL: OWNER},
                                 epoch=1783764997, created_by="compare test")
        imagearchive.load(client, layer, spec, tag=tag, work=tmp_path)
        made.append(tag)
        return tag

    yield build
    for tag in made:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)


@pytest.mark.parametrize(("kind", "said", "reason", "path"), [
    ("mtime", "mtime only", "mtime", "etc/conf"),
    ("pyc", ".pyc only (bytecode of the same source)", "pyc", "app/__pycache__/m.cpython-311.pyc"),
    ("order", "member order only", "order", "layer 1"),
    ("content", "content", "content", "etc/conf"),
])
def test_each_difference_is_named_by_its_reason(make: Callable[[str], str], tmp_path: Path, kind: str, said: str,
                                                reason: str, path: str) -> None:
    a, b = make("same"), make(kind)
    done = cli("compare", a, b, "--out", str(tmp_path / "report"))
    assert done.returncode == 22, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(said), done.stdout
    record = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert record["identical"] is False and record["counts"] == {reason: 1}, record
    assert record["differences"][0]["path"] == path
    assert "differ" in done.stderr and "compare.md" in done.stderr


def test_two_loads_of_the_same_layer_are_identical(make: Callable[[str], str], tmp_path: Path) -> None:
    a, b = make("same"), make("same")
    done = cli("compare", a, b, "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"identical: {a} and {b} (4 files, 1 layers)"), done.stdout
    assert json.loads((tmp_path / "report" / "compare.json").read_text())["identical"] is True


def test_an_image_the_engine_does_not_have_is_a_clear_error(tmp_path: Path) -> None:
    done = cli("compare", "sglang-images-test/none:absent", "sglang-images-test/none:absent2", "--out", str(tmp_path))
    assert done.returncode == 2 and "no image 'sglang-images-test/none:absent' in the Docker engine" in done.stderr
    assert "Traceback" not in done.stderr
