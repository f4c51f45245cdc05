"""What a verdict says, weighed with real parts (a loopback registry, real cosign and skopeo, `nox -s check`
as a user runs it): cosign without and with the project's CUE policy, an index verified per platform, the
newest verdict per digest and arch (and the rollback a registry writer can make, refused once seen), a registry
that never answers, and a malformed attachment."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from buildscripts.errors import RegistryError
from buildscripts.publish import snapshots
from buildscripts.trust import cosign, keys, statement
from tests.attest_world import CANNOT_CHECK, NOT_VERIFIED, ROOT, World, fixtures
from tests.cli import cli
from tests.registry_writer import INDEX, RegistryWriter

pytestmark = pytest.mark.registry
world, promoted, archive = fixtures("weighed")


POLICY = ROOT / "policies" / "test-result-sm_100a.cue"


def cosign_verify(world: World, digest: str, *policy: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cosign", "verify-attestation", "--key", str(world.verifier_pub), "--insecure-ignore-tlog",
                           "--type", statement.TEST_RESULT, *policy, world.ref(digest)], capture_output=True,
                          text=True, timeout=120)


def test_cosign_weighs_the_verdict_only_with_the_policy(world: World) -> None:
    """cosign alone checks the signature and the subject: it exits 0 on a FAILED verdict, one of another arch
    and one with a GPU stage missing. With the policy of sm_100a it accepts only a good sm_100a verdict."""
    kinds = {"passed": {}, "failed": {"fail": True}, "other arch": {"arch": "sm_120a"},
             "missing stage": {"drop": "first-generation"}}
    for kind, how in kinds.items():
        digest = world.push(f"policy-{kind.replace(' ', '-')}")
        cosign.attach(world.verdict(digest, **how), world.ref(digest))   # type: ignore[arg-type]
        assert cosign_verify(world, digest).returncode == 0, kind
        with_policy = cosign_verify(world, digest, "--policy", str(POLICY))
        assert (with_policy.returncode == 0) == (kind == "passed"), (kind, with_policy.stderr)
        checked = world.check(world.ref(digest), "--arch", "sm_100a")
        assert (checked.returncode == 0) == (kind == "passed"), (kind, checked.stderr)


def test_an_index_holds_a_verdict_per_platform(world: World) -> None:
    """A verdict names the platform manifest that ran: an index's other platform has none, whatever the
    index's own attachments say."""
    amd64 = world.push("index-amd64")
    writer = RegistryWriter(world.server.url)
    arm64 = writer.rewrite_config(world.name, amd64, "index-arm64", architecture="arm64", variant="v8")
    index = writer.index(world.name, "index", {"linux/amd64": amd64, "linux/arm64/v8": arm64})
    cosign.attach(world.verdict(amd64), world.ref(amd64))
    cosign.attach(world.verdict(index), world.ref(index))   # an index named as subject: no platform ran as such
    tag = f"{world.repository}:index"
    done = world.check(tag, "--platform", "linux/amd64", "--json")
    assert done.returncode == 0, done.stderr
    found = {f["platform"]: f for f in json.loads(done.stdout)}
    assert set(found) == {"linux/amd64", "linux/arm64/v8"} and found["linux/amd64"]["verified"]
    assert found["linux/amd64"]["index"] == index and not found["linux/arm64/v8"]["verified"]
    done = world.check(tag, "--platform", "linux/arm64")
    assert done.returncode == NOT_VERIFIED, done.stderr
    assert f"is not verified for {arm64} (linux/arm64/v8)" in done.stderr
    # an entry that names no platform is one containerd takes for the platform its config names (Docker's own
    # puller for none): it must be verified there too, whatever the labelled entry holds
    other = world.push("index-other")   # an amd64 image no verdict names
    writer.index(world.name, "index-open", {"linux/amd64": amd64, "": other})
    done = world.check(f"{world.repository}:index-open", "--platform", "linux/amd64")
    assert done.returncode == NOT_VERIFIED and "lists two entries for linux/amd64" in done.stderr, done.stderr
    writer.index(world.name, "index-open-arm64", {"linux/amd64": amd64, "": arm64})   # its config: arm64
    assert world.check(f"{world.repository}:index-open-arm64", "--platform", "linux/amd64").returncode == 0
    done = world.check(f"{world.repository}:index-open-arm64", "--platform", "linux/arm64")
    assert done.returncode == NOT_VERIFIED and f"is not verified for {arm64}" in done.stderr, done.stderr


def promote_snapshot(world: World, digest: str) -> None:
    """What the promote job does once it attached verdicts: sign and attach a snapshot of what is attached."""
    assert snapshots.attach_current(world.ref(digest), world.trusted(), keys.signing_key(world.verifier_env), {})


