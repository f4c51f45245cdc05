"""Signed verdicts end to end with real parts: a loopback registry (Debian's docker-registry), tiny images of
this test, verdicts signed by a verifier key and attached by the promote side's own function (real cosign),
`nox -s check` as a user runs it, and `cosign verify-attestation` on what was attached. The cell record that
is signed stands in for a GPU run (no GPU here): what is tested is that a verdict, once signed, holds only
for its digest, its arch and its key, and that each forgery is refused with its reason and exit code.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import shutil
import socket
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from buildscripts import distribution
from buildscripts.errors import CannotCheck, NotVerified, RegistryError
from buildscripts.publish import registry
from buildscripts.results import Status
from buildscripts.trust import carried, cosign, dsse, keys, statement, verdicts
from buildscripts.verify.reuse import probe_digest
from tests import needs
from tests.cli import cli
from tests.integration.tinyimages import owner_change
from tests.registry_server import RegistryServer, free_port
from tests.registry_writer import INDEX, RegistryWriter
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
NOT_VERIFIED, CANNOT_CHECK = NotVerified.exit_code, CannotCheck.exit_code


@dataclass
class World:
    """One registry, one verifier key, one stranger's key, and the tiny images pushed there."""

    client: docker.DockerClient
    server: RegistryServer
    folder: Path
    repository: str
    verifier_env: dict[str, str]
    verifier_pub: Path
    stranger_env: dict[str, str]
    checker_env: dict[str, str]      # a user's: no key of its own, trusts only what --key names
    images: list[str] = field(default_factory=list)

    def push(self, tag: str, *, keep_local: bool = False) -> str:
        """A new tiny image (unique content) pushed as REPOSITORY:tag, an OCI manifest with gzip layers (what
        Proxmox and LXC's oci template load); its digest. With `keep_local` the engine pulls it back by digest
        (its RepoDigests name it, as for an image pulled from its registry)."""
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            payload = uuid.uuid4().hex.encode()
            info = tarfile.TarInfo("hello.txt")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        name, tag_here = "sglang-images-test-attest", uuid.uuid4().hex[:10]
        self.client.api.import_image_from_data(data.getvalue(), repository=name, tag=tag_here,
                                               changes=[owner_change(), 'CMD ["/hi"]'])
        image_id = str(self.client.images.get(f"{name}:{tag_here}").id)
        self.images.append(image_id)
        subprocess.run(["skopeo", "copy", "--quiet", "--format", "oci", "--dest-tls-verify=false",
                        f"docker-daemon:{image_id}", f"docker://{self.repository}:{tag}"], check=True, timeout=120)
        digest = distribution.served(f"{self.repository}:{tag}", {}).digest
        if keep_local:
            self.images.append(distribution.pull(self.client, self.ref(digest)))
        return digest

    def ref(self, digest: str) -> str:
        return f"{self.repository}@{digest}"

    @property
    def name(self) -> str:
        return self.repository.split("/", 1)[1]

    def verdict(self, digest: str, arch: str = "sm_100a", *, fail: bool = False, drop: str | None = None,
                at: str = "2026-12-01T10:00:00Z") -> Path:
        """A verdict the verifier signed for `digest`, made by hand: a FAILED one, one with a GPU stage left
        out, one signed at a chosen time."""
        family = arch.rstrip("af")
        stages = [s.model_copy(update={"status": Status.FAILED}) if fail and s.name == "server" else s
                  for s in gpu_passed("NVIDIA B200", family) if s.name != drop]
        cell = finish(make_cell("verified"), stages=cpu_passed() + stages)
        document = statement.statement(cell, arch, subject=self.repository, digest=digest, configuration={},
                                       url=None, signed_at=at)
        envelope = dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, keys.signing_key(self.verifier_env))
        return write(self, envelope)

    def sign(self, digest: str, arch: str = "sm_100", env: dict[str, str] | None = None) -> list[Path]:
        """What a verifier that ran every GPU stage of a cell on `arch` signs for `digest`."""
        gpu = {"sm_100": "NVIDIA B200", "sm_120": "NVIDIA RTX PRO 6000"}[arch]
        cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed(gpu, arch))
        run = self.folder / f"run-{uuid.uuid4().hex[:8]}"
        return verdicts.sign_verdicts(cell, run, image=self.ref(digest), matrix=ROOT / "matrix.yaml",
                                      probe=probe_digest(), env=env or self.verifier_env)

    def trusted(self) -> list[keys.PublicKey]:
        return [keys.read_public(self.verifier_pub)]

    def check(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli("check", *args, "--key", str(self.verifier_pub), env=self.checker_env, timeout=300)


def key_env(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    return {"SGLANG_IMAGES_KEY_DIR": str(folder), "SGLANG_IMAGES_SIGNING_KEY": "", "SGLANG_IMAGES_SIGNING_KEY_FILE": ""}


@pytest.fixture(scope="module")
def world(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    needs.tools("cosign", "skopeo")
    folder = tmp_path_factory.mktemp("attest")
    server = RegistryServer(folder / "registry")
    server.folder.mkdir()
    server.start()
    verifier = key_env(folder / "verifier")
    pub = folder / "verifier.pub"
    pub.write_bytes(keys.signing_key(verifier).public.pem)
    made = World(client, server, folder, f"{server.url}/sglang-images-test-{uuid.uuid4().hex[:8]}", verifier, pub,
                 key_env(folder / "stranger"), key_env(folder / "checker"))
    try:
        yield made
    finally:
        server.stop()
        for image_id in dict.fromkeys(made.images):
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(image_id, force=True)
        shutil.rmtree(server.folder / "data", ignore_errors=True)


@pytest.fixture(scope="module")
def promoted(world: World) -> tuple[str, list[Path]]:
    """An image promoted with its sm_100 verdict attached by the promote side: (digest, verdict files)."""
    digest = world.push("good", keep_local=True)   # the engine keeps its RepoDigest: export and local checks
    files = world.sign(digest)
    assert verdicts.attach_verdicts(files, world.ref(digest), trusted=world.trusted()) == files
    return digest, files


def attach_directly(world: World, envelope: Any, digest: str) -> None:
    """What anyone with write access to the registry can do: attach any envelope, bypassing promotion."""
    path = world.folder / f"forged-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(envelope))
    cosign.attach(path, world.ref(digest))


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
    assert document["predicate"]["arch"] == "sm_100a" and verdicts.parse_time(document["predicate"]["signedAt"])
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
        registry.untag(world.client, local)


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


def write(world: World, envelope: Any) -> Path:
    path = world.folder / f"envelope-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(envelope))
    return path


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
    assert f"is not verified for {moved}: no valid signed verdict is attached" in done.stderr
    assert world.check(world.ref(first)).returncode == 0   # the tested digest itself still is


def test_an_unreachable_registry_is_cannot_check(world: World) -> None:
    done = world.check(f"127.0.0.1:{free_port()}/nothing:here")
    assert done.returncode == CANNOT_CHECK and "cannot check" in done.stderr and "Traceback" not in done.stderr
    assert world.check(f"{world.repository}:no-such-tag").returncode == CANNOT_CHECK


# ---------------------------------------------------------------- an OCI archive carries them


@pytest.fixture(scope="module")
def archive(world: World, promoted: tuple[str, list[Path]]) -> Path:
    out = world.folder / "export"
    done = cli("export", world.ref(promoted[0]), "--out", str(out), "--name", "good", "--force",
               "--trust-key", str(world.verifier_pub), env=world.checker_env)
    assert done.returncode == 0, done.stderr
    made = out / "good.oci.tar"
    assert sorted(p.name for p in out.iterdir()) == ["good.oci.tar", "good.oci.tar.sha256",
                                                      "good.oci.tar.verdicts.json", "good.proxmox.md"]
    assert len((out / "good.oci.tar.sha256").read_text().splitlines()) == 2
    note = (out / "good.proxmox.md").read_text()
    assert "nox -s check -- oci-archive:good.oci.tar" in note and "sglang-images-source: oci-archive:" in note
    return made


def test_the_archive_holds_the_tested_image(world: World, archive: Path, promoted: tuple[str, list[Path]]) -> None:
    done = world.check(f"oci-archive:{archive}", "--json")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)
    assert found["digest"] == promoted[0] and list(found["archs"]) == ["sm_100a"]
    assert world.check(f"oci-archive:{archive}", "--arch", "sm_120a").returncode == NOT_VERIFIED


def tampered(archive: Path, name: str) -> Path:
    """A copy of `archive` and its verdicts in a folder of their own."""
    folder = archive.parent.parent / f"tampered-{name}"
    folder.mkdir()
    copy = folder / archive.name
    shutil.copy(archive, copy)
    shutil.copy(carried.sidecar(archive), carried.sidecar(copy))
    return copy


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


# ---------------------------------------------------------------- what the verdicts say, weighed


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
    # an entry that names no platform is one an engine may pull anywhere (it reads the config): it must be
    # verified too, whatever the amd64 entry holds
    writer.index(world.name, "index-open", {"linux/amd64": amd64, "": arm64})
    done = world.check(f"{world.repository}:index-open", "--platform", "linux/amd64")
    assert done.returncode == NOT_VERIFIED and f"is not verified for {arm64}" in done.stderr, done.stderr


def test_the_newest_verdict_decides_and_what_the_registry_hides_cannot_be_seen(world: World) -> None:
    digest = world.push("rollback")
    cosign.attach(world.verdict(digest, at="2026-12-01T10:00:00Z"), world.ref(digest))
    older = RegistryWriter(world.server.url).manifest(world.name, digest.replace(":", "-") + ".att")
    done = world.check(world.ref(digest))
    assert done.returncode == 0 and "signed 2026-12-01T10:00:00Z" in done.stdout, done.stderr
    cosign.attach(world.verdict(digest, fail=True, at="2026-12-01T11:00:00Z"), world.ref(digest))
    done = world.check(world.ref(digest))
    assert done.returncode == NOT_VERIFIED and "FAILED (server@sm_100a); signed 2026-12-01T11:00:00Z" in done.stderr
    assert "outdating 1 older verdict" in done.stderr
    # A writer of the registry points the attestation tag back at the older attachment: offline, nothing
    # shows that a newer verdict exists (docs/trust.md: what a registry writer can still do).
    RegistryWriter(world.server.url).put_manifest(world.name, digest.replace(":", "-") + ".att", *older)
    assert world.check(world.ref(digest)).returncode == 0


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


# ---------------------------------------------------------------- archives as skopeo reads them


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
