"""Indexes that Go's readers (skopeo here, as Docker and containerd) read otherwise than a plain Python reading
would: `check` refuses them, with a real registry, cosign and skopeo and no engine (a crafted index is never
pulled by the engine here: it is skopeo that shows which image a Go reader loads).

- a key Go matches case-insensitively: `"manifests": [verified], "Manifests": [other]` is the other to Go;
- an entry spelled as Docker normalises (`linux/x86_64`, `Linux/amd64`) before the verified linux/amd64 one
  (Docker 20.10 pulls it; the skopeo here matches spellings exactly and loads the other: which one a loader
  takes depends on its rules, so the index is refused).
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildscripts.trust import cosign, dsse, keys, statement
from tests import needs
from tests.attest_world import key_env
from tests.cli import cli
from tests.integration.tinyimages import one_file_tar
from tests.registry_server import RegistryServer
from tests.registry_writer import INDEX, MANIFEST, RegistryWriter, digest_of
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

AMD64 = {"os": "linux", "architecture": "amd64"}


@dataclass
class Registry:
    server: RegistryServer
    writer: RegistryWriter
    folder: Path
    pub: Path
    name: str = "review/indexes"

    def image(self, text: str) -> dict[str, object]:
        """An index entry (no platform yet) for a one-file image whose file `who` says `text`."""
        digest, size = _pushed(self.writer, self.name, text)
        return {"mediaType": MANIFEST, "digest": digest, "size": size}

    def verified(self, text: str) -> dict[str, object]:
        """As `image`, with a passing verdict a trusted key signed attached to it."""
        entry = self.image(text)
        signer = keys.signing_key(key_env(self.folder / "verifier"))
        cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"))
        document = statement.statement(cell, "sm_100a", subject=f"{self.server.url}/{self.name}",
                                       digest=str(entry["digest"]), configuration={}, url=None,
                                       signed_at="2026-12-01T10:00:00Z")
        envelope = self.folder / f"verdict-{text}.json"
        envelope.write_text(json.dumps(dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, signer)))
        cosign.attach(envelope, f"{self.server.url}/{self.name}@{entry['digest']}")
        return entry

    def index(self, tag: str, body: str) -> str:
        return f"{self.server.url}/{self.name}@{self.writer.put_manifest(self.name, tag, body.encode(), INDEX)}"

    def check(self, ref: str) -> subprocess.CompletedProcess[str]:
        return cli("check", ref, "--platform", "linux/amd64", "--key", str(self.pub),
                   env=key_env(self.folder / "user"), timeout=300)

    def loaded(self, ref: str) -> str:
        """What skopeo, a Go reader as Docker is, loads from `ref` for linux/amd64: the text of `who`."""
        out = self.folder / f"loaded-{ref.rsplit(':', 1)[1][:12]}"
        subprocess.run([needs.tool("skopeo", "apt-get install skopeo"), "copy", "--quiet", "--src-tls-verify=false",
                        "--override-os", "linux", "--override-arch", "amd64", f"docker://{ref}", f"oci:{out}:x"],
                       check=True, timeout=120)
        blobs = out / "blobs" / "sha256"
        top = json.loads((out / "index.json").read_text())["manifests"][0]["digest"].removeprefix("sha256:")
        layer = json.loads((blobs / top).read_text())["layers"][0]["digest"].removeprefix("sha256:")
        with tarfile.open(blobs / layer) as tar:
            member = tar.extractfile("who")
            assert member is not None
            return member.read().decode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    folder = tmp_path_factory.mktemp("indexes")
    server = RegistryServer(folder / "registry")
    server.folder.mkdir()
    server.start()
    try:
        pub = folder / "verifier.pub"
        pub.write_bytes(keys.signing_key(key_env(folder / "verifier")).public.pem)
        yield Registry(server, RegistryWriter(server.url), folder, pub)
    finally:
        server.stop()


def test_an_index_key_go_reads_case_insensitively_is_refused(registry: Registry) -> None:
    shown = json.dumps({**registry.verified("good"), "platform": AMD64})
    hidden = json.dumps({**registry.image("evil"), "platform": AMD64})
    ref = registry.index("case", f'{{"schemaVersion":2,"mediaType":"{INDEX}","manifests":[{shown}],'
                                 f'"Manifests":[{hidden}]}}')
    assert registry.loaded(ref) == "evil"   # the attack is real: Go takes the second list
    checked = registry.check(ref)
    assert checked.returncode == 18, checked.stdout + checked.stderr
    assert "is not verified: the registry serves an ambiguous manifest" in checked.stderr
    assert "'manifests' and 'Manifests' differ only in case" in checked.stderr
    assert "Traceback" not in checked.stderr


@pytest.mark.parametrize("platform", [{"os": "linux", "architecture": "x86_64"},
                                      {"os": "Linux", "architecture": "amd64"},
                                      {"os": "linux", "architecture": "x86-64"}], ids=lambda p: "/".join(p.values()))
def test_an_index_with_an_entry_spelled_as_only_some_readers_normalise_is_refused(
        registry: Registry, platform: dict[str, str]) -> None:
    """containerd reads these as linux/amd64, skopeo and Podman compare them as written: which image a user gets
    depends on the reader, so the index is refused whole, never checked as one reader would take it."""
    evil = {**registry.image("evil"), "platform": platform}
    good = {**registry.verified("good"), "platform": AMD64}
    tag = "norm-" + "-".join(platform.values())
    ref = registry.index(tag, json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [evil, good]}))
    checked = registry.check(ref)
    assert checked.returncode == 18, f"check: {checked.stdout}{checked.stderr}"
    odd = next(v for v in platform.values() if v not in ("linux", "amd64"))   # the spelling it is refused for
    assert "readers of images read apart" in checked.stderr and odd in checked.stderr
    assert "Traceback" not in checked.stderr


def test_a_lone_entry_spelled_otherwise_is_refused_too(registry: Registry) -> None:
    good = {**registry.verified("good"), "platform": {"os": "linux", "architecture": "x86_64"}}
    ref = registry.index("lone", json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [good]}))
    checked = registry.check(ref)   # skopeo 1.9 finds no amd64 image in it; Docker takes it: readers disagree
    assert checked.returncode == 18 and "linux/x86_64 is containerd's linux/amd64" in checked.stderr, \
        checked.stdout + checked.stderr


def _pushed(writer: RegistryWriter, name: str, text: str) -> tuple[str, int]:
    """A one-file image whose file `who` says `text`, pushed by hand: (manifest digest, manifest size)."""
    layer = one_file_tar(text.encode(), "who")
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/who"]},
                         "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]}}).encode()
    body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": writer.put_blob(name, config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": writer.put_blob(name, layer), "size": len(layer)}]}).encode()
    return writer.put_manifest(name, text, body, MANIFEST), len(body)
