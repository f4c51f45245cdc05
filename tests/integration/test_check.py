"""Signed verdicts end to end with real parts: a loopback registry (Debian's docker-registry), tiny images of
this test, verdicts signed by a verifier key and attached by the promote side's own function (real cosign),
`nox -s check` as a user runs it, and `cosign verify-attestation` on what was attached. The cell record that
is signed stands in for a GPU run (no GPU here): what is tested is that a verdict, once signed, holds only
for its digest, its arch and its key, and that each forgery is refused with its reason and exit code.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from buildscripts.errors import NotVerified
from buildscripts.registry import through_engine
from buildscripts.trust import carried, cosign, freshness, keys, statement, verdicts
from tests.attest_world import (
    CANNOT_CHECK,
    NOT_VERIFIED,
    World,
    attach_directly,
    fixtures,
    tampered,
    write,
)
from tests.cli import cli
from tests.registry_server import free_port

pytestmark = pytest.mark.registry
world, promoted, archive = fixtures("attest")


def test_cosign_verify_attestation_accepts_what_promotion_attached(world: World,
                                                                   promoted: tuple[str, list[Path]]) -> None:
    digest, _ = promoted
    done = subprocess.run(["cosign", "verify-attestation", "--key", str(world.verifier_pub), "--insecure-ignore-tlog",
                           "--type", statement.TEST_RESULT, world.ref(digest)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    document = json.loads(base64.b64decode(json.loads(line)["payload"]))
    assert document["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")
    assert document["predicate"]["result"] == "PASSED" and "server@sm_100a" in document["predicate"]["passedTests"]
    assert document["predicate"]["arch"] == "sm_100a" and freshness.parse_time(document["predicate"]["signedAt"])
    names = {c["name"] for c in document["predicate"]["configuration"]}
    assert {"matrix.yaml", "buildscripts/probe"} < names and any(n.startswith("lockfiles/") for n in names)


def test_check_verifies_the_tag_the_digest_and_the_local_image(world: World, promoted: tuple[str, list[Path]]) -> None:
    digest, _ = promoted
    for name in (f"{world.repository}:good", world.ref(digest)):
        done = world.check(name, "--json")
        assert done.returncode == 0, done.stderr
        (found,) = json.loads(done.stdout)
        assert found["digest"] == digest and found["verified"] and list(found["archs"]) == ["sm_100a"]
    assert world.check(f"{world.repository}:good", "--arch", "sm_100a").returncode == 0
    image = world.client.images.get(world.ref(digest))
    local = f"sglang-images-test-attest-local:{uuid.uuid4().hex[:8]}"   # a name only this engine knows
    image.tag(local)
    try:
        done = world.check(local)   # the engine's record of what it pushed: RepoDigests
        assert done.returncode == 0 and f"local image, {world.ref(digest)}" in done.stdout, done.stderr
    finally:
        through_engine.untag(world.client, local)


def test_a_second_promotion_attaches_nothing_more(world: World, promoted: tuple[str, list[Path]]) -> None:
    digest, files = promoted
    assert verdicts.attach_verdicts(files, world.ref(digest), trusted=world.trusted()) == []
    assert len(cosign.download(world.ref(digest))) == 1


def test_an_sm_100_verdict_does_not_claim_sm_120(world: World, promoted: tuple[str, list[Path]]) -> None:
    done = world.check(f"{world.repository}:good", "--arch", "sm_120a")
    assert done.returncode == NOT_VERIFIED, done.stderr
    assert "no valid signed verdict for sm_120a (valid verdicts name sm_100a)" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unsigned_or_hand_edited_passed_is_refused(world: World, promoted: tuple[str, list[Path]]) -> None:
    _, files = promoted
    digest = world.push("forged")
    real = json.loads(files[0].read_text())
    document = json.loads(base64.b64decode(real["payload"]))
    document["subject"][0]["digest"]["sha256"] = digest.removeprefix("sha256:")   # "PASSED, for this digest"
    edited = {**real, "payload": base64.b64encode(json.dumps(document).encode()).decode()}
    # cosign attaches no envelope without a signature entry: an empty one is what "unsigned" comes to
    unsigned = {**edited, "signatures": [{"keyid": "", "sig": ""}]}
    with pytest.raises(NotVerified, match="no valid signature by a trusted key"):   # promotion refuses them ...
        verdicts.attach_verdicts([write(world, edited)], world.ref(digest), trusted=world.trusted())
    assert cosign.download(world.ref(digest)) == []
    for envelope in (edited, unsigned):   # ... and a registry that holds them anyway earns nothing
        attach_directly(world, envelope, digest)
    done = world.check(f"{world.repository}:forged")
    assert done.returncode == NOT_VERIFIED
    assert done.stdout.count("no valid signature by a trusted key") == 2 and "no valid signed verdict" in done.stdout
    direct = subprocess.run(["cosign", "verify-attestation", "--key", str(world.verifier_pub), "--insecure-ignore-tlog",
                             "--type", statement.TEST_RESULT, world.ref(digest)], capture_output=True, text=True)
    assert direct.returncode != 0   # cosign agrees


def test_a_verdict_signed_by_another_key_is_refused(world: World) -> None:
    digest = world.push("stranger")
    files = world.sign(digest, arch="sm_120", env=world.stranger_env)
    with pytest.raises(NotVerified, match="no valid signature"):
        verdicts.attach_verdicts(files, world.ref(digest), trusted=world.trusted())
    attach_directly(world, json.loads(files[0].read_text()), digest)
    done = world.check(f"{world.repository}:stranger", "--arch", "sm_120a")
    assert done.returncode == NOT_VERIFIED and "no valid signature by a trusted key" in done.stdout
    stranger_pub = world.folder / "stranger.pub"
    stranger_pub.write_bytes(keys.signing_key(world.stranger_env).public.pem)
    trusting = cli("check", f"{world.repository}:stranger", "--key", str(stranger_pub), env=world.checker_env)
    assert trusting.returncode == 0, trusting.stderr   # whom to trust is the reader's choice, by key


def test_a_verdict_for_another_digest_is_refused(world: World, promoted: tuple[str, list[Path]]) -> None:
    tested, files = promoted
    other = world.push("other")
    with pytest.raises(NotVerified, match=f"is a verdict for {tested}, not for"):
        verdicts.attach_verdicts(files, world.ref(other), trusted=world.trusted())
    attach_directly(world, json.loads(files[0].read_text()), other)   # copied to the other image's .att
    done = world.check(f"{world.repository}:other")
    assert done.returncode == NOT_VERIFIED
    assert f"a verdict for {tested}, not for {other}" in done.stdout


def test_a_tag_moved_after_promotion_fails_the_check(world: World) -> None:
    first = world.push("moving")
    verdicts.attach_verdicts(world.sign(first), world.ref(first), trusted=world.trusted())
    assert world.check(f"{world.repository}:moving").returncode == 0
    moved = world.push("moving")
    done = world.check(f"{world.repository}:moving")
    assert done.returncode == NOT_VERIFIED
    assert f"is not verified for {moved} (linux/amd64): no valid signed verdict is attached" in done.stderr
    assert world.check(world.ref(first)).returncode == 0   # the tested digest itself still is


def test_an_unreachable_registry_is_cannot_check(world: World) -> None:
    done = world.check(f"127.0.0.1:{free_port()}/nothing:here")
    assert done.returncode == CANNOT_CHECK and "cannot check" in done.stderr and "Traceback" not in done.stderr
    assert world.check(f"{world.repository}:no-such-tag").returncode == CANNOT_CHECK


# ---------------------------------------------------------------- an OCI archive carries them


def test_the_archive_holds_the_tested_image(world: World, archive: Path, promoted: tuple[str, list[Path]]) -> None:
    done = world.check(f"oci-archive:{archive}", "--json")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)
    assert found["digest"] == promoted[0] and list(found["archs"]) == ["sm_100a"]
    assert world.check(f"oci-archive:{archive}", "--arch", "sm_120a").returncode == NOT_VERIFIED


def test_an_archive_without_its_verdicts_or_with_edited_ones_is_not_verified(world: World, archive: Path) -> None:
    bare = tampered(archive, "bare")
    carried.sidecar(bare).unlink()
    done = world.check(f"oci-archive:{bare}")
    assert done.returncode == NOT_VERIFIED and "carries no signed verdict" in done.stderr
    edited = tampered(archive, "edited")
    record = json.loads(carried.sidecar(edited).read_text())
    document = json.loads(base64.b64decode(record["attestations"][0]["payload"]))
    tests = document["predicate"]["passedTests"]
    document["predicate"]["passedTests"] = [t.replace("sm_100a", "sm_120a") for t in tests]
    record["attestations"][0]["payload"] = base64.b64encode(json.dumps(document).encode()).decode()
    carried.sidecar(edited).write_text(json.dumps(record))
    done = world.check(f"oci-archive:{edited}", "--arch", "sm_120a")
    assert done.returncode == NOT_VERIFIED and "no valid signature by a trusted key" in done.stdout


def test_an_archive_of_another_image_beside_the_verdicts_is_refused(world: World, archive: Path) -> None:
    swapped = world.push("swapped", keep_local=True)
    out = world.folder / "export-swapped"
    done = cli("export", world.ref(swapped), "--out", str(out), "--name", "good", "--force", env=world.checker_env)
    assert done.returncode == 0, done.stderr
    assert "carries none" in done.stderr and not carried.sidecar(out / "good.oci.tar").exists()
    shutil.copy(carried.sidecar(archive), carried.sidecar(out / "good.oci.tar"))
    done = world.check(f"oci-archive:{out / 'good.oci.tar'}")
    assert done.returncode == NOT_VERIFIED and "but the archive holds the manifest" in done.stderr


def test_an_archive_whose_layer_bytes_changed_is_refused(world: World, archive: Path) -> None:
    flipped = tampered(archive, "flipped")
    with tarfile.open(flipped) as tar:
        layer = max((m for m in tar.getmembers() if m.name.startswith("blobs/sha256/")), key=lambda m: m.size)
    with flipped.open("r+b") as fh:   # one byte of the largest blob (a layer), its name and the manifest kept
        fh.seek(layer.offset_data + layer.size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    done = world.check(f"oci-archive:{flipped}")
    assert done.returncode == NOT_VERIFIED and "holds other bytes than its name says" in done.stderr


def test_preflight_checks_the_source_a_container_records(world: World, archive: Path) -> None:
    """Read-only, from the container's config alone (this machine has no GPU, so the host checks fail)."""
    lxc_path = world.folder / "lxc"
    for name, source in (("recorded", f"oci-archive:{archive}"), ("unverified", f"{world.repository}:forged")):
        (lxc_path / name).mkdir(parents=True)
        (lxc_path / name / "config").write_text(f"# sglang-images-source%3A {source}\nlxc.uts.name = {name}\n")
    trust = ["--lxc-path", str(lxc_path), "--trust-key", str(world.verifier_pub)]
    done = cli("preflight", "--lxc-name", "recorded", *trust, env=world.checker_env)
    row = next(line for line in done.stdout.splitlines() if "image's signed" in line)
    assert "✓ pass" in row, done.stdout
    done = cli("preflight", "--lxc-name", "unverified", *trust, env=world.checker_env)
    row = next(line for line in done.stdout.splitlines() if "image's signed" in line)
    assert "! warn" in row and "Traceback" not in done.stderr
    done = cli("preflight", "--lxc-name", "recorded", "--lxc-path", str(lxc_path), env=world.checker_env)
    row = next(line for line in done.stdout.splitlines() if "image's signed" in line)
    assert "! warn" in row   # the verifier's key is no key the project or this user trusts


