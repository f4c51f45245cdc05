"""OCI archives crafted as an adversary would, checked against skopeo's own reading of them (what LXC's oci
template and Proxmox load): a second index.json, a shadowed layer, a config rewritten with its digests, and
an index's platform that never ran. `check oci-archive:` refuses each where skopeo loads other bytes than
the tested manifest; the archive `export` writes is that manifest, byte for byte."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from buildscripts.publish import snapshots
from buildscripts.trust import carried, cosign, keys, snapshot
from tests.attest_world import NOT_VERIFIED, World, fixtures, tampered
from tests.cli import cli
from tests.registry_writer import RegistryWriter

pytestmark = pytest.mark.registry
world, promoted, archive = fixtures("archives")


def skopeo_reads(archive: Path) -> tuple[str, dict[str, Any]]:
    """The manifest digest skopeo loads from `archive` (what LXC's oci template and Proxmox take), and its
    config."""
    raw = subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{archive}"], capture_output=True, check=True,
                         timeout=120).stdout
    config = subprocess.run(["skopeo", "inspect", "--raw", "--config", f"oci-archive:{archive}"],
                            capture_output=True, check=True, timeout=120).stdout
    return carried_digest(raw), json.loads(config)


def carried_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def exported(world: World, digest: str, path: Path) -> Path:
    """What anyone can write: REPO@digest as an OCI archive, byte for byte."""
    subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--src-tls-verify=false",
                    f"docker://{world.ref(digest)}", f"oci-archive:{path}"], check=True, timeout=120)
    return path


def with_sidecar(archive: Path, good: Path, **claims: str) -> Path:
    record = {**json.loads(carried.sidecar(good).read_text()), **claims}
    carried.sidecar(archive).write_text(json.dumps(record))
    return archive


def appended(archive: Path, extra: Path, name: str) -> Path:
    """A copy of `archive` with `extra`'s index.json, and the blobs of `extra` it lacks, added at its end."""
    copy = tampered(archive, name)
    with tarfile.open(archive) as tar:
        present = set(tar.getnames())
    with tarfile.open(extra) as source, tarfile.open(copy, "a") as tar:
        for member in source.getmembers():
            if member.isfile() and (member.name == "index.json" or member.name not in present):
                tar.addfile(member, source.extractfile(member))
    return copy


@pytest.fixture(scope="module")
def evil(world: World, promoted: tuple[str, list[Path]]) -> tuple[str, Path]:
    """The tested image with a Healthcheck and an OnBuild added to its config, every digest rewritten to match:
    another image, pushed beside it, and written as an archive."""
    writer = RegistryWriter(world.server.url)
    digest = writer.rewrite_config(world.name, promoted[0], "evil", config={
        "Healthcheck": {"Test": ["CMD", "/bin/steal"]}, "OnBuild": ["RUN /bin/steal"]})
    folder = world.folder / "evil"
    folder.mkdir()
    return digest, exported(world, digest, folder / "evil.oci.tar")


def test_the_archive_is_the_tested_manifest_byte_for_byte(archive: Path, promoted: tuple[str, list[Path]]) -> None:
    assert skopeo_reads(archive)[0] == promoted[0]


def test_a_second_index_json_is_refused(world: World, archive: Path, evil: tuple[str, Path]) -> None:
    crafted = appended(archive, evil[1], "second-index")
    assert skopeo_reads(crafted)[0] == evil[0]   # skopeo (and tar) take the last index.json
    done = world.check(f"oci-archive:{crafted}")
    assert done.returncode == NOT_VERIFIED and "index.json is in the archive twice" in done.stderr, done.stderr


def test_a_shadowed_layer_is_refused(world: World, archive: Path, evil: tuple[str, Path]) -> None:
    with tarfile.open(archive) as tar:
        layer = max((m for m in tar.getmembers() if m.name.startswith("blobs/")), key=lambda m: m.size)
        original = tar.extractfile(layer).read()   # type: ignore[union-attr]
    crafted = tampered(archive, "shadowed")
    with tarfile.open(crafted, "a") as tar:
        shadow = tarfile.TarInfo(layer.name)
        payload = original[:-1] + bytes([original[-1] ^ 0xFF])
        shadow.size = len(payload)
        tar.addfile(shadow, io.BytesIO(payload))
    unpacked = world.folder / "shadowed-by-skopeo"
    loaded = subprocess.run(["skopeo", "copy", "--quiet", f"oci-archive:{crafted}", f"dir:{unpacked}"],
                            capture_output=True, text=True, timeout=120)
    # skopeo takes the later member: the tested bytes are not what it loads (it stops, or copies others)
    assert loaded.returncode != 0 or hashlib.sha256(
        (unpacked / layer.name.rsplit("/", 1)[1]).read_bytes()).digest() != hashlib.sha256(original).digest()
    done = world.check(f"oci-archive:{crafted}")
    assert done.returncode == NOT_VERIFIED and f"{layer.name} is in the archive twice" in done.stderr, done.stderr


def test_a_rewritten_config_is_another_manifest(world: World, archive: Path, evil: tuple[str, Path],
                                               promoted: tuple[str, list[Path]]) -> None:
    digest, crafted = evil
    read, config = skopeo_reads(crafted)
    assert read == digest != promoted[0] and config["config"]["Healthcheck"]["Test"] == ["CMD", "/bin/steal"]
    done = world.check(f"oci-archive:{with_sidecar(crafted, archive)}")
    assert done.returncode == NOT_VERIFIED, done.stderr
    assert f"speaks of {promoted[0]}, but the archive holds the manifest {digest}" in done.stderr
    done = world.check(f"oci-archive:{with_sidecar(crafted, archive, digest=digest)}")   # the file made to agree
    assert done.returncode == NOT_VERIFIED and f"a verdict for {promoted[0]}, not for {digest}" in done.stdout


def test_an_archive_of_an_index_platform_that_never_ran_is_not_verified(world: World, archive: Path) -> None:
    amd64 = world.push("arm-amd64")
    writer = RegistryWriter(world.server.url)
    arm64 = writer.rewrite_config(world.name, amd64, "arm-arm64", architecture="arm64", variant="v8")
    writer.index(world.name, "arm-index", {"linux/amd64": amd64, "linux/arm64/v8": arm64})
    cosign.attach(world.verdict(amd64), world.ref(amd64))
    folder = world.folder / "arm"
    folder.mkdir()
    crafted = exported(world, arm64, folder / "arm.oci.tar")
    assert skopeo_reads(crafted)[0] == arm64
    record = {"schema": carried.SCHEMA, "repository": world.repository, "digest": arm64, "platform": "linux/arm64/v8",
              "attestations": cosign.download(world.ref(amd64))}   # the amd64 arm's verdicts, beside it
    carried.sidecar(crafted).write_text(json.dumps(record))
    done = world.check(f"oci-archive:{crafted}")
    assert done.returncode == NOT_VERIFIED and f"not for {arm64}" in done.stdout, done.stderr


def test_an_archive_is_held_to_what_was_seen_of_its_digest_anywhere(world: World) -> None:
    """`export` carries the snapshot beside the verdicts, and keeps what it saw of the digest as `check` does. The
    history is per digest, whatever the reference: once
    the registry showed a newer verdict (FAILED), an archive exported before it is an older set, and refused."""
    digest = world.push("archived-then-failed", keep_local=True)   # export takes an image the engine holds
    cosign.attach(world.verdict(digest, at="2026-12-01T10:00:00Z"), world.ref(digest))
    signer = keys.signing_key(world.verifier_env)
    assert snapshots.attach_current(world.ref(digest), world.trusted(), signer, {})
    out = world.folder / "export-older"
    done = cli("export", world.ref(digest), "--out", str(out), "--name", "older", "--force", "--trust-key",
               str(world.verifier_pub), env=world.checker_env)
    assert done.returncode == 0, done.stderr
    older = out / "older.oci.tar"
    carried_envelopes = json.loads(carried.sidecar(older).read_text())["attestations"]
    assert [snapshot.is_snapshot(e) for e in carried_envelopes].count(True) == 1
    done = world.check(f"oci-archive:{older}")
    # `export` read the digest's verdicts through check's own rule (what vouches for the archive), so this machine
    # has seen them once already: the archive holds what was seen, no more and no less.
    assert done.returncode == 0 and "nothing went back since last seen" in done.stdout, done.stderr
    cosign.attach(world.verdict(digest, fail=True, at="2026-12-01T11:00:00Z"), world.ref(digest))
    assert snapshots.attach_current(world.ref(digest), world.trusted(), signer, {})
    assert world.check(world.ref(digest)).returncode == NOT_VERIFIED   # the FAILED one decides, and is kept
    done = world.check(f"oci-archive:{older}")
    assert done.returncode == NOT_VERIFIED and "rollback: the registry serves snapshot" in done.stderr, done.stderr
