"""One loopback registry, one verifier key, a stranger's key and a user's environment, and tiny images pushed
there as OCI manifests: the world the `check` tests (test_check*.py) sign, attach, export and check in. The
cell record that is signed stands in for a GPU run (no GPU here)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from buildscripts.errors import CannotCheck, NotVerified
from buildscripts.registry import manifests, through_engine
from buildscripts.results import Status
from buildscripts.trust import carried, cosign, dsse, keys, statement, verdicts
from buildscripts.verify.reuse import probe_digest
from tests import needs
from tests.cli import cli
from tests.integration.tinyimages import one_file_tar, owner_change
from tests.registry_server import RegistryServer
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

ROOT = Path(__file__).resolve().parents[1]
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

    def push(self, tag: str, *, keep_local: bool = False, labels: dict[str, str] | None = None) -> str:
        """A new tiny image (unique content) pushed as REPOSITORY:tag, an OCI manifest with gzip layers (what
        Proxmox and LXC's oci template load); its digest. With `keep_local` the engine pulls it back by digest
        (its RepoDigests name it, as for an image pulled from its registry)."""
        data = io.BytesIO(one_file_tar(uuid.uuid4().hex.encode()))
        name, tag_here = "sglang-images-test-attest", uuid.uuid4().hex[:10]
        self.client.api.import_image_from_data(data.getvalue(), repository=name, tag=tag_here,
                                               changes=[owner_change(), 'CMD ["/hi"]',
                                                        *(f"LABEL {k}={v}" for k, v in (labels or {}).items())])
        image_id = str(self.client.images.get(f"{name}:{tag_here}").id)
        self.images.append(image_id)
        subprocess.run(["skopeo", "copy", "--quiet", "--format", "oci", "--dest-tls-verify=false",
                        f"docker-daemon:{image_id}", f"docker://{self.repository}:{tag}"], check=True, timeout=120)
        digest = manifests.served(f"{self.repository}:{tag}", {}).digest
        if keep_local:
            self.images.append(through_engine.pull(self.client, self.ref(digest)))
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



@contextlib.contextmanager
def opened(client: docker.DockerClient, folder: Path) -> Iterator[World]:
    """A registry of its own in `folder`, stopped and emptied (and every image made removed) at the end."""
    needs.tools("cosign", "skopeo")
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


def fixtures(name: str) -> tuple[Any, Any, Any]:
    """A test module's fixtures, `world, promoted, archive = fixtures("NAME")`: a registry of its own for the
    module (`world`), an image promoted there with its sm_100 verdict (`promoted`), and its export (`archive`)."""
    @pytest.fixture(scope="module")
    def world(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
        with opened(client, tmp_path_factory.mktemp(name)) as made:
            yield made

    @pytest.fixture(scope="module")
    def promoted(world: World) -> tuple[str, list[Path]]:
        return promote_one(world)

    @pytest.fixture(scope="module")
    def archive(world: World, promoted: tuple[str, list[Path]]) -> Path:
        return export_one(world, promoted[0])

    return world, promoted, archive


def promote_one(world: World) -> tuple[str, list[Path]]:
    """An image promoted with its sm_100 verdict attached by the promote side: (digest, verdict files)."""
    digest = world.push("good", keep_local=True)   # the engine keeps its RepoDigest: export and local checks
    files = world.sign(digest)
    assert verdicts.attach_verdicts(files, world.ref(digest), trusted=world.trusted()) == files
    return digest, files


def export_one(world: World, digest: str) -> Path:
    """`nox -s export` of the promoted image, as a user runs it: the archive and its verdicts beside it."""
    out = world.folder / "export"
    done = cli("export", world.ref(digest), "--out", str(out), "--name", "good", "--force",
               "--trust-key", str(world.verifier_pub), env=world.checker_env)
    assert done.returncode == 0, done.stderr
    made = out / "good.oci.tar"
    assert sorted(p.name for p in out.iterdir()) == ["good.oci.tar", "good.oci.tar.sha256",
                                                      "good.oci.tar.verdicts.json", "good.proxmox.md"]
    assert len((out / "good.oci.tar.sha256").read_text().splitlines()) == 2
    note = (out / "good.proxmox.md").read_text()
    assert "nox -s check -- oci-archive:good.oci.tar" in note and "sglang-images-source: oci-archive:" in note
    return made


def attach_directly(world: World, envelope: Any, digest: str) -> None:
    """What anyone with write access to the registry can do: attach any envelope, bypassing promotion."""
    path = world.folder / f"forged-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(envelope))
    cosign.attach(path, world.ref(digest))


def write(world: World, envelope: Any) -> Path:
    path = world.folder / f"envelope-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(envelope))
    return path


def tampered(archive: Path, name: str) -> Path:
    """A copy of `archive` and its verdicts in a folder of their own."""
    folder = archive.parent.parent / f"tampered-{name}"
    folder.mkdir()
    copy = folder / archive.name
    shutil.copy(archive, copy)
    shutil.copy(carried.sidecar(archive), carried.sidecar(copy))
    return copy
