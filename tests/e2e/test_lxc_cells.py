"""The real SGLang 0.5.16 `none` cell (the seed incident) delivered into a real LXC container: exported by
`nox -s export` from the engine (forced: no GPU here, so nothing is verified and the archive says so), created
by LXC's own `oci` template, started with the image's init, and verified in place by `verify --lxc-name` with
the container's Python: it fails at import with cuda-home-missing inside LXC too.

The `pip` cell goes into LXC from the registry its build staged it in (tests/e2e/test_build_once.py): the
digest the GPU jobs verify is the one whose every CPU stage passes in place.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts import results
from buildscripts.results import RunResults
from tests import needs
from tests.cli import cli
from tests.disk_room import disk_room
from tests.lxc_container import LXC_WRITES, container, verified_in

NONE = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
CPU_STAGES = ",".join(results.CPU_STAGES)


def exported(run: RunResults, cell_id: str, out: Path) -> Path:
    image = run.cell(cell_id)
    assert image is not None and image.image.id
    started = time.monotonic()
    done = cli("export", image.image.id, "--out", str(out), "--force", timeout=3600)
    assert done.returncode == 0, done.stderr
    archive = out / f"{cell_id}.oci.tar"
    print(f"export {cell_id}: {time.monotonic() - started:.0f}s, {archive.stat().st_size / 1e9:.2f} GB archive "
          f"from a {(image.image.size_bytes or 0) / 1e9:.2f} GB image")
    return archive


def test_the_seed_incident_inside_lxc(run: RunResults, tmp_path: Path) -> None:
    archive = exported(run, NONE, tmp_path)
    try:
        with container(archive) as name:
            archive.unlink()   # the rootfs is unpacked: free the disk before verifying
            cell = verified_in(name, CPU_STAGES, tmp_path / "none.json")
    finally:
        archive.unlink(missing_ok=True)
    stages = {s["name"]: s for s in cell["stages"]}  # type: ignore[attr-defined]
    assert stages["import"]["status"] == "failed" and stages["import"]["failure_class"] == "cuda-home-missing"
    assert stages["import"]["where"] == "lxc (cpu)"
    assert cell["verdict"] == "expected-failure", cell["verdict_reason"]


NEEDS_BYTES = 16 * 10**9   # archive + LXC's copy of its blobs + the unpacked rootfs of the 7.2 GB cell (13.8 GB)


@pytest.fixture(autouse=True)
def _tools_and_room(tmp_path: Path) -> Iterator[None]:
    needs.tools("skopeo", "umoci", "jq", "lxc-create")
    # The archive goes to tmp_path, LXC's copies where LXC_WRITES says.
    with disk_room(NEEDS_BYTES, "an LXC container of a real cell", [tmp_path, *LXC_WRITES]):
        yield
