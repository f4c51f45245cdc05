"""Tag policy: a candidate tag for every built image, good tags only for what was verified on a GPU.

The candidate tag is content-addressed (`{inputs}` is a hash of the build inputs), so it changes
whenever an input changes. Good tags are earned per GPU arch, by a record the gate lets through
(publish/trusted.py: sealed by a trusted verifier, a cell of matrix.yaml, a full image id, judged
again with the matrix's targets): every CPU stage passed and every GPU stage passed on a GPU of that
arch, one of the cell's targets; the arch-less good tags only when no GPU stage failed on any arch.
Tags are rendered from the matrix cell's axes, never from the record's. A good tag points at the
tested image itself, by its id: nothing is written into the image after the test (a label would make
another image, with another digest); what was verified travels in the results and in attachments.
A cell that did not earn its tags never touches them: the previous good image stays where it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ResultsError, TagError
from ..matrix.tagtemplates import check_templates, named, render
from ..results import tag_form

if TYPE_CHECKING:
    import docker

    from ..matrix import Cell, Matrix
    from ..matrix.schema import Tags
    from .trusted import Trusted

def candidate_tag(cell: Cell, inputs: str, cfg: Tags) -> str:
    """Full reference `repository:tag` of a built cell's candidate image."""
    check_templates(cfg)
    return f"{cfg.repository}:{render(cfg.candidate, {**cell.axes(), 'inputs': inputs})}"


# ---------------------------------------------------------------- policy


def good_tags(cell: Trusted, cfg: Tags) -> list[str]:
    """Full references of the good tags a cell the gate let through earned (empty unless verified on a
    target GPU), rendered from the matrix cell's axes.

    A template with `{arch}` gives one tag per arch verified in this image; one without gives its tag only
    when the verdict is `verified`, i.e. no GPU stage failed on any arch (else it would vouch for them all).
    """
    check_templates(cfg)
    if cell.why_not is not None:
        return []
    return named(cfg, cell.cell.axes(), cell.archs, every_arch=cell.every_arch)


def required_archs(cell: Cell, matrix: Matrix) -> list[str]:
    """The archs (as tags spell them) the cell's arch-free tag needs verified: its targets that the CI verifies
    on a runner of their own (`runners.archs`, or its platform's `runners.platforms.P.archs`); none when those
    name none (any one GPU runner verifies the cell, and one verified arch is enough)."""
    runner_archs = matrix.spec.runners.of(cell.platform).archs
    return [tag_form(a) for a in cell.archs if a in runner_archs]


# ---------------------------------------------------------------- applying


def apply_good_tags(client: docker.DockerClient, cell: Trusted, cfg: Tags) -> list[str]:
    """Point the good tags the cell earned at the tested image itself (by its id, never by a tag that may
    have moved); return the refs tagged. ImageNotFound before any tag moves when the engine lacks it."""
    refs = good_tags(cell, cfg)
    if not refs:
        return []
    client.images.get(cell.image_id)
    for ref in refs:
        repository, tag = ref.rsplit(":", 1)
        client.api.tag(cell.image_id, repository, tag)
    return refs


def apply(client: docker.DockerClient, cell: Trusted, cfg: Tags) -> list[str]:
    """The cell's good tags on its tested image, engine refusals said as such (`tag`, and the build's tag step)."""
    import docker.errors  # here: the docker SDK only where the engine is reached (cli.py)

    try:
        return apply_good_tags(client, cell, cfg)
    except docker.errors.ImageNotFound:
        msg = f"{cell.cell_id}: the verified image {cell.image_id} is not in this engine"
        raise ResultsError(msg, hint="tag on the machine that verified it") from None
    except docker.errors.APIError as exc:
        msg = f"{cell.cell_id}: the engine refused its good tags: {exc}"
        raise TagError(msg, hint="tags already moved point at the verified image; try again") from None