def test_the_newest_verdict_decides_and_a_rollback_of_the_attestation_tag_is_refused(world: World) -> None:
    digest = world.push("rollback")
    attestations = digest.replace(":", "-") + ".att"
    cosign.attach(world.verdict(digest, at="2026-12-01T10:00:00Z"), world.ref(digest))
    promote_snapshot(world, digest)
    older = RegistryWriter(world.server.url).manifest(world.name, attestations)
    done = world.check(world.ref(digest))
    assert done.returncode == 0 and "signed 2026-12-01T10:00:00Z" in done.stdout, done.stderr
    assert "first contact" in done.stdout and "trust on first use" in done.stdout
    assert "ignored" not in done.stdout   # the snapshot is read as a snapshot, not ignored as no verdict
    # cosign weighs the test-result verdicts alone: the snapshot beside them changes nothing for its policy
    assert cosign_verify(world, digest, "--policy", str(POLICY)).returncode == 0
    cosign.attach(world.verdict(digest, fail=True, at="2026-12-01T11:00:00Z"), world.ref(digest))
    promote_snapshot(world, digest)
    done = world.check(world.ref(digest))
    assert done.returncode == NOT_VERIFIED and "FAILED (server@sm_100a); signed 2026-12-01T11:00:00Z" in done.stderr
    assert "outdating 1 older verdict" in done.stderr and "newer than last seen" in done.stdout
    # A writer of the registry points the attestation tag back at the older attachment, its snapshot with it.
    RegistryWriter(world.server.url).put_manifest(world.name, attestations, *older)
    done = world.check(world.ref(digest))
    assert done.returncode == NOT_VERIFIED, done.stdout
    assert "rollback: the registry serves snapshot" in done.stderr and "last seen" in done.stderr
    assert "remove " in done.stderr and "Traceback" not in done.stderr
    # What this protects and what not (docs/trust.md): a reader that never saw the newer set trusts the older one.
    fresh = world.check(world.ref(digest), "--state-dir", str(world.folder / "another-reader"))
    assert fresh.returncode == 0 and "first contact" in fresh.stdout, fresh.stderr


def test_a_verdict_hidden_from_under_its_snapshot_is_refused_at_first_contact(world: World) -> None:
    """Only the FAILED verdict's layer is taken out of the attestation tag, the snapshot that lists it left: a
    reader that never saw this digest before refuses it too."""
    digest = world.push("hidden")
    attestations = digest.replace(":", "-") + ".att"
    cosign.attach(world.verdict(digest, at="2026-12-01T10:00:00Z"), world.ref(digest))
    failed = world.verdict(digest, fail=True, at="2026-12-01T11:00:00Z")
    cosign.attach(failed, world.ref(digest))
    promote_snapshot(world, digest)
    writer = RegistryWriter(world.server.url)
    body, media_type = writer.manifest(world.name, attestations)
    manifest = json.loads(body)
    hidden = json.loads(failed.read_text())["payload"]
    manifest["layers"] = [layer for layer in manifest["layers"]
                          if hidden not in writer.blob(world.name, layer["digest"]).decode()]
    assert len(manifest["layers"]) == 2   # the PASSED verdict and the snapshot
    writer.put_manifest(world.name, attestations, json.dumps(manifest).encode(), media_type)
    done = world.check(world.ref(digest))
    assert done.returncode == NOT_VERIFIED, done.stdout
    assert "which lists 1 verdict (sm_100a FAILED, signed 2026-12-01T11:00:00Z) that it does not serve" in done.stderr


def test_a_registry_that_never_answers_is_named_within_the_deadline(world: World) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)   # takes connections (the kernel does), never answers
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        env = {**world.checker_env, "SGLANG_IMAGES_REGISTRY_TIMEOUT": "2"}
        for ref in (f"{host}/sglang:tag", f"{host}/sglang@sha256:{'a' * 64}"):
            done = cli("check", ref, "--key", str(world.verifier_pub), env=env, timeout=60)   # a guard, no timing
            assert done.returncode == CANNOT_CHECK, done.stderr
            assert f"the registry {host} did not answer within 2 s" in done.stderr and "Traceback" not in done.stderr
        with pytest.raises(RegistryError, match=f"the registry {host} did not answer"):
            cosign.download(f"{host}/sglang@sha256:{'a' * 64}", {"SGLANG_IMAGES_REGISTRY_TIMEOUT": "2"})
        done = cli("verify", f"{host}/sglang@sha256:{'a' * 64}", "--out", str(world.folder / "silent.json"),
                   env=env, timeout=60)   # verify REPO@sha256:… reads the registry before it pulls
        assert done.returncode == RegistryError.exit_code, done.stderr
        assert f"the registry {host} did not answer within 2 s" in done.stderr


def test_a_malformed_attachment_is_named_as_such(world: World) -> None:
    digest = world.push("malformed")
    junk = world.push(digest.replace(":", "-") + ".att")   # an image, not an attestation, at the .att tag
    assert junk != digest
    done = world.check(world.ref(digest))
    assert done.returncode == CANNOT_CHECK and "malformed" in done.stderr, done.stderr
    assert "docker login" not in done.stderr and "Traceback" not in done.stderr
    other = world.push("malformed-index")   # an empty index at the .att tag
    body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": []}).encode()
    RegistryWriter(world.server.url).put_manifest(world.name, other.replace(":", "-") + ".att", body, INDEX)
    done = world.check(world.ref(other))
    assert done.returncode == CANNOT_CHECK and "are malformed" in done.stderr, done.stderr
