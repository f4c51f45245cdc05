"""Tag policy: a candidate tag for every built image, good tags only for what was verified on a GPU.

The candidate tag is content-addressed (`{inputs}` is a hash of the build inputs), so it changes
whenever an input changes. Good tags are earned only by `Verdict.VERIFIED` with every GPU stage
passed on a GPU whose arch is one of the cell's targets. Docker tags cannot carry labels, so a good
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
import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .config import LABEL_PREFIX
from .errors import ConfigError, RegistryError
from .results import GPU_STAGES, CellResult, Status, Verdict, judge, now

if TYPE_CHECKING:
    import docker

    from .config import Tags
    from .matrix import Cell

# The keys of matrix.Cell.axes() (a unit test keeps the two in step; importing matrix here would
# make config -> tags -> matrix -> config a cycle, since config validates templates with this module).
AXIS_FIELDS = ("cell", "base", "python", "torch", "cuda", "lane", "sglang", "toolkit", "archs")
CANDIDATE_FIELDS = (*AXIS_FIELDS, "inputs")
GOOD_FIELDS = (*AXIS_FIELDS, "arch")

TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TESTED_IMAGE_LABEL = f"{LABEL_PREFIX}.tested-image"


# ---------------------------------------------------------------- templates


def template_problems(candidate: str, good: Iterable[str], repository: str) -> list[str]:
    """Every problem with the tag templates, as sentences naming the template and the known fields."""
    problems = [_problem(candidate, "tags.candidate", CANDIDATE_FIELDS)]
    problems += [_problem(t, f"tags.good[{i}]", GOOD_FIELDS) for i, t in enumerate(good)]
    if not REPOSITORY_RE.match(repository):
        problems.append(f"tags.repository {repository!r} is not a valid repository name "
                        "(lowercase letters, digits, '.', '_', '-', '/')")
    return [p for p in problems if p]


def _problem(template: str, where: str, known: tuple[str, ...]) -> str:
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"{where} {template!r} is not a valid template: {exc}"
    unknown = [f for f in fields if f not in known]
    if unknown:
        return (f"{where} {template!r} uses unknown field(s) {', '.join(map(repr, unknown))}; "
                f"known fields: {', '.join(known)}")
    if not fields:
        return f"{where} {template!r} has no field: every cell would get the same tag"
    return ""


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


def short_arch(arch: str) -> str:
    """`sm_90` / `sm_90a` -> `sm90`: the form used in tags (`-verified-sm90`)."""
    match = re.match(r"^sm_?(\d+)[af]?$", arch)
    return f"sm{match.group(1)}" if match else re.sub(r"[^a-z0-9]", "", arch.lower())


def not_good_because(cell: CellResult) -> str | None:
    """Why this cell earns no good tag, or None when it does. The verdict is re-judged, not trusted."""
    verdict, reason = judge(cell)
    if verdict is not Verdict.VERIFIED or cell.verdict is not Verdict.VERIFIED:
        return f"verdict {verdict.value}: {reason}"
    if cell.image.id is None:
        return "no image id recorded: nothing identifies the image that was tested"
    not_passed = [s.name for s in cell.stages if s.status is not Status.PASSED]
    if not_passed:
        return "not every stage passed: " + ", ".join(not_passed)
    missing = [name for name in GPU_STAGES if cell.stage(name) is None]
    if missing:
        return "GPU stage(s) never ran: " + ", ".join(missing)
    targets = {short_arch(a) for a in cell.axes.get("archs", "").split()}
    for name in GPU_STAGES:
        stage = cell.stage(name)
        if stage is None or not stage.gpu or not stage.arch:
            return f"{name} did not record the GPU it ran on"
        if targets and short_arch(stage.arch) not in targets:
            return f"{name} ran on {stage.arch}, which is not a target arch ({', '.join(sorted(targets))})"
    return None


def verified_archs(cell: CellResult) -> list[str]:
    return sorted({short_arch(s.arch) for s in cell.stages if s.name in GPU_STAGES and s.arch})


def good_tags(cell: CellResult, cfg: Tags) -> list[str]:
    """Full references of the good tags the cell earned (empty unless verified on a target GPU)."""
    check_templates(cfg)
    if not_good_because(cell) is not None:
        return []
    if not cell.axes:
        msg = f"results for {cell.cell_id} carry no axes; cannot render its tags"
        raise ConfigError(msg, hint="re-run the build with this version")
    refs: list[str] = []
    for template in cfg.good:
        archs = verified_archs(cell) if "{arch}" in template else [""]
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
    gpus = sorted({s.gpu for s in cell.stages if s.name in GPU_STAGES and s.gpu})
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
    all_labels = {**good_labels(cell), **(labels or {})}
    # One LABEL instruction: no intermediate images. The classic builder (docker-py has no
    # BuildKit) is fine here: FROM + LABEL adds no layer, only config.
    dockerfile = f"FROM {image_id}\nLABEL " + " ".join(
        f"{_quoted(k)}={_quoted(v)}" for k, v in sorted(all_labels.items())
    ) + "\n"
    child, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), pull=False, rm=True, forcerm=True)
    tested = client.images.get(image_id)
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
