"""Good tags and promotion against the real engine and a real registry on loopback.

Images are tiny (`docker import` of a one-file tar, unique content per test) and every image
and tag made here is removed afterwards.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from buildscripts import results
from buildscripts.errors import RegistryError
from buildscripts.matrix.schema import Tags
from buildscripts.publish import promote, registry, tags
from buildscripts.results import CellResult, RunResults
from tests.integration.tinyimages import owner_change
from tests.registry_server import RegistryServer
from tests.results_factory import make_cell

pytestmark = pytest.mark.registry


@pytest.fixture
def cfg() -> Tags:
    return Tags(repository=f"sglang-images-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def make_image(client: docker.DockerClient, cfg: Tags) -> Iterator[Callable[[str], str]]:
    """Build tiny images; afterwards remove them, their labelled children and every tag on them."""
    made: list[str] = []

    def build(content: str) -> str:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            payload = content.encode()
            info = tarfile.TarInfo("hello.txt")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        client.api.import_image_from_data(data.getvalue(), repository=cfg.repository, tag=f"base-{len(made)}",
                                          changes=[owner_change()])
        image_id = str(client.images.get(f"{cfg.repository}:base-{len(made)}").id)
        made.append(image_id)
        return image_id

    yield build
    _remove_descendants(client, made, cfg.repository)


def _remove_descendants(client: docker.DockerClient, roots: list[str], repository: str) -> None:
    """Remove `roots`, every image built on them and every tag in `repository`, children first."""
    for image in client.images.list(all=True):
        for ref in image.tags:
            if repository in ref:
                registry.untag(client, ref)
    for _ in range(5):
        parents = {str(i.id): str(i.attrs.get("Parent") or "") for i in client.images.list(all=True)}
        mine = [i for i in parents if _descends(i, roots, parents)]
        if not mine:
            return
        for image_id in [i for i in mine if i not in parents.values()]:  # leaves first
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(image_id, force=True)
    pytest.fail("test images left behind")


def _descends(image_id: str, roots: list[str], parents: dict[str, str]) -> bool:
    while image_id:
        if image_id in roots:
            return True
        image_id = parents.get(image_id, "")
    return False


def verified(client: docker.DockerClient, image_id: str, cfg: Tags) -> CellResult:
    """A verified cell for `image_id`, tagged like the pipeline does (candidate, then good tags)."""
    cell = make_cell("verified", image_id=image_id)
    ref = f"{cfg.repository}:{cell.cell_id}-{image_id[7:19]}"
    cell = cell.model_copy(update={"image": cell.image.model_copy(update={"ref": ref})})
    repository, tag = ref.rsplit(":", 1)
    client.api.tag(image_id, repository, tag)
    return cell.model_copy(update={"tags": tags.apply_good_tags(client, cell, cfg)})


def save_run(cell: CellResult, path: Path) -> Path:
    results.save(RunResults(run_id="t", started=results.now(), host={}, cells=[cell]), path)
    return path


def test_good_tags_point_at_a_labelled_child_with_the_tested_layers(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str],
) -> None:
    image_id = make_image(f"good {uuid.uuid4()}")
    cell = verified(client, image_id, cfg)
    assert cell.tags == [f"{cfg.repository}:0.5.16-torch2.11.0-cu130-pip",
                         f"{cfg.repository}:0.5.16-torch2.11.0-cu130-pip-verified-sm90"]
    tested = client.images.get(image_id)
    for ref in cell.tags:
        child = client.images.get(ref)
        assert child.id != image_id
        assert child.attrs["RootFS"] == tested.attrs["RootFS"]
        assert child.labels[tags.TESTED_IMAGE_LABEL] == image_id
        assert child.labels["io.sglang-images.cell"] == cell.cell_id
        assert child.labels["io.sglang-images.verified.gpus"] == "NVIDIA H200"
        assert child.labels["io.sglang-images.verified.archs"] == "sm90"
        assert child.labels["io.sglang-images.results.digest"] == tags.results_digest(cell)


def test_a_failed_rebuild_never_gets_or_moves_the_good_tag(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str],
) -> None:
    good = verified(client, make_image(f"v1 {uuid.uuid4()}"), cfg)
    before = {ref: client.images.get(ref).id for ref in good.tags}
    rebuilt = make_image(f"v2 {uuid.uuid4()}")
    for kind in ("failed", "cpu-checked"):
        cell = make_cell(kind, image_id=rebuilt).model_copy(update={"axes": good.axes})  # same good tag names
        assert tags.apply_good_tags(client, cell, cfg) == []
    assert {ref: client.images.get(ref).id for ref in good.tags} == before
    with pytest.raises(RegistryError, match="verified image is"):
        tags.apply_good_tags(client, good, cfg, image_id=rebuilt)  # not the image that was tested
    assert {ref: client.images.get(ref).id for ref in good.tags} == before


def test_promote_pushes_by_digest_and_pulls_back_the_same_images(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    cell = verified(client, make_image(f"promote {uuid.uuid4()}"), cfg)
    children = {ref.rsplit(":", 1)[1]: str(client.images.get(ref).id) for ref in cell.tags}
    path = save_run(cell, tmp_path / "runs" / "t" / "results.json")
    assert promote.promote_file(client, path, server.url, cfg) == 1
    saved = results.load(path).cells[0]
    base = f"{server.url}/{cfg.repository}"
    candidate = cell.image.ref.rsplit(":", 1)[1]  # type: ignore[union-attr]
    assert set(saved.promoted) == {f"{base}:{candidate}", *(f"{base}:{t}" for t in children)}
    assert saved.image.digest == saved.promoted[f"{base}:{candidate}"]

    # Delete every local copy, pull back from the registry, compare ids and digests.
    for image_id in (*set(children.values()), str(cell.image.id)):  # children first
        client.images.remove(image_id, force=True)
    assert registry.pull(client, f"{base}:{candidate}") == cell.image.id
    for tag, child_id in children.items():
        assert registry.pull(client, f"{base}:{tag}") == child_id
        digests = client.images.get(child_id).attrs["RepoDigests"]
        assert f"{base}@{saved.promoted[f'{base}:{tag}']}" in digests
        assert registry.remote_digest(client, f"{base}:{tag}") == saved.promoted[f"{base}:{tag}"]


def _promote_twice(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path, before_second: Callable[[], None], hook: Callable[[str], None] | None = None,
) -> tuple[dict[str, str], Path, str]:
    """Promote v1; then try v2 of the same cell after `before_second`; return v1's promoted refs."""
    v1 = verified(client, make_image(f"v1 {uuid.uuid4()}"), cfg)
    first = save_run(v1, tmp_path / "v1.json")
    promote.promote_file(client, first, server.url, cfg)
    old = results.load(first).cells[0].promoted
    for ref in v1.tags:
        registry.untag(client, ref)
    v2 = verified(client, make_image(f"v2 {uuid.uuid4()}"), cfg)
    second = save_run(v2, tmp_path / "v2.json")
    before_second()
    with pytest.raises(RegistryError) as err:
        if hook is None:
            promote.promote_file(client, second, server.url, cfg)
        else:
            promote.promote_cell(client, results.load(second).cells[0], server.url, cfg, before_push=hook)
    return old, second, str(err.value)


