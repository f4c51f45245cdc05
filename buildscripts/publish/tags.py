"""Tag policy: a candidate tag for every built image, good tags only for what was verified on a GPU.

The candidate tag is content-addressed (`{inputs}` is a hash of the build inputs), so it changes
whenever an input changes. Good tags are earned per GPU arch: every CPU stage passed and every
GPU stage passed on a GPU of that arch, one of the cell's targets (`results.judge`); the arch-less
good tags only when no GPU stage failed on any arch. Docker tags cannot carry labels, so a good
tag points at a label-only child of the tested image: the same filesystem layers, a config that
adds OCI labels (cell id, lock hashes, results digest, GPUs, archs, date). The child is built
first and tagged after, so an interruption never leaves a good tag on an unverified image, and a
cell that did not earn its tags never touches them: the previous good image stays where it was.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, RegistryError
from ..matrix.schema import LABEL_PREFIX
from ..matrix.tagtemplates import template_problems
from ..results import GPU_STAGES, CellResult, Verdict, family, judge, now, tag_form
from ..results import verified_archs as results_verified_archs

if TYPE_CHECKING:
    import docker

    from ..matrix import Cell
    from ..matrix.schema import Tags

TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
TESTED_IMAGE_LABEL = f"{LABEL_PREFIX}.tested-image"


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


def not_good_because(cell: CellResult) -> str | None:
    """Why this cell earns no good tag at all, or None when it earns one per verified arch at least.

    The verdict is re-judged, not trusted. A cell verified on one arch and failed on another earns
    the tags of the verified arch only (`good_tags`).
    """
    verdict, reason = judge(cell)
    if cell.verdict is not verdict:
        return f"the recorded verdict {cell.verdict.value} is not what its stages give ({verdict.value}: {reason})"
    if not results_verified_archs(cell):
        return f"verdict {verdict.value}: {reason}"
    if not verified_archs(cell):
        return (f"{reason}, but in another build of the same inputs, not in the image {cell.image.id}; "
                "a good tag vouches for the image that ran")
    if cell.image.id is None:
        return "no image id recorded: nothing identifies the image that was tested"
    if not cell.image.id.startswith("sha256:"):
        return f"the tested {cell.image.id} is no image of the engine (a host or LXC run): there is nothing to tag"
    return None


def verified_archs(cell: CellResult) -> list[str]:
    """The archs the cell's own image is verified on, as tags spell them (`sm90`): those `results.judge`
    gives, less any whose GPU stages ran in another build of the same inputs (merged from another runner)."""
    return [tag_form(arch) for arch in results_verified_archs(cell) if ran_in_this_image(cell, arch)]


def ran_in_this_image(cell: CellResult, arch: str) -> bool:
    return all(s.image_id in (None, cell.image.id) for s in cell.stages
               if s.name in GPU_STAGES and s.arch and family(s.arch) == family(arch))


def good_tags(cell: CellResult, cfg: Tags) -> list[str]:
    """Full references of the good tags the cell earned (empty unless verified on a target GPU).

    A template with `{arch}` gives one tag per verified arch; one without gives its tag only when the
    verdict is `verified`, i.e. no GPU stage failed on any arch (else it would vouch for them all).
    """
    check_templates(cfg)
    if not_good_because(cell) is not None:
        return []
    if not cell.axes:
        msg = f"results for {cell.cell_id} carry no axes; cannot render its tags"
        raise ConfigError(msg, hint="re-run the build with this version")
    every_arch = judge(cell)[0] is Verdict.VERIFIED
    refs: list[str] = []
    for template in cfg.good:
        # An arch-less tag vouches for every arch the cell ran on: only when none failed.
        archs = verified_archs(cell) if "{arch}" in template else ([""] if every_arch else [])
        for arch in archs:
            ref = f"{cfg.repository}:{render(template, {**cell.axes, 'arch': arch})}"
            if ref not in refs:
                refs.append(ref)
    return refs


def results_digest(cell: CellResult) -> str:
    """sha256 of the cell's verification record (without what tagging/promotion add to it later)."""
    data = cell.model_dump(mode="json", exclude={"tags", "promoted", "run_id", "runner", "finished"})
    data["image"].pop("digest", None)
    data["image"].pop("labels", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def good_labels(cell: CellResult) -> dict[str, str]:
    """OCI labels a good tag carries: what was verified, how, where and when."""
    archs = {a for a in results_verified_archs(cell) if ran_in_this_image(cell, a)}
    gpus = sorted({s.gpu for s in cell.stages if s.name in GPU_STAGES and s.gpu and s.arch and family(s.arch) in archs})
    labels = {
        "org.opencontainers.image.created": now(),
        "org.opencontainers.image.title": cell.cell_id,
        "org.opencontainers.image.version": cell.axes.get("sglang", ""),
        f"{LABEL_PREFIX}.cell": cell.cell_id,
        f"{LABEL_PREFIX}.verdict": cell.verdict.value,
        f"{LABEL_PREFIX}.verified.gpus": ", ".join(gpus),
        f"{LABEL_PREFIX}.verified.archs": " ".join(verified_archs(cell)),
        f"{LABEL_PREFIX}.results.digest": results_digest(cell),
        TESTED_IMAGE_LABEL: cell.image.id or "",
    }
    for path, sha in sorted(cell.locks.items()):
        labels[f"{LABEL_PREFIX}.lock.{Path(path).stem}"] = sha
    return labels


# ---------------------------------------------------------------- applying


def apply_good_tags(
    client: docker.DockerClient, cell: CellResult, cfg: Tags, *,
    image_id: str | None = None, labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Point the cell's good tags at a labelled child of the tested image; return the refs tagged.

    The tested image is `cell.image.id` (by id, never by a tag that may have moved); `image_id`,
    when given, must be that same id. Nothing is touched unless the cell earned its tags. The
    child is built completely before the first tag moves (tagging is the only visible step).
    """
    refs = good_tags(cell, cfg)
    if not refs:
        return []
    image_id = image_id or str(cell.image.id)
    if image_id != cell.image.id:
        msg = f"{cell.cell_id}: asked to tag {image_id}, but the verified image is {cell.image.id}"
        raise RegistryError(msg, hint="tag the image id recorded in the results, nothing else")
    tested = client.images.get(image_id)  # ImageNotFound before anything is built
    all_labels = {**good_labels(cell), **(labels or {})}
    # One LABEL instruction: no intermediate images. The classic builder (docker-py has no
    # BuildKit) is fine here: FROM + LABEL adds no layer, only config.
    dockerfile = f"FROM {image_id}\nLABEL " + " ".join(
        f"{_quoted(k)}={_quoted(v)}" for k, v in sorted(all_labels.items())
    ) + "\n"
    child, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), pull=False, rm=True, forcerm=True)
    if child.attrs["RootFS"] != tested.attrs["RootFS"]:
        msg = f"{cell.cell_id}: the labelled image {child.id} has other layers than the tested {image_id}"
        raise RegistryError(msg, hint="this is a bug; no good tag was moved")
    for ref in refs:
        repository, tag = ref.rsplit(":", 1)
        client.api.tag(child.id, repository, tag)
    return refs


def _quoted(value: str) -> str:
    """A Dockerfile double-quoted string: backslash, quote and `$` escaped, one line."""
    flat = " ".join(str(value).splitlines())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
