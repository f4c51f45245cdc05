"""Promotion by digest: the good tags point at the very manifest the GPU jobs verified.

Input: the results of a staging build (`build --stage REPO`) and of the GPU jobs that verified what it
staged (`verify REPO@sha256:…`), every record through the gate (publish/trusted.py). Per cell, the records
that name one subject (`image.repository@image.digest`) are weighed together, across the files:

- an arch is verified when the newest record whose GPU stages ran on it says so (`Trusted.archs`), and
  its per-arch tag (`…-verified-sm100`) then points at the digest;
- the arch-free tag needs every arch the CI verifies the cell on (its targets that its platform's `archs` gives a
  runner; with none given, at least one arch), each verified, and no record of that digest failed.

Nothing is written before everything was checked, under the destination repository's lock
(registry/writer_lock.py): the registry serves the subject, as the image each record tested (its id is the
digest of that manifest or of its config) and as an image of the cell's platform (its config says so); a good
tag that serves another digest is moved only when that digest carries a verdict a trusted key signed (an
earlier promotion); one that serves a digest nobody vouched for was put there by someone else and is refused,
not moved back, unless `--repair`. What was promoted is read from the registry, never from the results file,
whose `promoted` field no seal covers.
Then the digest is copied into the release repository keeping its digest and its attachments (when that is
another repository), the signed verdicts are attached to it, then a signed snapshot of the verdicts it carries
(publish/snapshots.py, with the key verdicts are signed with: readers keep it and refuse to go back), and each
tag is pointed at it and read back. The linux/amd64 and linux/arm64 cells of one release render the same tags:
a tag one platform holds is that platform's manifest itself (`skopeo copy --preserve-digests`, no child image,
no rebuild); one that several platforms hold is an index of their verified manifests (publish/platformtags.py).
A tag is one manifest write: stopped at any point (SIGKILL included), every good tag is where it was or where
the promotion planned it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import log
from ..attest import signed
from ..errors import RegistryError, ResultsError
from ..matrix import Matrix, tagtemplates
from ..matrix.schema import Tags
from ..registry import manifests, writer_lock
from ..results import RunResults, arch_outcomes, gpu_runs, is_unexpected, tag_form
from ..results.judge import ARCH_FAILED, ARCH_INCOMPLETE
from ..trust import verdicts
from ..trust.keys import PublicKey, signing_key
from . import platformtags, recorded, snapshots, tags, trusted


@dataclass(frozen=True)
class Evidence:
    """One gated record that names a subject, and the results file it came from."""

    path: Path
    checked: trusted.Trusted

    @property
    def subject(self) -> str:
        return str(self.checked.record.image.subject)

    @property
    def where(self) -> str:
        """The results file as messages name it: its run folder and name."""
        return f"{self.path.parent.name}/{self.path.name}"


@dataclass
class Promotion:
    """What one cell's records earned for one digest, and where its tags go."""

    cell_id: str
    source: str                       # the repository the digest was staged in (and verified from)
    digest: str
    evidence: list[Evidence]
    arch_tags: list[str]              # tag names, `…-verified-sm100`
    free_tags: list[str]              # the arch-free ones (empty when withheld)
    withheld: str | None = None       # why the arch-free tags were withheld
    tag_archs: dict[str, str] = field(default_factory=dict)      # per-arch tag -> its arch, as tags spell it
    platform: str = "linux/amd64"     # the cell's (matrix.yaml)
    manifest: str = ""                # the platform manifest verified: `digest`, or its entry when an index

    @property
    def tags(self) -> list[str]:
        """Per-arch tags first: an arch-free tag is never ahead of the arch tags it sums up."""
        return self.arch_tags + self.free_tags

    def claim(self) -> platformtags.Claim:
        return platformtags.Claim(self.cell_id, self.platform, self.manifest or self.digest, tuple(self.tags),
                                  dict(self.tag_archs))


def gather(runs: Mapping[Path, RunResults], matrix: Matrix, keys: Sequence[PublicKey],
           only: Sequence[str] = ()) -> dict[str, list[Evidence]]:
    """Per cell, the gated records (of every file) that name a subject in a registry."""
    found: dict[str, list[Evidence]] = {}
    for path, run in runs.items():
        for checked in trusted.sift(run, matrix, keys, only):
            if isinstance(checked, trusted.Trusted) and checked.record.image.subject:
                found.setdefault(checked.cell_id, []).append(Evidence(path, checked))
    return found


