"""Platforms spelled as an adversary would, read by containerd itself: what `ctr images export --platform P`
writes is every manifest of the index that containerd matches for P (the matcher that picks what Docker's
containerd store and Kubernetes pull). buildscripts/platform_reading.py must read each entry as containerd does, and
refuse every entry not written as containerd writes it.

containerd runs here on its own (a private root, state and socket in the test's folder): it needs root and the
`containerd` and `ctr` programs (Debian's containerd, which docker.io depends on), no engine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts import platform_reading
from tests import needs

# (os, architecture, variant) as an index entry spells them: containerd's aliases, cases, and letters whose
# lower case Go and Python disagree on (İ), or that only look like ASCII (fullwidth ４, the Kelvin sign).
SPELLINGS = [
    ("linux", "amd64", ""), ("linux", "AMD64", ""), ("Linux", "amd64", ""), ("linux", "x86_64", ""),
    ("linux", "x86-64", ""), ("linux", "amd64", "v1"), ("l\u0130nux", "amd64", ""), ("L\u0130NUX", "X86_64", ""),
    ("linux", "amd6\uff14", ""), ("linux", "\uff41md64", ""), ("linux", "arm64", ""), ("linux", "arm64", "v8"),
    ("linux", "aarch64", ""), ("linux", "arm64", "8"), ("linux", "ARM64", "V8"), ("linux", "arm64", "v8.0"),
    ("linux", "armhf", ""), ("linux", "arm", ""), ("linux", "arm", "7"), ("linux", "i386", ""),
    ("linux", "386", ""), ("linux", "s390\u212a", ""), ("linux", "i686", ""), ("macos", "arm64", ""),
    ("\u212aLINUX", "amd64", ""),
]
ASKED = ["linux/amd64", "linux/arm64", "linux/arm/v7", "linux/386", "darwin/arm64"]
# What containerd also runs on a platform (containerd/platforms, compare.go: platformVector): 386 on amd64, 32-bit
# arm on arm64, older arm variants on newer ones. Its matcher may take those entries too (1.6 takes no 386 for
# amd64, later versions do), so they are neither required nor refused here.
ALSO_RUNS = {"linux/amd64": ["linux/386"], "linux/arm64": [f"linux/arm/v{n}" for n in (8, 7, 6, 5)],
             "linux/arm/v7": ["linux/arm/v6", "linux/arm/v5"],
             "darwin/arm64": [f"darwin/arm/v{n}" for n in (8, 7, 6, 5)]}

# Aliases newer containerd reads and Debian bookworm's 1.6 does not (platform_reading.py reads them as the newest does:
# an index with them is refused either way).
NEWER = {("linux", "arm64", "v8.0")}


def _blob(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _archive(path: Path) -> list[str]:
    """An OCI layout of one index whose entries are SPELLINGS, one distinct manifest each; their digests."""
    members = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}'}
    entries = []
    for number, (os_, architecture, variant) in enumerate(SPELLINGS):
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                             "config": {"Env": [f"ENTRY={number}"]}}).encode()
        manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": _blob(config), "size": len(config)}, "layers": []}).encode()
        members |= {f"blobs/sha256/{_blob(b)[7:]}": b for b in (config, manifest)}
        platform = {"os": os_, "architecture": architecture, **({"variant": variant} if variant else {})}
        entries.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _blob(manifest),
                        "size": len(manifest), "platform": platform})
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": entries}).encode()
    members[f"blobs/sha256/{_blob(index)[7:]}"] = index
    members["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": _blob(index), "size": len(index),
         "annotations": {"org.opencontainers.image.ref.name": "spelled"}}]}).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return [str(e["digest"]) for e in entries]


@pytest.fixture
def ctr(tmp_path: Path) -> Iterator[list[str]]:
    """`ctr` talking to a containerd of this test's own; stopped and its folders removed after."""
    tools = needs.tools("containerd", "ctr", hint="apt-get install containerd (docker.io depends on it)")
    if os.geteuid() != 0:
        needs.unavailable("root (containerd runs as root)", "run the tests as root")
    socket = tmp_path / "c.sock"
    config = tmp_path / "config.toml"
    config.write_text(f'version = 2\nroot = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n'
                      'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                      f'[grpc]\n  address = "{socket}"\n[ttrpc]\n  address = "{socket}.ttrpc"\n'
                      '[debug]\n  address = ""\n[metrics]\n  address = ""\n')
    with (tmp_path / "containerd.log").open("wb") as log:
        daemon = subprocess.Popen([tools["containerd"], "--config", str(config)], stdout=log, stderr=log)
    command = [tools["ctr"], "--address", str(socket), "--namespace", "platforms-test"]
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([*command, "version"], capture_output=True, check=False).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"containerd did not start: {(tmp_path / 'containerd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield command
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def _reading(platform: str) -> tuple[str, str, str]:
    os_, architecture, variant = [*platform.split("/"), ""][:3]
    return platform_reading.containerd(os_, architecture, variant)


def _containerd_takes(ctr: list[str], tmp_path: Path, asked: str) -> set[str]:
    """The manifests containerd's matcher takes for `asked`: the ones `ctr images export --platform` writes."""
    out = tmp_path / f"{asked.replace('/', '-')}.tar"
    subprocess.run([*ctr, "images", "export", "--platform", asked, str(out), "x/spelled:spelled"], check=True,
                   capture_output=True, timeout=120)
    with tarfile.open(out) as tar:
        return {"sha256:" + n.rsplit("/", 1)[1] for n in tar.getnames() if n.startswith("blobs/sha256/")}


def test_entries_are_read_as_containerd_reads_them_and_refused_unless_written_so(ctr: list[str],
                                                                                 tmp_path: Path) -> None:
    digests = _archive(tmp_path / "spelled.tar")
    subprocess.run([*ctr, "images", "import", "--base-name", "x/spelled", "--all-platforms", "--no-unpack",
                    str(tmp_path / "spelled.tar")], check=True, capture_output=True, timeout=120)
    read = dict(zip(digests, (platform_reading.containerd(*spelled) for spelled in SPELLINGS), strict=True))
    for asked in ASKED:
        exact = {d for d, reading in read.items() if reading == _reading(asked)}
        also = {d for d, reading in read.items() if reading in {_reading(p) for p in ALSO_RUNS.get(asked, [])}}
        taken = _containerd_takes(ctr, tmp_path, asked) & set(digests)
        missed = [s for s in (SPELLINGS[digests.index(d)] for d in exact - taken) if s not in NEWER]
        extra = [SPELLINGS[digests.index(d)] for d in taken - exact - also]
        assert not missed and not extra, f"for {asked} containerd did not take {missed} and took {extra}"
    # written as containerd writes it (or as arm64/v8) is kept; every other spelling is refused
    kept = {s for s in SPELLINGS if platform_reading.spelling_problem(*s) is None}
    assert kept == {("linux", "amd64", ""), ("linux", "arm64", ""), ("linux", "arm64", "v8"), ("linux", "386", ""),
                    ("linux", "i686", "")}