def _good_refs(promoted: dict[str, str]) -> dict[str, str]:
    return {ref: digest for ref, digest in promoted.items() if ref.endswith(("-pip", "-sm90"))}


def test_a_refusing_registry_marks_nothing_promoted_and_keeps_the_old_good_tag(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    def read_only() -> None:
        server.stop()
        server.start(readonly=True)

    old, second, message = _promote_twice(client, cfg, make_image, server, tmp_path, read_only)
    assert "push of" in message and "hint:" in message
    assert results.load(second).cells[0].promoted == {}
    for ref, digest in _good_refs(old).items():
        assert registry.remote_digest(client, ref) == digest


def test_an_interrupted_promote_leaves_the_old_good_tag_intact(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    pushed: list[str] = []

    def kill_before_first_good_tag(ref: str) -> None:
        if pushed:  # the candidate went through; the registry dies before any good tag
            server.stop()
        pushed.append(ref)

    old, second, message = _promote_twice(client, cfg, make_image, server, tmp_path, lambda: None,
                                          kill_before_first_good_tag)
    assert "unreachable" in message
    assert len(pushed) == 2
    assert results.load(second).cells[0].promoted == {}
    server.start()
    for ref, digest in _good_refs(old).items():
        assert registry.remote_digest(client, ref) == digest


def test_an_unreachable_registry_is_a_clear_error(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], tmp_path: Path,
) -> None:
    from tests.registry_server import free_port

    cell = verified(client, make_image(f"nowhere {uuid.uuid4()}"), cfg)
    path = save_run(cell, tmp_path / "results.json")
    with pytest.raises(RegistryError) as err:
        promote.promote_file(client, path, f"127.0.0.1:{free_port()}", cfg)
    assert "unreachable" in str(err.value)
    assert results.load(path).cells[0].promoted == {}


def test_a_cell_without_good_tags_is_never_pushed(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    cell = make_cell("cpu-checked", image_id=make_image(f"cpu {uuid.uuid4()}"))
    path = save_run(cell, tmp_path / "results.json")
    assert promote.promote_file(client, path, server.url, cfg) == 0
    with pytest.raises(RegistryError, match="no good tag"):
        promote.promote_cell(client, cell, server.url, cfg)
    assert not any(server.url in t for i in client.images.list() for t in i.tags)
