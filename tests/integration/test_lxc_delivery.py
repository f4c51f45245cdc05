"""Delivery into LXC with real parts: `export` writes an OCI archive from the local engine, LXC's own `oci`
template creates a real container from it, and `verify --lxc-name` runs the probe in place, with the
container's Python and the environment a login shell has there. A tiny image stands in for SGLang here
(real cells go into LXC through the same template from their staging registry in
tests/e2e/test_build_once.py)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts import matrix, results
from buildscripts.commands import export as export_command
from buildscripts.errors import DiskSpaceError
from buildscripts.publish import oci_export
from buildscripts.results import RunResults
from tests import needs
from tests.cli import cli
from tests.commands import call
from tests.integration import tinyimages
from tests.lxc_container import attach, container, start_container
from tests.results_factory import make_cell, sealed

ROOT = Path(__file__).resolve().parents[2]
FAKE_CUDA = "/opt/fake-cuda"
CELL = "tiny-lxc-cell"
LABELS = {"io.sglang-images.cell": CELL, "io.sglang-images.cuda": "cu130", "io.sglang-images.archs": "sm_90a"}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A tiny image shaped like a cell (init, cell.json, profile.d, ENV) whose labels claim a verdict, and one
    made from it that a sealed results record (`results`) says was verified on a GPU."""
    needs.tools("skopeo", "umoci", "jq", "lxc-create")
    client = docker.from_env()
    files = {
        "/usr/local/sbin/sglang-images-init": (ROOT / "images" / "lxc" / "init.sh").read_bytes(),
        "/etc/sglang-images/cell.json": json.dumps(LABELS).encode(),
        "/etc/environment": f"CUDA_HOME={FAKE_CUDA}\n".encode(),
        "/etc/profile.d/sglang-images.sh": f'export CUDA_HOME="{FAKE_CUDA}"\n'.encode(),
    }
    labels = [f'LABEL "{k}"="{v}"' for k, v in LABELS.items()]
    claims = ['LABEL "io.sglang-images.verdict"="verified"', 'LABEL "io.sglang-images.verified.archs"="sm90"',
              f'LABEL "io.sglang-images.tested-image"="sha256:{"ab" * 32}"']   # what a label can say: anything
    plain = tinyimages.derive(client, tinyimages.python_image(client), files,
                              [f"ENV CUDA_HOME={FAKE_CUDA}", 'CMD ["/usr/local/sbin/sglang-images-init"]', *labels,
                               *claims])
    good = tinyimages.derive(client, plain, {"/etc/verified-here": b"1\n"})
    digest = results.matrix_digest(matrix.load(ROOT / "matrix.yaml").spec)
    record = sealed(make_cell("verified", image_id=str(client.images.get(good).id)), matrix_digest=digest)
    path = tmp_path_factory.mktemp("vouching") / "results.json"
    results.save(RunResults(run_id="v", started=results.now(), cells=[record], matrix_digest=digest), path)
    yield {"plain": plain, "good": good, "results": str(path), "record cell": record.cell_id}
    for ref in (good, plain):
        client.images.remove(ref, force=True)


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def test_an_image_whose_labels_claim_a_verdict_but_no_sealed_record_does_is_refused(
        images: dict[str, str], tmp_path: Path) -> None:
    done = cli("export", images["plain"], "--out", str(tmp_path / "out"), "--results", images["results"])
    assert done.returncode == 2, done.stderr
    assert "no sealed results record" in done.stderr and "--force" in done.stderr
    assert "Traceback" not in done.stderr
    assert leftovers(tmp_path / "out") == []


def test_the_archive_is_an_oci_layout_with_gzip_layers_and_the_cells_annotations(
        images: dict[str, str], tmp_path: Path) -> None:
    done = cli("export", images["good"], "--out", str(tmp_path), "--results", images["results"])
    assert done.returncode == 0, done.stderr
    archive = tmp_path / f"{CELL}.oci.tar"
    assert leftovers(tmp_path) == sorted([archive.name, f"{archive.name}.sha256", f"{CELL}.proxmox.md"])
    assert (tmp_path / f"{archive.name}.sha256").read_text().split()[0] == oci_export.sha256_of(archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[:3] == ["oci-layout", "index.json", "blobs"] and all(n.startswith("blobs/") for n in names[3:])
    raw = json.loads(subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{archive}:latest"],
                                    capture_output=True, text=True, check=True).stdout)
    assert all(layer["mediaType"].endswith("tar+gzip") for layer in raw["layers"])
    notes = raw["annotations"]
    assert notes["io.sglang-images.cell"] == images["record cell"]   # the record's word, not the label's
    assert notes["io.sglang-images.verdict"] == "verified" and notes["io.sglang-images.verified.archs"] == "sm90"
    assert notes["io.sglang-images.tested-image"] == str(docker.from_env().images.get(images["good"]).id)
    assert oci_export.FORCED not in notes
    note = (tmp_path / f"{CELL}.proxmox.md").read_text()
    assert f"pct create 200 local:vztmpl/{archive.name}" in note and "--dev0 /dev/nvidia0" in note
    again = cli("export", images["good"], "--out", str(tmp_path / "again"), "--results", images["results"])
    assert again.returncode == 0
    assert oci_export.sha256_of(tmp_path / "again" / archive.name) == oci_export.sha256_of(archive)  # reproducible


