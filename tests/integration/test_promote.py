"""Good tags, the gate before them and promotion against the real engine and a real registry on loopback.

Images are tiny (`docker import` of a one-file tar, unique content per test) and every image
and tag made here is removed afterwards.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import docker
import pytest

from buildscripts import matrix, results
from buildscripts.commands import promote as promote_command
from buildscripts.commands import tag as tag_command
from buildscripts.errors import RegistryError, ResultsError
from buildscripts.matrix.schema import Tags
from buildscripts.publish import promotion, tags, trusted
from buildscripts.registry import manifests, through_engine
from buildscripts.results import CellResult, RunResults
from buildscripts.trust import keys
from buildscripts.trust.keys import SigningKey
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.integration.tinyimages import owner_change
from tests.registry_server import RegistryServer
from tests.results_factory import finish, make_cell, of_cell, sealed

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = matrix.load(ROOT / "matrix.yaml")
KEYS = [keys.signing_key(os.environ).public]   # this test session's throw-away verifier key
ENV = dict(os.environ)

pytestmark = pytest.mark.registry


@pytest.fixture
def cfg() -> Tags:
    return Tags(repository=f"sglang-images-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def make_image(client: docker.DockerClient, cfg: Tags) -> Iterator[Callable[[str], str]]:
    """Build tiny images; afterwards remove them, anything built on them and every tag on them."""
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
                through_engine.untag(client, ref)
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


def project(tmp_path: Path, cfg: Tags) -> matrix.Matrix:
    """The project's matrix.yaml with this test's repository, in `tmp_path` (what `tag --matrix` reads)."""
    text = (ROOT / "matrix.yaml").read_text().replace("  repository: sglang-images\n",
                                                      f"  repository: {cfg.repository}\n", 1)
    (tmp_path / "matrix.yaml").write_text(text)
    return matrix.load(tmp_path / "matrix.yaml")


def gate(cell: CellResult, loaded: matrix.Matrix = DEFAULT) -> trusted.Trusted:
    found = trusted.check(cell, 0, loaded, KEYS)
    assert isinstance(found, trusted.Trusted), found
    return found


def with_candidate(client: docker.DockerClient, cell: CellResult, cfg: Tags) -> CellResult:
    """`cell` with its image under a candidate tag, as the pipeline names it."""
    image_id = str(cell.image.id)
    ref = f"{cfg.repository}:{cell.cell_id}-{image_id[7:19]}"
    repository, tag = ref.rsplit(":", 1)
    client.api.tag(image_id, repository, tag)
    return cell.model_copy(update={"image": cell.image.model_copy(update={"ref": ref})})


def verified(client: docker.DockerClient, image_id: str, cfg: Tags, loaded: matrix.Matrix = DEFAULT) -> CellResult:
    """A verified cell for `image_id`, sealed for `loaded` and tagged like the pipeline does (candidate, then good
    tags)."""
    cell = sealed(with_candidate(client, make_cell("verified", image_id=image_id), cfg),
                  matrix_digest=results.matrix_digest(loaded.spec))
    return cell.model_copy(update={"tags": tags.apply_good_tags(client, gate(cell, loaded), cfg)})


def save_run(cell: CellResult, path: Path, loaded: matrix.Matrix = DEFAULT) -> Path:
    results.save(RunResults(run_id="t", started=results.now(), host={}, cells=[cell],
                            matrix_digest=results.matrix_digest(loaded.spec)), path)
    return path


def repository_tags(client: docker.DockerClient, repository: str) -> dict[str, str]:
    """Every local tag of `repository` -> the image it points at."""
    return {ref: str(image.id) for image in client.images.list(name=repository) for ref in image.tags}


def test_good_tags_point_at_the_tested_image_itself(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str],
) -> None:
    image_id = make_image(f"good {uuid.uuid4()}")
    before = client.images.get(image_id).attrs["Config"]
    cell = verified(client, image_id, cfg)
    assert cell.tags == [f"{cfg.repository}:0.5.16-torch2.11.0-cu130-pip",
                         f"{cfg.repository}:0.5.16-torch2.11.0-cu130-pip-verified-sm90"]
    for ref in cell.tags:
        assert client.images.get(ref).id == image_id   # the digest that was tested, nothing built on it
    assert client.images.get(image_id).attrs["Config"] == before  # no label written after the test


def test_a_failed_rebuild_never_gets_or_moves_the_good_tag(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str],
) -> None:
    good = verified(client, make_image(f"v1 {uuid.uuid4()}"), cfg)
    before = {ref: client.images.get(ref).id for ref in good.tags}
    rebuilt = make_image(f"v2 {uuid.uuid4()}")
    pip = next(c for c in DEFAULT.cells if c.id == good.cell_id)
    for kind in ("failed", "cpu-checked"):
        cell = sealed(of_cell(make_cell(kind, image_id=rebuilt), pip))  # the same cell: the same good tag names
        assert tags.apply_good_tags(client, gate(cell), cfg) == []
    assert {ref: client.images.get(ref).id for ref in good.tags} == before


def forged(kind: str, image_id: str, digest: str) -> CellResult:
    """A record of the verified kind for `image_id`, forged in one way (`sealed` by this session's verifier
    key unless the forgery is about the seal, for the matrix of `digest`, which its results file names)."""
    seal_it = partial(sealed, matrix_digest=digest)
    cell = make_cell("verified", image_id=image_id)
    gpu = results.GPU_STAGES
    if kind == "hand-written":
        return cell
    if kind == "edited after sealing":  # a cpu-checked record, its GPU stages flipped to passed afterwards
        pip = next(c for c in DEFAULT.cells if c.id == cell.cell_id)
        honest = seal_it(of_cell(make_cell("cpu-checked", image_id=image_id), pip))
        return honest.model_copy(update={"stages": cell.stages})
    if kind == "sealed by another key":
        return seal_it(cell, SigningKey("elsewhere", keys.generate()))
    if kind == "no targets, arch bogus":
        stages = [s.model_copy(update={"arch": "bogus"}) if s.name in gpu else s for s in cell.stages]
        return seal_it(finish(cell, targets=[], stages=stages))
    if kind == "unknown cell":
        return seal_it(cell.model_copy(update={"cell_id": "sglang9.9.9-torch2.11.0-cu130-pip-bookworm"}))
    if kind == "another cell's axes":  # 0.5.16's image under 0.5.23's tags
        return seal_it(cell.model_copy(update={"axes": make_cell("verified", sglang="0.5.23").axes}))
    if kind == "short id":
        return seal_it(make_cell("verified", image_id=image_id[:19]))
    assert kind == "GPU stages on no GPU"
    stages = [s.model_copy(update={"gpu": None, "where": "container (cpu)"}) if s.name in gpu else s
              for s in cell.stages]
    return seal_it(finish(cell, stages=stages))


FORGERIES = {  # kind -> what the refusal (or, for the last two, the skipped tag step) says
    "hand-written": "not sealed by a verifier",
    "edited after sealing": "changed after it was sealed (changed: stages",
    "sealed by another key": "no valid signature by a trusted key",
    # records a verifier could have sealed, judged with the matrix's facts: skipped, earning nothing
    "no targets, arch bogus": "GPU stages passed on bogus, which is not a target arch",
    "unknown cell": "'sglang9.9.9-torch2.11.0-cu130-pip-bookworm' is no cell of",
    "another cell's axes": "axes are not those of the cell",
    "short id": "is not a full image id",
    "GPU stages on no GPU": "no GPU name and arch are recorded for it",
}


@pytest.mark.parametrize("kind", FORGERIES)
def test_a_forged_record_moves_no_tag(
    kind: str, client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tag` of each forgery: refused with the reason (an error before the engine is touched), or, for a
    record a verifier could have sealed, judged with the matrix's facts: nothing earned. No tag moves."""
    loaded = project(tmp_path, cfg)
    good = verified(client, make_image(f"v1 {uuid.uuid4()}"), cfg)   # the good tags already there
    target = make_image(f"forged {uuid.uuid4()}")
    path = save_run(forged(kind, target, results.matrix_digest(loaded.spec)), tmp_path / "results.json", loaded)
    before = repository_tags(client, cfg.repository)
    assert {ref for ref, image in before.items() if image == str(good.image.id)} >= set(good.tags)
    argv = ["--results", str(path), "--matrix", str(loaded.path)]
    reason = FORGERIES[kind]
    if kind in ("no targets, arch bogus", "GPU stages on no GPU"):
        assert call(tag_command, argv, Workspace.at(tmp_path), dict(os.environ)) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert f"{good.cell_id} tag" in said and reason in said and "0 cell(s) tagged" in said
    else:
        with pytest.raises(ResultsError) as err:
            call(tag_command, argv, Workspace.at(tmp_path), dict(os.environ))
        assert reason in err.value.message and "not evidence" in err.value.message
    assert repository_tags(client, cfg.repository) == before
    assert results.load(path).cells[0].tags == []


