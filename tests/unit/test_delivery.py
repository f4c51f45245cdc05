"""Delivery logic without processes: the Proxmox command lines, the LXC command lines, and the archive's
manifest annotations, gzip check and reproducible packing on a hand-made OCI layout."""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from buildscripts.errors import ConfigError
from buildscripts.lxc import pct
from buildscripts.lxc.target import ATTACH_PATH, LOGIN_ENV, Target
from buildscripts.publish import oci_export
from buildscripts.verify.lxcrunner import probe_script
from buildscripts.verify.plan import Plan
from tests.results_factory import make_cell, passed_gate


def test_pct_lines_create_then_set_the_gpu() -> None:
    plan = pct.Plan(archive="cell.oci.tar", ctid="210", storage="nas", cuda="13.0")
    assert pct.create(plan) == ["pct", "create", "210", "nas:vztmpl/cell.oci.tar", "--hostname", "sglang-210",
                                "--unprivileged", "1", "--rootfs", "local-lvm:64", "--net0",
                                "name=eth0,bridge=vmbr0,ip=dhcp", "--description",
                                "sglang-images-source: oci-archive:/var/lib/vz/template/cache/cell.oci.tar"]
    assert pct.set_resources(plan)[-8:] == ["--dev0", "/dev/nvidia0", "--dev1", "/dev/nvidiactl", "--dev2",
                                            "/dev/nvidia-uvm", "--dev3", "/dev/nvidia-uvm-tools"]
    lines = [" ".join(c) for c in pct.commands(plan)]
    assert lines.index("pct start 210") < lines.index("nox -s preflight -- --ctid 210 --cuda 13.0")
    assert pct.server_args(plan)[-1] == ("printf '%s\\n' '--model-path /models/MODEL --host 0.0.0.0 --port 30000' > "
                                         "/etc/sglang-images/server.args")
    forced = pct.install_note(plan, image="sha256:x", annotations={}, forced="no GPU run")
    assert "Not verified on a GPU" in forced and "pct create 210 nas:vztmpl/cell.oci.tar" in forced
    assert "carries no signed verdict" in forced and "nox -s check" not in " ".join(lines)


def test_the_note_of_an_archive_with_verdicts_checks_them_first() -> None:
    plan = pct.Plan(archive="cell.oci.tar", verdicts=True)
    lines = [" ".join(c) for c in pct.commands(plan)]
    assert lines[:3] == ["sha256sum -c cell.oci.tar.sha256", "nox -s check -- oci-archive:cell.oci.tar",
                         "cp cell.oci.tar cell.oci.tar.verdicts.json /var/lib/vz/template/cache/"]
    note = pct.install_note(plan, image="sha256:x", annotations={}, forced=None)
    assert "nox -s check -- oci-archive:cell.oci.tar" in note and "keep the two files together" in note
    # a tensor-parallel server needs /dev/shm, which in LXC only the container's config can size
    assert "--tp-size N" in note and "lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g" in note


def test_lxc_targets_and_their_command_lines() -> None:
    # pct exec keeps the caller's environment (PVE 8's default): env -i leaves what lxc-attach --clear-env leaves.
    assert Target.pct("200").exec_argv(["true"]) == ["pct", "exec", "200", "--", "env", "-i", f"PATH={ATTACH_PATH}",
                                                     "container=lxc", "true"]
    named = Target.named("ct-1")
    assert named.exec_argv(["true"]) == ["lxc-attach", "-n", "ct-1", "--clear-env", "--", "true"]
    assert named.login_argv("echo hi")[-5:] == ["/bin/sh", "-c", LOGIN_ENV, "sh", "echo hi"]
    assert 'exec /bin/sh -l -c "$1"' in LOGIN_ENV   # the login's HOME etc. first, then the login shell
    assert named.state_argv() == ["lxc-info", "-n", "ct-1", "-s"]
    assert Target.pct("200").config_path() == Path("/etc/pve/lxc/200.conf")
    with pytest.raises(ConfigError, match="not a Proxmox container id"):
        Target.pct("ct-1")
    with pytest.raises(ConfigError, match="not an LXC container name"):
        Target.named("../etc")
    script = probe_script(Plan.make(archs=["sm_90a"], lane_cuda="13.0", stages=["facts"]), "/opt/venv/bin/python")
    assert script.startswith('d=$(mktemp -d /tmp/sglang-images-probe.XXXXXX) || exit 125; tar -x -C "$d" && ')
    assert "/opt/venv/bin/python -m probe --archs sm_90a --stages facts" in script and "--mode lxc" in script
    assert script.endswith('rm -rf "$d"; exit $rc')  # nothing of the probe stays in the container