def test_bad_targets_leave_nothing_behind(images: dict[str, str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    done = cli("export", images["good"], "--out", "/proc/sglang-images-export", "--results", images["results"])
    assert done.returncode == 2 and "cannot write the archive to /proc/sglang-images-export" in done.stderr

    class Usage:
        free = 10_000

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage)
    with pytest.raises(DiskSpaceError, match=r"only 10 kB free in .*needs about 0\.\d+ GB"):
        call(export_command, [images["good"], "--out", str(tmp_path), "--results", images["results"]],
             env=dict(os.environ))
    assert leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def forced_archive(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export")
    done = cli("export", images["plain"], "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert "exported although" in done.stderr
    return out / f"{CELL}.oci.tar"


def test_a_forced_export_says_so_in_its_annotations(forced_archive: Path) -> None:
    raw = json.loads(subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{forced_archive}:latest"],
                                    capture_output=True, text=True, check=True).stdout)
    assert raw["annotations"][oci_export.FORCED].startswith("true: no sealed results record")
    assert "io.sglang-images.verdict" not in raw["annotations"]   # the image's own claim is left out
    assert "Not verified on a GPU" in (forced_archive.parent / f"{CELL}.proxmox.md").read_text()


def test_verify_in_place_in_a_real_lxc_container(forced_archive: Path, tmp_path: Path) -> None:
    with container(forced_archive) as name:
        out = tmp_path / "lxc.json"
        done = cli("verify", "--lxc-name", name, "--stages", "facts,import", "--out", str(out))
        assert done.returncode == 10, done.stderr   # import fails: no torch in the tiny image
        cell = json.loads(out.read_text())["cells"][0]
        assert cell["cell_id"] == f"{CELL}@lxc-{name}"  # the cell from /etc/sglang-images/cell.json, in place
        facts, imports = cell["stages"]
        assert facts["status"] == "passed" and facts["where"] == "lxc (cpu)"
        assert facts["evidence"]["env"]["CUDA_HOME"] == FAKE_CUDA  # the container's login environment
        assert imports["failure_class"] == "required-module-missing"
        # The init is the image's: it stays up and is the container's PID 1; the probe left nothing behind.
        assert "sglang-images-init" in attach(name, "cat", "/proc/1/cmdline")
        assert attach(name, "/bin/sh", "-c", "ls -d /tmp/sglang-images-probe.* /opt/probe 2>/dev/null; true") == ""
        # The preflight reads the real container: its config, its /dev/shm, its (absent) driver libraries.
        checked = cli("preflight", "--lxc-name", name, "--cuda", "13.0")
        assert checked.returncode == 14 and "Traceback" not in checked.stderr
        rows = {line.split("│")[1].strip(): line for line in checked.stdout.splitlines() if line.count("│") == 4}
        assert "fail" in rows["driver in the container"] and "MiB" in rows["/dev/shm"], checked.stdout
        assert "NVIDIA-Linux-x86_64-VERSION.run --no-kernel-module" in checked.stdout


def test_a_missing_or_stopped_container_and_a_missing_python(forced_archive: Path, tmp_path: Path) -> None:
    missing = cli("verify", "--lxc-name", "sgi-test-no-such-container", "--out", str(tmp_path / "a.json"))
    assert missing.returncode == 10 and "Traceback" not in missing.stderr
    first = json.loads((tmp_path / "a.json").read_text())["cells"][0]["stages"][0]
    assert first["failure_class"] == "lxc-not-running" and "pct start" in first["hint"]
    with container(forced_archive, start=False) as name:   # one container, stopped and then started
        stopped = cli("verify", "--lxc-name", name, "--out", str(tmp_path / "b.json"))
        assert stopped.returncode == 10
        assert "STOPPED" in json.loads((tmp_path / "b.json").read_text())["cells"][0]["stages"][0]["reason"]
        start_container(name)
        nopython = cli("verify", "--lxc-name", name, "--python", "/opt/no/python3", "--stages", "facts",
                       "--out", str(tmp_path / "c.json"))
        assert nopython.returncode == 10
        stage = json.loads((tmp_path / "c.json").read_text())["cells"][0]["stages"][0]
        assert stage["failure_class"] == "no-python-in-container", stage
