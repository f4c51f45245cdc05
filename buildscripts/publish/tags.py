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

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..matrix.tagtemplates import template_problems
from ..results import tag_form

if TYPE_CHECKING:
    import docker

    from ..matrix import Cell, Matrix
    from ..matrix.schema import Tags
    from .trusted import Trusted

TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


# ---------------------------------------------------------------- templates


def check_templates(cfg: Tags) -> None:
    """Raise ConfigError when a template names an unknown field (run at matrix load and before tagging)."""
    problems = template_problems(cfg.candidate, cfg.good, cfg.repository)
    if problems:
        raise ConfigError("; ".join(problems), hint="fix the `tags:` section of matrix.yaml")


def render(template: str, fields: Mapping[str, str]) -> str:
    """One tag from a template; characters a docker tag cannot hold become '-'."""
    try:
        raw = template.format_map(dict(fields))
    except (KeyError, ValueError, IndexError) as exc:
        known = ", ".join(fields)
        msg = f"tag template {template!r} cannot be rendered ({exc}); known fields: {known}"
        raise ConfigError(msg, hint="fix the `tags:` section of matrix.yaml") from None
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).lstrip(".-")[:128]
    if not TAG_RE.match(tag):
        msg = f"tag template {template!r} renders to {raw!r}, which is not a valid docker tag"
        raise ConfigError(msg, hint="use fields that give letters, digits, '.', '_' or '-'")
    return tag


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


def named(cfg: Tags, axes: Mapping[str, str], archs: Sequence[str], *, every_arch: bool) -> list[str]:
    """`repository:tag` of each good tag template, in their order, each once: one per arch of `archs` (as tags
    spell them, `sm90`) for a template with `{arch}`; for one without, its tag when `every_arch`."""
    check_templates(cfg)
    refs: list[str] = []
    for template in cfg.good:
        for arch in archs if "{arch}" in template else ([""] if every_arch else []):
            ref = f"{cfg.repository}:{render(template, {**axes, 'arch': arch})}"
            if ref not in refs:
                refs.append(ref)
    return refs


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
