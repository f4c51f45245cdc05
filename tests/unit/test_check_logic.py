"""What `check` concludes, without processes: several verdicts of one digest weighed per arch (the newest
decides), an index's platform chosen as Docker pulls, the source a container's config records, and hand-made
OCI archives read as the tools that load them read them (tests/integration/test_check.py asks skopeo too)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from buildscripts import platform_reading
from buildscripts.errors import CannotCheck, ConfigError, NotVerified
from buildscripts.matrix import load
from buildscripts.registry import failures
from buildscripts.results import REQUIRED_GPU_STAGES, Status
from buildscripts.trust import carried, dsse, keys, ociarchive, policy, provenance_policy, sources, statement, verdicts
from buildscripts.trust.sources import Source
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

DIGEST = "sha256:" + "d" * 64
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


def envelope(key: keys.SigningKey, arch: str, *, digest: str = DIGEST, fail: bool = False,
             at: str | None = "2026-12-01T10:00:00Z", edit: dict[str, Any] | None = None) -> dict[str, Any]:
    family = arch.rstrip("af")
    stages = [s.model_copy(update={"status": Status.FAILED}) if fail and s.name == "server" else s
              for s in gpu_passed("GPU", family)]
    cell = finish(make_cell("verified"), stages=cpu_passed() + stages)
    document = statement.statement(cell, arch, subject="r", digest=digest, configuration={}, url=None,
                                   signed_at=at or "")
    if at is None:
        del document["predicate"]["signedAt"]   # what a verifier before dated verdicts signed
    document["predicate"].update(edit or {})
    return dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key)


NOW = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)


def test_the_newest_verdict_of_an_arch_decides(key: keys.SigningKey) -> None:
    older_pass, newer_fail = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z"), \
        envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    found = verdicts.judge([newer_fail, older_pass, envelope(key, "sm_120a")], DIGEST, [key.public], now=NOW)
    by_arch = {f.arch: f for f in found.archs}
    assert sorted(by_arch) == ["sm_100a", "sm_120a"]   # default: every arch the valid verdicts name
    assert not by_arch["sm_100a"].verified and "FAILED" in by_arch["sm_100a"].detail
    assert "; signed 2026-12-01T11:00:00Z (2 h ago), outdating 1 older verdict" in by_arch["sm_100a"].detail
    assert by_arch["sm_120a"].verified and not found.verified
    # a re-run that passed after the failure decides in turn; the registry showing only the older one is a
    # rollback the verdicts alone cannot show (a reader's history refuses it: tests/unit/test_rollback.py)
    again = envelope(key, "sm_100a", at="2026-12-01T12:00:00Z")
    assert verdicts.judge([newer_fail, again, older_pass], DIGEST, [key.public], now=NOW).verified
    assert verdicts.judge([older_pass], DIGEST, [key.public], now=NOW).verified
    tie = envelope(key, "sm_100a", fail=True, at="2026-12-01T12:00:00Z")
    assert not verdicts.judge([again, tie], DIGEST, [key.public], now=NOW).verified   # same second: no pass
    assert verdicts.judge([envelope(key, "sm_120a")], DIGEST, [key.public], ["sm_120"], now=NOW).verified


def test_undated_verdicts_and_ones_whose_arch_disagrees_count_for_nothing(key: keys.SigningKey) -> None:
    found = verdicts.judge([envelope(key, "sm_100a", at=None)], DIGEST, [key.public], ["sm_100a"])
    assert not found.verified and "no signing time" in found.ignored[0]
    lying = envelope(key, "sm_100a", edit={"arch": "sm_120a"})   # its tests ran on sm_100a
    found = verdicts.judge([lying], DIGEST, [key.public], ["sm_120a"])
    assert not found.verified and "'gpu-visible@sm_100a' is no stage this project runs on sm_120a" in found.ignored[0]
    unzoned = envelope(key, "sm_100a", edit={"signedAt": "2026-12-01T10:00:00"})   # no zone: no order
    assert "is not a time to the second in UTC" in verdicts.judge([unzoned], DIGEST, [key.public]).ignored[0]


def test_verdicts_of_other_digests_and_keys_are_ignored_with_their_reason(key: keys.SigningKey) -> None:
    other = keys.SigningKey("other", keys.generate())
    found = verdicts.judge([envelope(key, "sm_100a", digest="sha256:" + "e" * 64), envelope(other, "sm_100a"),
                            "not json at all"], DIGEST, [key.public])
    assert found.archs == () and not found.verified
    assert "not for sha256:ddd" in found.ignored[0] and "no valid signature" in found.ignored[1]
    assert "not a signed envelope" in found.ignored[2]


@pytest.mark.parametrize(("config", "source"), [
    ("#sglang-images-source%3A oci-archive%3A/var/lib/vz/template/cache/c.oci.tar\narch: amd64\n",
     "oci-archive:/var/lib/vz/template/cache/c.oci.tar"),                        # Proxmox's description lines
    ("lxc.uts.name = c\n# sglang-images-source: r.example/sglang@sha256:" + "a" * 64 + "\n",
     "r.example/sglang@sha256:" + "a" * 64),                                      # a comment in plain LXC
    ("lxc.uts.name = c\nlxc.environment = sglang-images-source: not-a-comment\n", None),
    (None, None),
])
def test_the_source_a_container_records(config: str | None, source: str | None) -> None:
    assert sources.recorded_source(config) == source


def test_no_recorded_source_is_a_skip_not_a_failure() -> None:
    status, detail = sources.source_verdict("arch: amd64\n", [], {}, None)
    assert status == "skip" and "records no source image" in detail


# ---------------------------------------------------------------- an index: the platform Docker pulls


def judged(*platforms: tuple[str, bool]) -> sources.Judged:
    index = "sha256:" + "1" * 64
    found = []
    for number, (platform, verified) in enumerate(platforms):
        digest = f"sha256:{number}" + "0" * 63
        finding = verdicts.ArchFinding("sm_100a", verified, "x", ())
        found.append((Source(f"r:t -> {platform}", digest, (), platform, index),
                      verdicts.Judgement(digest, (finding,) if verified else (), ())))
    return found


def test_an_index_is_verified_only_for_the_platform_asked() -> None:
    both = judged(("linux/amd64", True), ("linux/arm64/v8", False))
    assert sources.summary("r:t", both, "linux/amd64")[0]
    verified, line = sources.summary("r:t", both, "linux/arm64")
    assert not verified and "(linux/arm64/v8)" in line and "no valid signed verdict" in line
    assert not sources.summary("r:t", both, "linux/arm64/v7")[0]
    verified, line = sources.summary("r:t", both, "linux/s390x")
    assert not verified and "has no manifest for linux/s390x (its platforms: linux/amd64, linux/arm64/v8)" in line
    # Docker picks one of several entries that match by its own preferences: each must be verified
    assert not sources.summary("r:t", judged(("linux/amd64", True), ("linux/amd64/v3", False)), "linux/amd64")[0]
    two = judged(("linux/arm64", False), ("linux/arm64/v8", True))
    for asked in ("linux/arm64", "linux/arm64/v8"):
        verified, line = sources.summary("r:t", two, asked)
        assert not verified and "lists two entries for linux/arm64/v8" in line
    # two entries one platform to Docker are ambiguous, verified or not: which one a loader takes is its own rule
    verified, line = sources.summary("r:t", judged(("linux/arm64", True), ("linux/arm64/v8", True)), "linux/arm64")
    assert not verified and "lists two entries for linux/arm64/v8 (as linux/arm64 and linux/arm64/v8)" in line
    # an entry that names no platform is one an engine may take for any: it must be verified too
    assert not sources.summary("r:t", judged(("linux/amd64", True), (sources.ANY_PLATFORM, False)), "linux/amd64")[0]
    assert sources.matches("linux/arm64", "linux/arm64/v8") and not sources.matches("linux/arm/v7", "linux/arm/v6")
    assert platform_reading.problem("linux") and not platform_reading.problem("linux/arm64/v8")


@pytest.mark.parametrize(("spelled", "docker"), [
    ("linux/amd64", "linux/amd64"), ("linux/x86_64", "linux/amd64"), ("Linux/AMD64", "linux/amd64"),
    ("linux/x86-64", "linux/amd64"), ("linux/amd64/v1", "linux/amd64"), ("linux/amd64/v3", "linux/amd64/v3"),
    ("linux/aarch64", "linux/arm64/v8"), ("linux/arm64", "linux/arm64/v8"), ("linux/arm64/8", "linux/arm64/v8"),
    ("linux/armhf", "linux/arm/v7"), ("linux/armel", "linux/arm/v6"), ("linux/arm", "linux/arm/v7"),
    ("linux/arm/6", "linux/arm/v6"), ("linux/i386", "linux/386"),
    ("linux/i686", "linux/i686"),   # containerd knows no i686
    ("linux/s390x", "linux/s390x"),
])
def test_platforms_are_read_as_docker_reads_them(spelled: str, docker: str) -> None:
    assert sources.normalised(spelled) == docker


@pytest.mark.parametrize("spelling", ["linux/x86_64", "Linux/amd64", "linux/x86-64", "LINUX/X86_64",
                                      "l\u0130nux/amd64"])
def test_an_entry_spelled_otherwise_refuses_the_index(spelling: str) -> None:
    """An unverified entry that containerd takes for linux/amd64 but that is not written as containerd writes it:
    readers of images disagree which platform it is, so the index is not verified for any platform."""
    assert sources.matches(spelling, "linux/amd64") and not sources.matches(spelling, "linux/arm64")
    for asked in ("linux/amd64", "linux/arm64"):
        verified, line = sources.summary("r:t", judged((spelling, False), ("linux/amd64", True),
                                                       ("linux/arm64", True)), asked)
        assert not verified and f"r:t -> {spelling}: " in line and "skopeo and Podman" in line


# ---------------------------------------------------------------- archives, by hand


def blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def descriptor(data: bytes, media_type: str) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": blob(data)[0], "size": len(data)}


def layout(layer: bytes = b"layer", *, env: str = "A=1") -> dict[str, bytes]:
    """The members of a one-image OCI layout, as export writes it."""
    gz = gzip.compress(layer, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": [env]},
                         "rootfs": {"type": "layers", "diff_ids": [blob(layer)[0]]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": carried.OCI_MANIFEST,
                           "config": descriptor(config, "application/vnd.oci.image.config.v1+json"),
                           "layers": [descriptor(gz, "application/vnd.oci.image.layer.v1.tar+gzip")]}).encode()
    index = {"schemaVersion": 2, "manifests": [{**descriptor(manifest, carried.OCI_MANIFEST),
                                                "annotations": {"io.sglang-images.cell": "c"}}]}
    return {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": json.dumps(index).encode(),
            **{f"blobs/sha256/{blob(b)[0][7:]}": b for b in (gz, config, manifest)}}


def pack(path: Path, members: Sequence[tuple[str, bytes | tarfile.TarInfo]], *, fmt: int = tarfile.PAX_FORMAT,
         after: bytes = b"") -> Path:
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, content in members:
            if isinstance(content, tarfile.TarInfo):
                tar.addfile(content)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    with path.open("ab") as fh:
        fh.write(after)
    return path


def manifest_digest(members: dict[str, bytes]) -> str:
    return str(json.loads(members["index.json"])["manifests"][0]["digest"])


def test_an_archive_is_its_manifest_digest(tmp_path: Path) -> None:
    members = layout()
    found = ociarchive.read(pack(tmp_path / "a.tar", list(members.items())))
    assert found.digest == manifest_digest(members) and found.platform == "linux/amd64"
    assert found.annotations == {"io.sglang-images.cell": "c"}


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def crafted(kind: str) -> tuple[list[tuple[str, bytes | tarfile.TarInfo]], str]:
    """An archive of `kind`, and what the refusal names."""
    good, other = layout(), layout(b"other layer", env="A=2")
    items: list[tuple[str, bytes | tarfile.TarInfo]] = list(good.items())
    first_layer = next(n for n in good if n.startswith("blobs/") and good[n][:2] == b"\x1f\x8b")
    if kind == "second index.json":
        return items + [(n, b) for n, b in other.items() if n.startswith("blobs/")] + \
            [("index.json", other["index.json"])], "index.json is in the archive twice"
    if kind == "./ spelled twice":
        return [*items, ("./index.json", other["index.json"])], "index.json is in the archive twice"
    if kind == "shadowed layer":
        return [*items, (first_layer, gzip.compress(b"evil", mtime=0))], f"{first_layer} is in the archive twice"
    if kind == "symlinked index.json":
        return [(n, b) for n, b in items if n != "index.json"] + \
            [("index.json", link("index.json", first_layer))], "index.json is a link or device"
    if kind == "hard-linked blob":
        name = next(n for n in good if n.startswith("blobs/") and n != first_layer)
        return [(n, b) for n, b in items if n != name] + [(name, link(name, first_layer, tarfile.LNKTYPE))], \
            "is a link or device"
    if kind == "escaping path":
        return [*items, ("../evil", b"x")], "outside the layout"
    if kind == "stray blob":
        return [*items, (f"blobs/sha256/{blob(b'stray')[0][7:]}", b"stray")], "reached by no descriptor"
    if kind == "other file":
        return [*items, ("blobs/sha512/" + "0" * 128, b"x")], "no part of an OCI layout"
    if kind == "two manifests":
        index = json.loads(good["index.json"])
        index["manifests"] *= 2
        return [(n, json.dumps(index).encode() if n == "index.json" else b) for n, b in items], "lists 2 manifests"
    if kind == "embedded data":
        index = json.loads(good["index.json"])
        index["manifests"][0]["data"] = "e30="
        return [(n, json.dumps(index).encode() if n == "index.json" else b) for n, b in items], "embeds data"
    if kind == "index.json key twice":   # Python's json takes the last "manifests", another reader the first
        text = good["index.json"].decode()
        evil = json.dumps(json.loads(other["index.json"])["manifests"])
        twice = text.replace('{"schemaVersion": 2,', '{"schemaVersion": 2, "manifests": ' + evil + ",", 1)
        return [(n, twice.encode() if n == "index.json" else b) for n, b in items], "each key once"
    if kind == "index.json key in another case":   # Go fills `manifests` from "Manifests" too
        text = good["index.json"].decode().replace('"manifests"', '"Manifests"', 1)
        return [(n, text.encode() if n == "index.json" else b) for n, b in items], "differs only in case"
    if kind == "index.json in UTF-16":
        utf16 = good["index.json"].decode().encode("utf-16")
        return [(n, utf16 if n == "index.json" else b) for n, b in items], "strict UTF-8"
    if kind == "size written 1.0":
        index = json.loads(good["index.json"])
        return [(n, good["index.json"].replace(b'"size": ' + str(index["manifests"][0]["size"]).encode(),
                                                b'"size": ' + str(index["manifests"][0]["size"]).encode() + b".0")
                 if n == "index.json" else b) for n, b in items], "not the"
    if kind == "changed layer bytes":
        return [(n, gzip.compress(b"evil", mtime=0) if n == first_layer else b) for n, b in items], \
            "holds other bytes than its name says"
    raise AssertionError(kind)


KINDS = ["second index.json", "./ spelled twice", "shadowed layer", "symlinked index.json", "hard-linked blob",
         "escaping path", "stray blob", "other file", "two manifests", "embedded data", "changed layer bytes",
         "index.json key twice", "index.json key in another case", "index.json in UTF-16", "size written 1.0"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_archive_tools_could_read_otherwise_is_refused(tmp_path: Path, kind: str) -> None:
    members, said = crafted(kind)
    with pytest.raises(NotVerified, match=re.escape(said)):
        ociarchive.read(pack(tmp_path / "a.tar", members))


def test_headers_tools_read_differently_are_refused(tmp_path: Path) -> None:
    members = list(layout().items())
    gnu = pack(tmp_path / "gnu.tar", members, fmt=tarfile.GNU_FORMAT)
    with pytest.raises(NotVerified, match="not a POSIX ustar header"):
        ociarchive.read(gnu)
    hidden = pack(tmp_path / "after.tar", members, after=b"\0" * 1024 + b"index.json" + b"\0" * 1014)
    with pytest.raises(NotVerified, match="bytes follow the end of the archive"):
        ociarchive.read(hidden)
    with tarfile.open(tmp_path / "global.tar", "w", format=tarfile.PAX_FORMAT,
                      pax_headers={"path": "index.json"}) as tar:   # a global header: Python renames, Go does not
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(NotVerified, match=r"GNU or global headers|belong to no member"):
        ociarchive.read(tmp_path / "global.tar")
    truncated = tmp_path / "short.tar"
    truncated.write_bytes(pack(tmp_path / "whole.tar", members).read_bytes()[:1500])
    with pytest.raises((CannotCheck, NotVerified)):
        ociarchive.read(truncated)


def test_a_verdicts_file_that_speaks_of_another_manifest_is_refused(tmp_path: Path) -> None:
    members = layout()
    archive = pack(tmp_path / "c.oci.tar", list(members.items()))
    tested = carried.Tested("r.example/sglang", manifest_digest(members), None, "linux/amd64", ())
    carried.write(carried.sidecar(archive), tested)
    assert carried.read(archive).digest == tested.digest
    written = json.loads(carried.sidecar(archive).read_text())
    for claims, said in (({"digest": "sha256:" + "f" * 64}, "speaks of sha256:fff"),
                         ({"platform": "linux/arm64"}, "speaks of linux/arm64"),
                         ({"schema": "sglang-images/carried-verdicts/v1"}, "an older export's")):
        record = {**written, **claims}
        carried.sidecar(archive).write_text(json.dumps(record))
        with pytest.raises(NotVerified, match=said):
            carried.read(archive)


def test_the_committed_cosign_policies_are_the_generated_ones(tmp_path: Path) -> None:
    """policies/ is what `check --write-policies` makes of matrix.yaml, byte for byte: a file for every target
    arch of every platform, and no other (one home for the required stages and the form of a verdict)."""
    archs = load(ROOT / "matrix.yaml").spec.all_archs
    assert {"sm_90a", "sm_100a", "sm_103a", "sm_120a", "sm_121a"} <= set(archs)   # arm64's archs too
    made = policy.write(tmp_path, archs)
    required = provenance_policy.write(tmp_path)   # the provenance a digest must carry (trust/provenance_policy.py)
    committed = sorted(p.name for p in (ROOT / policy.FOLDER).iterdir())
    assert committed == sorted(p.name for p in [*made, required]), "run `nox -s check -- --write-policies`"
    for path in [*made, required]:
        assert (ROOT / policy.FOLDER / path.name).read_bytes() == path.read_bytes(), \
            f"{path.name}: run `nox -s check -- --write-policies`"
    for path in made:
        arch = path.name.removeprefix(policy.PREFIX).removesuffix(policy.SUFFIX)
        assert all(f'list.Contains("{stage}@{arch}")' in path.read_text() for stage in REQUIRED_GPU_STAGES)


def test_writing_the_policies_removes_those_of_archs_no_longer_targeted(tmp_path: Path) -> None:
    policy.write(tmp_path, ["sm_90a", "sm_100a"])
    (tmp_path / policy.FOLDER / "notes.txt").write_text("kept: not a policy")
    assert [p.name for p in policy.write(tmp_path, ["sm_100a"])] == ["test-result-sm_100a.cue"]
    assert sorted(p.name for p in (tmp_path / policy.FOLDER).iterdir()) == ["notes.txt", "test-result-sm_100a.cue"]
    with pytest.raises(ValueError, match="not a GPU target"):
        policy.cue("SM_90A")


def test_a_named_pipe_is_no_archive_and_no_verdicts_file(tmp_path: Path) -> None:
    """Reading either would block forever."""
    pipe = tmp_path / "c.oci.tar"
    os.mkfifo(pipe)
    with pytest.raises(CannotCheck, match="is not a file"):
        ociarchive.read(pipe)
    members = layout()
    archive = pack(tmp_path / "d.oci.tar", list(members.items()))
    os.mkfifo(carried.sidecar(archive))
    with pytest.raises(CannotCheck, match="is not a file"):
        carried.read(archive)


def test_one_registry_deadline_and_what_a_failure_is_called() -> None:
    assert failures.deadline({}) == failures.DEADLINE_S == 20
    assert failures.deadline({failures.DEADLINE_ENV: "90"}) == 90
    for bad in ("soon", "0", "-5", "1e9"):
        with pytest.raises(ConfigError, match=failures.DEADLINE_ENV):
            failures.deadline({failures.DEADLINE_ENV: bad})
    late = failures.no_answer("reading", "reg.example:5000/sglang:tag", 20)
    assert "the registry reg.example:5000 did not answer within 20 s" in late.message
    malformed = failures.failure("reading", "r/x:t", "the registry served something that is not a JSON manifest")
    assert "malformed" in str(malformed.hint) and "docker login" not in str(malformed.hint)
