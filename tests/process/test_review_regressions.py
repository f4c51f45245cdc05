"""An attack a security review of issue 32 found open, kept as a regression with real parts and no engine (a loopback
registry, cosign, skopeo as the Go reader that loads images, `check` as a user runs it): the test asserts what
must hold (it failed before its mend). It stays off the engine on purpose: Docker 20.10's puller dereferences
nil on some crafted indexes and takes the daemon down."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from buildscripts.trust import cosign, dsse, keys, statement
from tests.attest_world import key_env
from tests.cli import cli
from tests.registry_server import RegistryServer
from tests.registry_writer import INDEX, MANIFEST, RegistryWriter, digest_of
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell


def test_an_index_key_go_reads_case_insensitively_without_an_engine(tmp_path: Path) -> None:
    """Review: Go's encoding/json matches `"Manifests"` to an index's `manifests` field (the last key
    wins), Python's dict does not: the
    registry accepts the index, `check` verifies the entry under `manifests`, skopeo copies the one under
    `Manifests`."""
    server = RegistryServer(tmp_path / "registry")
    server.folder.mkdir()
    server.start()
    try:
        writer, name = RegistryWriter(server.url), "review/case"
        good, evil = _pushed(writer, name, "good"), _pushed(writer, name, "evil")
        signer = key_env(tmp_path / "verifier")
        pub = tmp_path / "verifier.pub"
        pub.write_bytes(keys.signing_key(signer).public.pem)
        cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"))
        document = statement.statement(cell, "sm_100a", subject=f"{server.url}/{name}", digest=good[0],
                                       configuration={}, url=None, signed_at="2026-12-01T10:00:00Z")
        envelope = tmp_path / "verdict.json"
        envelope.write_text(json.dumps(dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO,
                                                 keys.signing_key(signer))))
        cosign.attach(envelope, f"{server.url}/{name}@{good[0]}")
        entry = {"mediaType": MANIFEST, "platform": {"os": "linux", "architecture": "amd64"}}
        shown, hidden = (json.dumps({**entry, "digest": d, "size": s}) for d, s in (good, evil))
        body = f'{{"schemaVersion":2,"mediaType":"{INDEX}","manifests":[{shown}],"Manifests":[{hidden}]}}'
        index = writer.put_manifest(name, "case", body.encode(), INDEX)
        ref = f"{server.url}/{name}@{index}"
        checked = cli("check", ref, "--platform", "linux/amd64", "--key", str(pub), env=key_env(tmp_path / "user"))
        out = tmp_path / "loaded"
        subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", "--override-os", "linux",
                        "--override-arch", "amd64", f"docker://{ref}", f"oci:{out}:x"], check=True, timeout=120)
        manifest = json.loads((out / "blobs" / "sha256" / json.loads((out / "index.json").read_text())["manifests"][0]
                               ["digest"].removeprefix("sha256:")).read_text())
        layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
        with tarfile.open(out / "blobs" / "sha256" / layer) as tar:
            loaded = tar.extractfile("who").read().decode()   # type: ignore[union-attr]
        assert checked.returncode != 0 or loaded == "good", (
            f"check said verified ({checked.stdout.strip()[-160:]}), but skopeo loaded the {loaded!r} image")
    finally:
        server.stop()


def _pushed(writer: RegistryWriter, name: str, text: str) -> tuple[str, int]:
    """A one-file image whose file `who` says `text`, pushed by hand: (manifest digest, manifest size)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("who")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text.encode()))
    layer = buffer.getvalue()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/who"]},
                         "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]}}).encode()
    body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": writer.put_blob(name, config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": writer.put_blob(name, layer), "size": len(layer)}]}).encode()
    return writer.put_manifest(name, text, body, MANIFEST), len(body)