def weigh(cell_id: str, evidence: Sequence[Evidence], matrix: Matrix, cfg: Tags) -> Promotion | str:
    """The tags one cell's records earned for the digest they name, or why it earned none."""
    by_subject: dict[str, list[Evidence]] = {}
    for item in evidence:
        by_subject.setdefault(item.subject, []).append(item)
    outcomes = [_weigh_one(cell_id, items, matrix, cfg) for items in by_subject.values()]
    earned = [p for p in outcomes if isinstance(p, Promotion)]
    if len(earned) > 1:
        named = "; ".join(f"{p.source}@{p.digest} ({', '.join(sorted({e.where for e in p.evidence}))})"
                          for p in earned)
        msg = f"{cell_id}: records of {len(earned)} different images earned good tags: {named}"
        raise ResultsError(msg, hint="a good tag vouches for one digest: promote the results of one build "
                                     "(its staging job and the GPU jobs of its digests)")
    if earned:
        return earned[0]
    return "; ".join(sorted({p for p in outcomes if isinstance(p, str)}))


def _weigh_one(cell_id: str, evidence: Sequence[Evidence], matrix: Matrix, cfg: Tags) -> Promotion | str:
    first = evidence[0].checked
    deciding: dict[str, Evidence] = {}   # arch family -> the newest record whose GPU stages ran there
    for item in sorted(evidence, key=lambda e: e.checked.record.finished or ""):
        for arch in gpu_runs(item.checked.judged):
            deciding[arch] = item
    verified = sorted({tag_form(a) for a, e in deciding.items() if tag_form(a) in e.checked.archs})
    if not verified:
        why = {e.checked.why_not or "" for e in evidence} - {""}
        return "; ".join(sorted(why)) or "no GPU stage ran on a target arch"
    not_verified = sorted(tag_form(a) for a, e in deciding.items()   # failed or incomplete there (not off-target)
                          if arch_outcomes(e.checked.judged).get(a) in (ARCH_FAILED, ARCH_INCOMPLETE))
    required = tags.required_archs(first.cell, matrix)
    missing = [a for a in required if a not in verified]
    failed = [e.where for e in evidence if is_unexpected(e.checked.judged.verdict)
              or e.checked.judged.first_failure() is not None]
    withheld = ("; ".join(filter(None, [
        f"not verified on {', '.join(missing)}" if missing else "",
        f"{', '.join(not_verified)}: GPU stages did not all pass" if not_verified else "",
        f"a record of this digest failed ({', '.join(sorted(set(failed)))})" if failed else ""])) or None)
    axes = first.cell.axes()
    return Promotion(cell_id, str(first.record.image.repository), str(first.record.image.digest), list(evidence),
                     arch_tags=_names(tagtemplates.named(cfg, axes, verified, every_arch=False)),
                     free_tags=[] if withheld else _names(tagtemplates.named(cfg, axes, [], every_arch=True)),
                     withheld=withheld,
                     tag_archs={t: a for a in verified
                                for t in _names(tagtemplates.named(cfg, axes, [a], every_arch=False))},
                     platform=first.cell.platform,
                     manifest=str(first.record.image.platform_digest or first.record.image.digest))


def _names(refs: Sequence[str]) -> list[str]:
    return [ref.rsplit(":", 1)[1] for ref in refs]


# ---------------------------------------------------------------- the registry, checked


def check_subject(promotion: Promotion, env: Mapping[str, str], *, log_file: Path | None = None) -> None:
    """The registry serves the subject, as the image every record tested; RegistryError naming the file."""
    subject = f"{promotion.source}@{promotion.digest}"
    top = manifests.lookup(subject, env, log=log_file)
    if top is None:
        files = ", ".join(sorted({str(e.path) for e in promotion.evidence}))
        msg = (f"{promotion.cell_id}: the results ({files}) name {subject}, which the registry does not serve: "
               "the digest in the results is not the registry's; no tag was moved")
        raise RegistryError(msg, hint="it was deleted or never pushed there; build and stage it again, and "
                                      "verify what the staging build records")
    for item in promotion.evidence:
        image = item.checked.record.image
        ids = {top.digest, *filter(None, [top.config_digest])}
        if image.platform_digest:
            if image.platform_digest not in top.children():
                ids = set()
            else:
                child = manifests.served(f"{promotion.source}@{image.platform_digest}", env, log=log_file)
                ids |= {child.digest, *filter(None, [child.config_digest])}
        if item.checked.image_id not in ids:
            msg = (f"{promotion.cell_id}: {item.path} says {subject} is the tested image {item.checked.image_id}, "
                   "but the registry's manifest there is another image: the digest in the results is not the "
                   "registry's; no tag was moved")
            raise RegistryError(msg, hint="use the results the verifier wrote for that digest, or verify it again")


# ---------------------------------------------------------------- writing


