"""Two images' differences, each under its one reason, from hand-made layers (no engine): what a container sees
after whiteouts, a .pyc of the same source, owner/mode, mtime, member order and the config."""

from __future__ import annotations

import io
import tarfile

import pytest

from buildscripts.compare import diff, render, saved
from buildscripts.compare.saved import Entry, Image

PYC_HEAD = b"\xa7\r\r\n" + b"\0" * 4


def layer(members: list[tuple[str, bytes | None, dict[str, int]]]) -> list[Entry]:
    """Members as a real tar read back by the comparer's own reader: (name, data or None for a folder, attrs)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = attrs.get("mtime", 1000), attrs.get("mode", 0o644)
            info.uid = info.gid = attrs.get("uid", 0)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, attrs.get("mode", 0o755)
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return saved.read_layer(buf)


def pyc(stamp: bytes, code: bytes) -> bytes:
    return PYC_HEAD + stamp.ljust(8, b"\0") + code


BASE = [("app", None, {}), ("app/m.py", b"print(1)\n", {}),
        ("app/__pycache__/m.cpython-311.pyc", pyc(b"t1", b"CODE"), {}),
        ("etc/conf", b"a=1\n", {}), ("bin/tool", b"#!/bin/sh\n", {"mode": 0o755})]


def image(members: list[tuple[str, bytes | None, dict[str, int]]], config: dict[str, object] | None = None) -> Image:
    return Image("img", config or {"architecture": "amd64"}, [layer(members)])


def changed(index: int, data: bytes | None = None, **attrs: int) -> list[tuple[str, bytes | None, dict[str, int]]]:
    members = list(BASE)
    name, old, old_attrs = members[index]
    members[index] = (name, old if data is None else data, {**old_attrs, **attrs})
    return members


@pytest.mark.parametrize(("members", "reason", "path"), [
    (changed(3, mtime=2000), "mtime", "etc/conf"),
    (changed(2, pyc(b"t2", b"CODE")), "pyc", "app/__pycache__/m.cpython-311.pyc"),   # its header only
    (changed(2, pyc(b"t1", b"EDOC")), "pyc", "app/__pycache__/m.cpython-311.pyc"),   # other code, same source
    (changed(3, b"a=2\n"), "content", "etc/conf"),
    (changed(4, mode=0o700), "owner/mode", "bin/tool"),
    (changed(4, uid=1000), "owner/mode", "bin/tool"),
    (changed(3, b"a=2\n", mtime=5), "content", "etc/conf"),   # the strongest reason wins
])
def test_each_difference_has_its_reason(members: list[tuple[str, bytes | None, dict[str, int]]], reason: str,
                                        path: str) -> None:
    found = diff.compare(image(BASE), image(members))
    assert [(d.reason, d.path) for d in found.differences] == [(reason, path)]
    assert list(found.groups) == [reason]


def test_a_pyc_whose_source_changed_too_is_content() -> None:
    members = changed(2, pyc(b"t1", b"EDOC"))
    members[1] = ("app/m.py", b"print(2)\n", {})
    reasons = {d.path: d.reason for d in diff.compare(image(BASE), image(members)).differences}
    assert reasons == {"app/m.py": "content", "app/__pycache__/m.cpython-311.pyc": "content"}


def test_the_same_members_in_another_order_differ_only_in_order() -> None:
    found = diff.compare(image(BASE), image(list(reversed(BASE))))
    assert [(d.reason, d.path) for d in found.differences] == [("order", "layer 1")]


def test_identical_images_are_identical_and_say_so() -> None:
    found = diff.compare(image(BASE), image(BASE))
    assert found.identical and found.groups == {}
    assert render.lines(found)[0].startswith("identical:")


def test_the_config_is_compared_field_by_field_but_not_the_layer_digests() -> None:
    a = image(BASE, {"created": "2026-07-11T10:16:37Z", "config": {"Env": ["A=1"]}, "rootfs": {"diff_ids": ["x"]}})
    b = image(BASE, {"created": "2026-12-05T08:00:00Z", "config": {"Env": ["A=1"]}, "rootfs": {"diff_ids": ["y"]}})
    assert [(d.reason, d.path) for d in diff.compare(a, b).differences] == [("config", "created")]


def test_only_in_one_image_is_content_and_whiteouts_remove_what_is_below() -> None:
    upper = layer([("etc/.wh.conf", b"", {}), ("app/.wh..wh..opq", b"", {}), ("app/new.py", b"x\n", {})])
    lowered = Image("img", {}, [layer(BASE), upper])
    assert sorted(lowered.files()) == ["app", "app/new.py", "bin/tool"]
    found = diff.compare(image(BASE), lowered)
    assert {d.path: d.detail for d in found.differences if d.reason == "content"} == {
        "app/__pycache__/m.cpython-311.pyc": "only in A", "app/m.py": "only in A", "etc/conf": "only in A",
        "app/new.py": "only in B"}


@pytest.mark.parametrize(("pyc_path", "source"), [
    ("usr/lib/x/__pycache__/mod.cpython-311.pyc", "usr/lib/x/mod.py"),
    ("usr/lib/x/__pycache__/mod.cpython-311.opt-1.pyc", "usr/lib/x/mod.py"),
    ("usr/lib/x/mod.pyc", "usr/lib/x/mod.py"),
])
def test_the_source_of_a_pyc(pyc_path: str, source: str) -> None:
    assert diff.source_of(pyc_path) == source


def test_the_console_has_one_line_per_reason_and_the_page_every_difference() -> None:
    members = changed(3, mtime=2000)
    members[4] = ("bin/tool", b"#!/bin/sh\n", {"mode": 0o700})
    found = diff.compare(image(BASE), image(members))
    shown = render.lines(found)
    assert len(shown) == 2 and shown[0].startswith("owner/mode") and "bin/tool" in shown[0]
    assert shown[1].startswith("mtime only") and "etc/conf" in shown[1]
    page = render.markdown(found)
    assert "| `bin/tool` | mode 0755 -> 0700 |" in page and "| `etc/conf` | mtime 1000 -> 2000 |" in page
    assert render.record(found)["counts"] == {"owner/mode": 1, "mtime": 1}