def layout(tmp_path: Path, gzip_layer: bool = True) -> Path:
    root = tmp_path / "layout"
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return digest

    layer = gzip.compress(b"layer", mtime=0) if gzip_layer else b"plain tar"
    manifest = {"schemaVersion": 2, "config": {"digest": "sha256:" + blob(b"{}"), "size": 2},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                            "digest": "sha256:" + blob(layer), "size": len(layer)}]}
    data = json.dumps(manifest).encode()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"digest": "sha256:" + blob(data), "size": len(data), "annotations": {
            "org.opencontainers.image.ref.name": "latest"}}]}))
    return root


def test_annotations_go_on_the_manifest_and_the_index_follows(tmp_path: Path) -> None:
    root = layout(tmp_path)
    digest = oci_export.annotate(root, {"io.sglang-images.cell": "c"})
    index = json.loads((root / "index.json").read_text())
    assert index["manifests"][0]["digest"] == digest
    manifest = json.loads((root / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())
    assert manifest["annotations"] == {"io.sglang-images.cell": "c"}
    assert len(list((root / "blobs" / "sha256").iterdir())) == 3  # the old manifest blob is gone
    assert oci_export.layer_problems(root) == []
    assert oci_export.layer_problems(layout(tmp_path / "b", gzip_layer=False))  # mediaType says gzip, bytes do not


def test_packing_is_reproducible_and_consumes_the_layout(tmp_path: Path) -> None:
    archives = []
    for name in ("a", "b"):
        root = layout(tmp_path / name)
        oci_export.pack(root, tmp_path / f"{name}.tar")
        assert not list((root / "blobs" / "sha256").iterdir())
        archives.append(oci_export.sha256_of(tmp_path / f"{name}.tar"))
    assert archives[0] == archives[1]
    with tarfile.open(tmp_path / "a.tar") as tar:
        assert tar.getnames()[:3] == ["oci-layout", "index.json", "blobs"]
        assert {m.mtime for m in tar.getmembers()} == {0}


def test_labels_claiming_a_verdict_are_dropped_and_the_vouching_record_speaks_instead() -> None:
    claims = {"io.sglang-images.verdict": "verified", "io.sglang-images.tested-image": "sha256:1",
              "io.sglang-images.verified.archs": "sm90 sm100", "io.sglang-images.cell": "c"}
    assert oci_export.record_labels(claims, None) == {"io.sglang-images.cell": "c"}
    record = passed_gate(make_cell("verified"))
    assert oci_export.vouching(record.image_id, [record]) is record
    assert oci_export.vouching("sha256:" + "0" * 64, [record]) is None
    assert oci_export.record_labels(claims, record) == {
        "io.sglang-images.cell": record.cell_id, "io.sglang-images.verdict": "verified",
        "io.sglang-images.verified.archs": "sm90", "io.sglang-images.verified.gpus": "NVIDIA H200",
        "io.sglang-images.tested-image": record.image_id}


def test_annotations_say_when_forced() -> None:
    labels = {"io.sglang-images.cell": "c", "io.sglang-images.lock.lane": "ab", "org.opencontainers.image.title": "t",
              "io.sglang-images.base.id": "x"}
    notes = oci_export.manifest_annotations(labels, forced="not verified")
    assert notes == {"io.sglang-images.cell": "c", "io.sglang-images.export.forced": "true: not verified",
                     "io.sglang-images.lock.lane": "ab", "org.opencontainers.image.title": "t"}
