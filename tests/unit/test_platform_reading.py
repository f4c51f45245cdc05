"""Platforms read as containerd reads them (Go's case rules, its aliases and variants), and refused when readers
of images could read them apart: the normaliser alone, then an index and an image config as `check` meets them.
tests/integration/test_containerd_platforms.py asks containerd itself about the same kind of spellings."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from buildscripts import platform_reading
from buildscripts.errors import NotVerified
from buildscripts.registry import manifests
from buildscripts.trust import cosign, sources

A, B, C = ("sha256:" + c * 64 for c in "abc")
INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.mark.parametrize(("text", "go"), [
    ("LINUX", "linux"), ("l\u0130nux", "linux"),            # İ: Go's simple mapping is `i`, Python's full one `i̇`
    ("\u212a", "k"), ("\u03a3\u03a3", "\u03c3\u03c3"),     # the Kelvin sign; sigma, final or not, is σ to Go
    ("AMD6\uff14", "amd6\uff14"), ("\uff21", "\uff41"),     # fullwidth: a digit stays, a letter lowers to fullwidth
])
def test_go_lower_is_the_simple_mapping(text: str, go: str) -> None:
    assert platform_reading.go_lower(text) == go


def test_only_one_code_point_lowers_to_two_in_python() -> None:
    """go_lower takes Python's lower case of each code point, which is the simple mapping wherever it is one code
    point: the exceptions table must hold every code point where it is not."""
    longer = [c for c in map(chr, range(sys.maxunicode + 1)) if len(c.lower()) != 1]
    assert longer == list(platform_reading.GO_LOWER_EXCEPTIONS)


# (os, architecture, variant) -> containerd's reading, and whether it is written as containerd writes it
READINGS = [
    (("linux", "amd64", ""), ("linux", "amd64", ""), True),
    (("linux", "arm64", "v8"), ("linux", "arm64", ""), True),     # Docker's spelling of containerd's arm64
    (("linux", "arm64", ""), ("linux", "arm64", ""), True),
    (("linux", "amd64", "v3"), ("linux", "amd64", "v3"), True),
    (("linux", "AMD64", ""), ("linux", "amd64", ""), False),
    (("Linux", "amd64", ""), ("linux", "amd64", ""), False),
    (("linux", "x86_64", ""), ("linux", "amd64", ""), False),
    (("linux", "x86-64", ""), ("linux", "amd64", ""), False),
    (("linux", "amd64", "v1"), ("linux", "amd64", ""), False),
    (("linux", "aarch64", ""), ("linux", "arm64", ""), False),
    (("linux", "arm64", "8"), ("linux", "arm64", ""), False),
    (("linux", "arm64", "9.0"), ("linux", "arm64", "v9"), False),
    (("linux", "armhf", "v5"), ("linux", "arm", "v7"), False),
    (("linux", "arm", ""), ("linux", "arm", "v7"), False),
    (("linux", "i386", ""), ("linux", "386", ""), False),
    (("macos", "arm64", ""), ("darwin", "arm64", ""), False),
    (("l\u0130nux", "amd64", ""), ("linux", "amd64", ""), False),
    (("L\u0130NUX", "X86_64", ""), ("linux", "amd64", ""), False),
    (("linux", "amd6\uff14", ""), ("linux", "amd6\uff14", ""), False),   # not amd64 to anyone, refused still
    (("\u212aLINUX", "amd64", ""), ("klinux", "amd64", ""), False),
    (("linux", "amd64 ", ""), ("linux", "amd64 ", ""), False),
    (("linux", "amd64\x00", ""), ("linux", "amd64\x00", ""), False),
    (("", "amd64", ""), ("linux", "amd64", ""), False),                  # containerd fills in its own os
]


@pytest.mark.parametrize(("spelled", "containerd", "canonical"), READINGS)
def test_a_platform_is_read_as_containerd_reads_it(spelled: tuple[str, str, str], containerd: tuple[str, str, str],
                                                   canonical: bool) -> None:
    assert platform_reading.containerd(*spelled) == containerd
    named = {k: v for k, v in zip(("os", "architecture", "variant"), spelled, strict=True) if v}
    if canonical:
        assert platform_reading.read(named, required=True) == "/".join(filter(None, spelled))
    else:
        with pytest.raises(platform_reading.NotCanonical):
            platform_reading.read(named, required=True)
    # whatever the spelling, the key it is weighed by is containerd's reading
    normalised = platform_reading.normalised
    assert normalised("/".join(spelled)) == normalised("/".join(filter(None, containerd)))


@pytest.mark.parametrize(("named", "says"), [
    ({"os": "linux"}, "no architecture"), ({"architecture": "amd64"}, "an architecture but no os"),
    ({"os": "linux", "architecture": 64}, "not a string"), ({}, "no architecture"),
    ({"os": "linux", "architecture": "amd64", "os.features": ["sse4"]}, "os.features"),
    ({"os": "linux", "architecture": "amd64", "os.version": "6.1"}, "Windows only"),
    ({"os": "l\u0130nux", "architecture": "amd64"}, "containerd reads it as 'linux', Python as 'li\u0307nux'"),
])
def test_what_readers_take_apart_is_refused_with_its_reason(named: dict[str, Any], says: str) -> None:
    with pytest.raises(platform_reading.NotCanonical, match=says):
        platform_reading.read(named, required=True)
    assert platform_reading.read({}, required=False) is None   # an image config may name no platform


def test_a_windows_entry_may_name_its_version() -> None:
    assert platform_reading.read({"os": "windows", "architecture": "amd64", "os.version": "10.0.17763.1"},
                          required=True) == "windows/amd64"


def _index(*named: object) -> manifests.Manifest:
    entries = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1, "platform": p}
               for d, p in zip((A, B), named, strict=False)]
    return manifests.Manifest("r/x@" + C, C, {"mediaType": INDEX, "manifests": entries})


@pytest.mark.parametrize("platform", [None, {"os": "linux", "architecture": "arm64", "variant": "v8"}])
def test_an_index_of_entries_written_as_containerd_writes_them_is_read(platform: object) -> None:
    index = _index({"os": "linux", "architecture": "amd64"}, platform)
    assert index.platform("linux", "amd64") == A


@pytest.mark.parametrize("platform", ["linux/amd64", ["linux"], {"os": "l\u0130nux", "architecture": "amd64"},
                                      {"os": "linux", "architecture": "arm64", "variant": "V8"}])
def test_an_index_with_one_entry_read_apart_is_refused_for_every_platform(platform: object) -> None:
    index = _index({"os": "linux", "architecture": "amd64"}, platform)
    for asked in ("amd64", "arm64"):
        with pytest.raises(manifests.AmbiguousManifest, match="read apart: entry 2"):
            index.platform("linux", asked)


def test_check_refuses_the_index_containerd_would_pull_an_unverified_entry_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: `lİnux/amd64` first (never verified), `linux/amd64` second (verified). containerd lowers İ to i
    and pulls the first; Python lowered it to `i̇` and checked the second alone."""
    index = _index({"os": "l\u0130nux", "architecture": "amd64"}, {"os": "linux", "architecture": "amd64"})
    monkeypatch.setattr(manifests, "served", lambda ref, env, log=None: index)
    monkeypatch.setattr(cosign, "download", lambda ref, env, log_file=None: [])
    with pytest.raises(NotVerified, match=r"is not verified: .* read apart: entry 1 .*'l\u0130nux'"):
        sources.sources(f"127.0.0.1:5000/r@{C}", {})


def test_an_image_config_read_apart_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    served = {"os": "linux", "architecture": "x86_64", "rootfs": {"type": "layers", "diff_ids": []}}
    monkeypatch.setattr(manifests, "raw", lambda ref, env, config=False, log=None: json.dumps(served).encode())
    with pytest.raises(manifests.AmbiguousManifest, match="x86_64 is containerd's linux/amd64"):
        manifests.config_platform(f"r@{A}", {})
    served["architecture"] = "amd64"
    assert manifests.config_platform(f"r@{A}", {}) == "linux/amd64"
