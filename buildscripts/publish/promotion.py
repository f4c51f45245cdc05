"""`nox -s promote`: publish the cells that earned good tags to a registry, by digest.

Cells whose records name a staged digest (a staging build and the GPU jobs that verified its digests) are
promoted by pointing the good tags at that digest in the registry (publish/bydigest.py). The others, built
and verified on one machine, are pushed from its engine, as follows.

For each verified cell the gate lets through (publish/trusted.py: a sealed record of a matrix cell):
push the tested image by its id under its candidate tag, read the digest back from the registry and
pull it by digest to prove it is the image the results name as tested; then push each good tag (the
tested image itself) and read those digests back.
Only when every push of a cell succeeded is the cell marked promoted (`CellResult.promoted`) and
its results file saved. Pushing a tag is one manifest write, so a promote stopped half-way leaves
each good tag either on its old image or on the new verified one, never on anything unverified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log, platform_reading, results
from ..errors import RegistryError, ResultsError
from ..matrix import Matrix
from ..matrix.schema import Tags
from ..registry import through_engine
from ..trust.keys import PublicKey
from . import platformtags, recorded, tags, trusted

if TYPE_CHECKING:
    import docker


def arch_tags_only(cfg: Tags) -> Tags:
    """The tag templates that name an arch: what a job that verified one arch of a cell may vouch for
    (the arch-free tag says "verified on every arch it ran on", which one job cannot know)."""
    return cfg.model_copy(update={"good": tuple(t for t in cfg.good if "{arch}" in t)})


def promote_cell(
    client: docker.DockerClient, checked: trusted.Trusted, url: str, cfg: Tags,
    before_push: Callable[[str], None] | None = None, env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Push one verified cell (let through by the gate) and those of its good tags that `cfg`'s templates
    give; return {registry ref: manifest digest}. Raises RegistryError on any doubt."""
    import docker.errors

    cell = checked.record
    why_not = checked.why_not
    if why_not or not cell.tags:
        msg = f"{cell.cell_id} has no good tag to promote ({why_not or 'no good tag was applied'})"
        raise RegistryError(msg, hint="only cells verified on a GPU are promoted")
    tested_id = checked.image_id
    wanted = set(tags.good_tags(checked, cfg))
    try:
        tested = client.images.get(tested_id)
        children = {ref: client.images.get(ref) for ref in cell.tags if ref in wanted}
    except docker.errors.ImageNotFound as exc:
        msg = f"{cell.cell_id}: an image named in the results is not in the local engine ({exc.explanation})"
        raise RegistryError(msg, hint="promote on the machine that built and verified it") from None
    for ref, child in children.items():
        if child.id != tested.id:
            msg = f"{cell.cell_id}: local tag {ref} does not point at the tested image {tested_id}"
            raise RegistryError(msg, hint="re-run the build and verification; the tag moved since")
    base = f"{url}/{cfg.repository}"
    candidate = cell.image.ref.rsplit(":", 1)[1] if cell.image.ref and ":" in cell.image.ref else None
    if candidate is None:
        msg = f"{cell.cell_id}: the results record no candidate tag"
        raise ResultsError(msg, hint="re-run the build with this version")
    for local_ref in children:
        _refuse_other_platforms(f"{base}:{local_ref.rsplit(':', 1)[1]}", cell.cell_id, checked.cell.platform, env or {})

    published: dict[str, str] = {}
    pushed_refs: list[str] = []
    try:
        # 1. The tested image itself, by id: its digest must lead back to that very id.
        ref = f"{base}:{candidate}"
        _announce(before_push, ref)
        pushed_refs.append(ref)
        digest = through_engine.push(client, tested_id, ref)
        if cell.image.digest and cell.image.digest != digest:
            msg = f"{cell.cell_id}: pushed digest {digest} differs from the tested digest {cell.image.digest}"
            raise RegistryError(msg, hint="the image changed since it was verified; verify it again")
        _check_back(client, ref, digest, tested_id)
        published[ref] = digest
        # 2. Good tags: the tested image itself under each (checked above).
        for local_ref, child in children.items():
            ref = f"{base}:{local_ref.rsplit(':', 1)[1]}"
            _announce(before_push, ref)
            pushed_refs.append(ref)
            published[ref] = through_engine.push(client, str(child.id), ref)
            _check_back(client, ref, published[ref], str(child.id))
    finally:
        for ref in pushed_refs:
            through_engine.untag(client, ref)
    return published