def release(promotion: Promotion, dest: str, env: Mapping[str, str], keys: Sequence[PublicKey], *,
            log_file: Path | None = None) -> str:
    """The verified digest in the release repository, with its attachments and signed verdicts; return
    `dest@digest`. Tags are pointed afterwards, for all platforms at once (publish/platformtags.py)."""
    pinned = f"{dest}@{promotion.digest}"
    if dest != promotion.source:
        manifests.copy(f"{promotion.source}@{promotion.digest}", pinned, env, log=log_file)
        manifests.served(pinned, env, log=log_file)   # the copy is there, under the very digest
        carry_attachments(promotion.source, dest, promotion.digest, env, log_file=log_file)
    files = [f for e in promotion.evidence for f in verdicts.verdict_files(e.path.parent, promotion.cell_id)]
    if files:
        verdicts.attach_verdicts(sorted(set(files)), pinned, trusted=keys, env=env, log_file=log_file)
    # the build's signed SBOM and provenance (attest/signed.py), from its run folder: carried with the attestation
    # tag above, attached here where they were not (a staging registry that failed, a copy of older attachments)
    described = sorted({f for e in promotion.evidence for f in signed.files(e.path.parent, promotion.cell_id)})
    if described:
        signed.attach(described, f"{dest}@{promotion.manifest or promotion.digest}", trusted=keys, env=env,
                      log_file=log_file)
    # then the snapshot of what the platform manifest that ran now carries (snapshots.py): no going back from it
    snapshots.attach_current(f"{dest}@{promotion.manifest or promotion.digest}", keys, signing_key(env), env,
                             log_file=log_file)
    return pinned


def carry_attachments(source: str, dest: str, digest: str, env: Mapping[str, str], *,
                      log_file: Path | None = None) -> list[str]:
    """Copy the attachment tags of `digest` and, for an index, of its platform manifests (cosign's
    `sha256-<hex>.att`, `.sig`, `.sbom`: registries have no referrers API; a verdict names the platform that
    ran) from `source` to `dest`, each keeping its digest; return the tags copied."""
    top = manifests.lookup(f"{source}@{digest}", env, log=log_file)
    digests = [digest, *(top.children() if top is not None and top.is_index else [])]
    prefixes = tuple(d.replace(":", "-") + "." for d in digests)
    carried = [t for t in manifests.tags(source, env, log=log_file) if t.startswith(prefixes)]
    for tag in carried:
        manifests.copy(f"{source}:{tag}", f"{dest}:{tag}", env, log=log_file)
    return carried


def record(runs: Mapping[Path, RunResults], promotion: Promotion, published: Mapping[str, str]) -> None:
    """Write what was published into every record the promotion rests on, file by file."""
    for path in sorted({e.path for e in promotion.evidence}):
        run = runs[path]
        for item in (e for e in promotion.evidence if e.path == path):
            cell = run.cells[item.checked.position]
            run.cells[item.checked.position] = cell.model_copy(update={"promoted": {**cell.promoted, **published}})
        recorded.save(run, path, f"{promotion.cell_id}: {', '.join(published)} point at {promotion.digest}")


def promote(runs: Mapping[Path, RunResults], matrix: Matrix, url: str, keys: Sequence[PublicKey],
            env: Mapping[str, str], *, only: Sequence[str] = (), repair: bool = False,
            wait_s: float = writer_lock.DEFAULT_WAIT_S, log_file: Path | None = None) -> int:
    """Promote every cell whose records name a staged digest; return how many got good tags."""
    cfg = matrix.spec.tags
    dest = f"{url}/{cfg.repository}"
    evidence = gather(runs, matrix, keys, only)
    if not evidence:
        return 0
    weighed = {cell_id: weigh(cell_id, items, matrix, cfg) for cell_id, items in evidence.items()}
    for cell_id, outcome in weighed.items():
        if isinstance(outcome, str):
            log.step(cell_id, "promote", "skipped", detail=outcome)
    chosen = [p for p in weighed.values() if isinstance(p, Promotion)]
    if not chosen:
        return 0
    with writer_lock.sole_writer(dest, env, wait_s=wait_s):
        claims = []
        for promotion in chosen:    # every check before the first write
            check_subject(promotion, env, log_file=log_file)
            claim = promotion.claim()
            claims.append((claim, platformtags.claimed_entry(claim, promotion.source, env, log_file=log_file)))
        plans = platformtags.plan(claims, matrix, dest, env, keys, repair=repair, log_file=log_file)
        pinned = {p.cell_id: release(p, dest, env, keys, log_file=log_file) for p in chosen}
        served = {t.tag: platformtags.write(t, dest, env, log_file=log_file) for t in plans}
        for promotion in chosen:
            record(runs, promotion, {pinned[promotion.cell_id]: promotion.digest,
                                     **{f"{dest}:{t}": served[t] for t in promotion.tags}})
            detail = ", ".join(promotion.tags) + (f" (arch-free tag withheld: {promotion.withheld})"
                                                   if promotion.withheld else "")
            log.step(promotion.cell_id, "promote", "passed", detail=f"{detail} -> {promotion.digest}")
    return len(chosen)

