"""What `check` concludes, without processes: several verdicts of one digest weighed per arch, the source a
container's config records, and an archive's chain from the signed digest to its blobs (a hand-made layout)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from buildscripts.errors import NotVerified
from buildscripts.results import Status
from buildscripts.trust import carried, dsse, keys, sources, statement, verdicts
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

DIGEST = "sha256:" + "d" * 64


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


def envelope(key: keys.SigningKey, arch: str, *, digest: str = DIGEST, fail: bool = False) -> dict[str, Any]:
    family = arch.rstrip("af")
    stages = [s.model_copy(update={"status": Status.FAILED}) if fail and s.name == "server" else s
              for s in gpu_passed("GPU", family)]
    cell = finish(make_cell("verified"), stages=cpu_passed() + stages)
    document = statement.statement(cell, arch, subject="r", digest=digest, configuration={}, url=None)
    return dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key)


def test_one_failed_verdict_of_an_arch_is_never_outvoted(key: keys.SigningKey) -> None:
    found = verdicts.judge([envelope(key, "sm_100a"), envelope(key, "sm_100a", fail=True),
                            envelope(key, "sm_120a")], DIGEST, [key.public])
    by_arch = {f.arch: f for f in found.archs}
    assert sorted(by_arch) == ["sm_100a", "sm_120a"]   # default: every arch the valid verdicts name
    assert not by_arch["sm_100a"].verified and "FAILED" in by_arch["sm_100a"].detail
    assert by_arch["sm_120a"].verified and not found.verified
    assert verdicts.judge([envelope(key, "sm_120a")], DIGEST, [key.public], ["sm_120"]).verified  # family match


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
    status, detail = sources.source_verdict("arch: amd64\n", [], {})
    assert status == "skip" and "records no source image" in detail


# ---------------------------------------------------------------- an archive's chain, by hand


def blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def layout_archive(tmp_path: Path, *, env: list[str], layer: bytes) -> tuple[Path, carried.Tested]:
    """An OCI archive as export writes it, and what the registry served for the tested image."""
    gz = gzip.compress(layer, mtime=0)
    layer_digest, _ = blob(gz)
    rootfs = {"type": "layers", "diff_ids": [blob(layer)[0]]}
    docker_config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": rootfs,
                                "config": {"Env": ["A=1"], "Cmd": ["/hi"], "Hostname": ""},
                                "container_config": {}}).encode()
    tested_manifest = json.dumps({"schemaVersion": 2, "config": {"digest": blob(docker_config)[0]},
                                  "layers": [{"digest": layer_digest}]}).encode()
    oci_config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": rootfs,
                             "config": {"Env": env, "Cmd": ["/hi"]}}).encode()
    own = json.dumps({"schemaVersion": 2, "config": {"digest": blob(oci_config)[0]},
                      "layers": [{"digest": layer_digest, "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"}],
                      "annotations": {"io.sglang-images.cell": "c"}}).encode()
    files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
             "index.json": json.dumps({"manifests": [{"digest": blob(own)[0]}]}).encode()}
    files.update({f"blobs/sha256/{blob(b)[0][7:]}": b for b in (gz, oci_config, own)})
    archive = tmp_path / "c.oci.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive, carried.Tested("r.example/sglang", blob(tested_manifest)[0], tested_manifest, None,
                                   docker_config, ())


def test_an_archive_that_holds_the_tested_image_is_read(tmp_path: Path) -> None:
    archive, tested = layout_archive(tmp_path, env=["A=1"], layer=b"layer")
    carried.write(carried.sidecar(archive), tested)
    assert carried.read(archive).digest == tested.digest


def test_an_archive_whose_config_runs_something_else_is_refused(tmp_path: Path) -> None:
    archive, tested = layout_archive(tmp_path, env=["A=2"], layer=b"layer")
    carried.write(carried.sidecar(archive), tested)
    with pytest.raises(NotVerified, match="config differs from the tested one in Env"):
        carried.read(archive)


def test_a_carried_manifest_that_is_not_the_signed_digest_is_refused(tmp_path: Path) -> None:
    archive, tested = layout_archive(tmp_path, env=["A=1"], layer=b"layer")
    carried.write(carried.sidecar(archive), tested)
    record = json.loads(carried.sidecar(archive).read_text())
    record["digest"] = "sha256:" + "f" * 64   # "these bytes are that digest"
    carried.sidecar(archive).write_text(json.dumps(record))
    with pytest.raises(NotVerified, match="the carried manifest is not sha256:fff"):
        carried.read(archive)