def _refuse_other_platforms(ref: str, cell_id: str, platform: str, env: Mapping[str, str]) -> None:
    """RegistryError when the tag `ref` holds anything but an image of `platform`: an index (of several
    platforms), another platform's manifest, or one whose config names no platform. A push from this engine
    would replace what that platform's verdicts put there; tags of several platforms are promoted by digest
    (publish/platformtags.py), where each entry is vouched for. Read from the registry with skopeo: the engine's
    distribution inspect names no platform for an OCI manifest."""
    current, listed = platformtags.serving(ref, env)
    if current is None:
        return
    if [digest for _, digest in listed] != [current]:   # an index: its entries are other digests
        held = "an index of " + (", ".join(filter(None, (p for p, _ in listed))) or "no named platform")
    else:
        found = listed[0][0]
        if found is not None and platform_reading.matches(found, platform):
            return
        held = f"a {found} image" if found else "an image whose config names no platform"
    msg = (f"{cell_id}: {ref} holds {held}; a push of this {platform} image from the engine would replace what "
           "another platform's verdicts put there")
    raise RegistryError(msg, hint="promote tags of several platforms by digest: stage the build "
                                  "(`nox -s build -- --stage REPO`), verify the digest, promote those results")


def _announce(hook: Callable[[str], None] | None, ref: str) -> None:
    log.info(f"pushing {ref}")
    if hook is not None:
        hook(ref)


def _check_back(client: docker.DockerClient, ref: str, digest: str, image_id: str) -> None:
    """The registry serves `digest` for `ref`, and pulling that digest gives back `image_id`."""
    served = through_engine.remote_digest(client, ref)
    if served != digest:
        msg = f"{ref}: the registry serves {served}, but the push reported {digest}"
        raise RegistryError(msg, hint="someone else pushed to this tag meanwhile; promote again")
    repository, _ = through_engine.split_ref(ref)
    pulled = through_engine.pull(client, f"{repository}@{digest}")
    if pulled != image_id:
        msg = f"{ref}@{digest} pulls back as {pulled}, not the tested {image_id}"
        raise RegistryError(msg, hint="the registry altered the image; do not use it")


def promote_file(
    client: docker.DockerClient, path: Path, url: str, cfg: Tags, matrix: Matrix, keys: Sequence[PublicKey],
    only: Sequence[str] = (), env: Mapping[str, str] | None = None,
) -> int:
    """Promote every eligible cell of one results file (the gate's, publish/trusted.py); save the file after
    each promoted cell."""
    run = results.load(path)
    count = 0
    for checked in trusted.sift(run, matrix, keys, only):
        if isinstance(checked, trusted.Trusted) and checked.record.image.subject:
            continue   # promoted by digest (publish/bydigest.py)
        if isinstance(checked, trusted.Refused) or checked.why_not or not checked.record.tags:
            log.step(checked.cell_id, "promote", "skipped", detail=checked.why_not or "no good tag applied")
            continue
        cell = checked.record
        published = promote_cell(client, checked, url, cfg, env=env)
        image = cell.image.model_copy(update={"digest": next(iter(published.values()))})
        run.cells[checked.position] = cell.model_copy(update={"image": image, "promoted": published})
        recorded.save(run, path, f"{cell.cell_id} was pushed to " + ", ".join(f"{r}@{d}" for r, d in published.items()))
        log.step(cell.cell_id, "promote", "passed", detail=", ".join(published))
        count += 1
    return count
