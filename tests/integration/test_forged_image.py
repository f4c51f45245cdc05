"""An image whose python3 is a shell script printing every stage as passed on a B200, through `verify IMAGE`:
the host decides the GPU facts, so no GPU stage passes, and the cell is no verified one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts.commands import verify as verify_command
from buildscripts.errors import RunFailed
from buildscripts.verify import container
from buildscripts.workspace import Workspace
from tests import forged
from tests.commands import call
from tests.integration import tinyimages


@pytest.fixture(scope="module")
def forged_images(client: docker.DockerClient) -> Iterator[dict[str, str]]:
    base = tinyimages.python_image(client)
    made = {"quiet": tinyimages.derive(client, base, {"/usr/local/bin/python3": forged.SCRIPT}),
            "serving": tinyimages.derive(client, base, {"/usr/local/bin/python3": forged.SCRIPT},
                                         ["ENV SGLANG_TEST_SERVE=1"])}
    yield made
    for tag in made.values():
        client.images.remove(tag, force=True)


@pytest.mark.parametrize("variant", ["quiet", "serving"])
def test_a_forged_python_gets_no_gpu_stage_through_verify_image(client: docker.DockerClient, tmp_path: Path,
                                                                forged_images: dict[str, str], variant: str) -> None:
    run_id = f"forged-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "results.json"
    with pytest.raises(RunFailed):
        call(verify_command, [forged_images[variant], "--run-id", run_id, "--out", str(out), "--stage-timeout", "60"],
                     ws=Workspace.at(runs=tmp_path / "runs"))
    assert container.leftovers(client, run_id) == []
    cell = json.loads(out.read_text())["cells"][0]
    stages = {s["name"]: s for s in cell["stages"]}
    assert set(forged.GPU_STAGES) <= set(stages)
    assert [n for n in forged.GPU_STAGES if stages[n]["status"] == "passed"] == []
    assert stages["gpu-visible"]["failure_class"] == "gpu-claim-unbacked"
    assert "the host handed it no GPU" in stages["gpu-visible"]["reason"]
    assert all(stages[n]["gpu"] is None and stages[n]["arch"] is None for n in forged.GPU_STAGES)
    # The host makes these two from its own look at the server, which it gives no GPU-less container.
    assert stages["server"]["failure_class"] == ("gpu-claim-unbacked" if variant == "serving" else "server-unobserved")
    assert stages["first-generation"]["failure_class"] == "server-unobserved"
    assert cell["verdict"] == "failed" and not cell["verified_archs"]
    assert "sm_100" not in json.dumps(cell["verdict_reason"])
