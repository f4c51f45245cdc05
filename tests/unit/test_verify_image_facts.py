"""`verify IMAGE` reads the image's facts from the engine once (they decide the log folder, the plan and the
record, and used to be read three times), and the build's verification takes the facts the build read. An
engine of fakes stands in for Docker; the container run is replaced by its outcome."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from buildscripts import engine, matrix, results
from buildscripts.commands import verify as verify_command
from buildscripts.errors import RunFailed
from buildscripts.results import ImageInfo, StageResult, Status
from buildscripts.verify import gpus, one_image
from buildscripts.verify.container import ContainerRunner
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.verification import request

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ID = "sha256:" + "ab" * 32
CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


class FakeImage:
    def __init__(self) -> None:
        self.id = IMAGE_ID
        self.labels = {"io.sglang-images.cell": CELL}
        self.attrs: dict[str, Any] = {"Size": 1234, "Config": {"Labels": self.labels}}

    def history(self) -> list[dict[str, Any]]:
        return []


class FakeEngine:
    """What verify asks of the engine: images by reference (counted), its info, its address, its networks."""

    def __init__(self, *, has_image: bool = True) -> None:
        self.asked: list[str] = []
        self.has_image = has_image
        self.images = self
        self.networks = self
        self.api = SimpleNamespace(base_url="tcp://engine.invalid:2375")   # elsewhere: the network is kept

    def get(self, ref: str) -> FakeImage:
        self.asked.append(ref)
        if not self.has_image:
            raise docker.errors.ImageNotFound(ref)
        return FakeImage()

    def info(self) -> dict[str, Any]:
        return {}

    def list(self, names: list[str]) -> list[Any]:
        return []


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The container runs are replaced by a passed facts stage; returns the images they were asked to run."""
    images: list[str] = []

    def in_container(runner: ContainerRunner, options: Options) -> list[StageResult]:
        images.append(runner.image)
        return [StageResult(name="facts", status=Status.PASSED)]
    monkeypatch.setattr(one_image, "verify", in_container)
    monkeypatch.setattr(gpus, "discover", lambda info: gpus.Discovery(problem="no GPU in this test"))
    return images


def verify(fake: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> results.CellResult:
    monkeypatch.setattr(engine, "connect", lambda: fake)
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    out = tmp_path / "results.json"
    call(verify_command, ["some-image", "--out", str(out), "--stages", "facts"], Workspace.at(tmp_path), {})
    (cell,) = results.load(out).cells
    return cell


def test_verify_image_asks_the_engine_for_the_image_once(ran: list[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine()
    cell = verify(fake, tmp_path, monkeypatch)
    assert fake.asked == ["some-image"]
    assert ran == ["some-image"]
    assert cell.cell_id == CELL and cell.image.id == IMAGE_ID           # the facts reached the record
    assert cell.stages[0].evidence["image"]["id"] == IMAGE_ID            # and the facts stage
    (declared,) = [c for c in matrix.load(ROOT / "matrix.yaml").cells if c.id == CELL]
    assert cell.targets == list(declared.archs)                          # planned for the cell its label names


def test_an_image_the_engine_lacks_is_asked_for_once_and_fails_as_missing(ran: list[str], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine(has_image=False)
    with pytest.raises(RunFailed) as exc:   # the failed cell is saved, then the command fails
        verify(fake, tmp_path, monkeypatch)
    assert fake.asked == ["some-image"] and ran == []
    assert "image some-image not found" in exc.value.message


def test_facts_given_are_not_read_again(ran: list[str], tmp_path: Path) -> None:
    fake = FakeEngine()
    facts = ImageInfo(ref=IMAGE_ID, id=IMAGE_ID, size_bytes=99)
    asked = request(Plan.make(archs=["sm_90a"], lane_cuda="13.0"), tmp_path, facts=facts)
    stages = one_image.verify_image(fake, IMAGE_ID, asked)  # type: ignore[arg-type]
    assert fake.asked == [] and ran == [IMAGE_ID]
    assert stages[0].evidence["image"] == facts.model_dump(exclude_none=True)