def test_promote_pushes_by_digest_and_pulls_back_the_same_images(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    cell = verified(client, make_image(f"promote {uuid.uuid4()}"), cfg)
    good = [ref.rsplit(":", 1)[1] for ref in cell.tags]
    path = save_run(cell, tmp_path / "runs" / "t" / "results.json")
    assert promotion.promote_file(client, path, server.url, cfg, DEFAULT, KEYS) == 1
    saved = results.load(path).cells[0]
    base = f"{server.url}/{cfg.repository}"
    candidate = cell.image.ref.rsplit(":", 1)[1]  # type: ignore[union-attr]
    assert set(saved.promoted) == {f"{base}:{candidate}", *(f"{base}:{t}" for t in good)}
    assert saved.image.digest == saved.promoted[f"{base}:{candidate}"]
    assert set(saved.promoted.values()) == {saved.image.digest}   # every tag: the tested image's manifest

    # Delete the local copy, pull back from the registry, compare ids and digests.
    client.images.remove(str(cell.image.id), force=True)
    assert through_engine.pull(client, f"{base}:{candidate}") == cell.image.id
    for tag in good:
        assert through_engine.pull(client, f"{base}:{tag}") == cell.image.id
        assert through_engine.remote_digest(client, f"{base}:{tag}") == saved.promoted[f"{base}:{tag}"]
    assert f"{base}@{saved.image.digest}" in client.images.get(str(cell.image.id)).attrs["RepoDigests"]


def test_promote_refuses_a_forged_record_before_pushing(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    loaded = project(tmp_path, cfg)
    cell = verified(client, make_image(f"forged {uuid.uuid4()}"), cfg, loaded)
    edited = cell.model_copy(update={"targets": []})   # sealed, then edited: the seal no longer fits
    path = save_run(edited, tmp_path / "results.json", loaded)
    with pytest.raises(ResultsError, match="changed after it was sealed"):
        call(promote_command, ["--results", str(path), "--registry", server.url, "--matrix", str(loaded.path)],
                     Workspace.at(tmp_path), dict(os.environ))
    assert promotion.promote_file(client, path, server.url, cfg, loaded, KEYS) == 0   # the API skips it too
    assert results.load(path).cells[0].promoted == {}
    assert not any(server.url in t for i in client.images.list() for t in i.tags)


def _promote_twice(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path, before_second: Callable[[], None], hook: Callable[[str], None] | None = None,
) -> tuple[dict[str, str], Path, str]:
    """Promote v1; then try v2 of the same cell after `before_second`; return v1's promoted refs."""
    v1 = verified(client, make_image(f"v1 {uuid.uuid4()}"), cfg)
    first = save_run(v1, tmp_path / "v1.json")
    promotion.promote_file(client, first, server.url, cfg, DEFAULT, KEYS)
    old = results.load(first).cells[0].promoted
    for ref in v1.tags:
        through_engine.untag(client, ref)
    v2 = verified(client, make_image(f"v2 {uuid.uuid4()}"), cfg)
    second = save_run(v2, tmp_path / "v2.json")
    before_second()
    with pytest.raises(RegistryError) as err:
        if hook is None:
            promotion.promote_file(client, second, server.url, cfg, DEFAULT, KEYS)
        else:
            promotion.promote_cell(client, gate(results.load(second).cells[0]), server.url, cfg, before_push=hook)
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
        assert through_engine.remote_digest(client, ref) == digest


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
        assert through_engine.remote_digest(client, ref) == digest


def test_an_unreachable_registry_is_a_clear_error(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], tmp_path: Path,
) -> None:
    from tests.registry_server import free_port

    cell = verified(client, make_image(f"nowhere {uuid.uuid4()}"), cfg)
    path = save_run(cell, tmp_path / "results.json")
    with pytest.raises(RegistryError) as err:
        promotion.promote_file(client, path, f"127.0.0.1:{free_port()}", cfg, DEFAULT, KEYS)
    assert "unreachable" in str(err.value)
    assert results.load(path).cells[0].promoted == {}


def test_a_cell_without_good_tags_is_never_pushed(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    pip = next(c for c in DEFAULT.cells if c.id == make_cell("verified").cell_id)
    cell = sealed(of_cell(make_cell("cpu-checked", image_id=make_image(f"cpu {uuid.uuid4()}")), pip))
    path = save_run(cell, tmp_path / "results.json")
    assert promotion.promote_file(client, path, server.url, cfg, DEFAULT, KEYS) == 0
    with pytest.raises(RegistryError, match="no good tag"):
        promotion.promote_cell(client, gate(cell), server.url, cfg)
    assert not any(server.url in t for i in client.images.list() for t in i.tags)


def test_a_push_from_the_engine_never_replaces_a_tag_of_several_platforms(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str], server: RegistryServer,
    tmp_path: Path,
) -> None:
    """A tag that promotion by digest made an index of the amd64 and arm64 manifests is refused to a cell
    promoted from this engine: its push would drop the arm64 entry its own verdicts put there."""
    from tests.integration.test_promote_platforms import push_layout

    first = verified(client, make_image(f"promote {uuid.uuid4()}"), cfg)
    assert promotion.promote_file(client, save_run(first, tmp_path / "a" / "results.json"), server.url, cfg,
                                DEFAULT, KEYS) == 1
    base = f"{server.url}/{cfg.repository}"
    tag = first.tags[0].rsplit(":", 1)[1]
    amd64 = manifests.served(f"{base}:{tag}", ENV)
    arm64, _ = push_layout(f"{base}:arm64-{uuid.uuid4().hex[:8]}", "arm64")
    entry = {"mediaType": amd64.media_type, "digest": amd64.digest,
             "size": len(manifests.raw(f"{base}@{amd64.digest}", ENV))}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {**entry, "platform": {"os": "linux", "architecture": "amd64"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": arm64,
         "size": len(manifests.raw(f"{base}@{arm64}", ENV)), "platform": {"os": "linux", "architecture": "arm64"}}]}
    both = manifests.write_index(f"{base}:{tag}", json.dumps(index).encode(), ENV)
    second = verified(client, make_image(f"promote {uuid.uuid4()}"), cfg)
    with pytest.raises(RegistryError, match="holds an index of linux/amd64, linux/arm64"):
        promotion.promote_file(client, save_run(second, tmp_path / "b" / "results.json"), server.url, cfg, DEFAULT,
                               KEYS)
    assert manifests.served(f"{base}:{tag}", ENV).digest == both   # nothing replaced it
