"""Signed verdicts: one in-toto test-result Statement per cell and GPU arch, in a DSSE envelope.

The verify side signs (`sign_verdicts`): right after the run judged a cell it verified by digest, with the
verifier's key, and writes the envelopes beside the results (runs/RUN/attestations/CELL/ARCH.json); it uploads
nothing, so a GPU runner needs no write access to any registry. The promote job attaches them to the image
digest (`attach_verdicts`: one writer, cosign's `sha256-<hex>.att` tag; a verdict already there is not added
again), and only those that a trusted key signed for that very digest. Anyone reads them back with
`open_verdict` (what `nox -s check` does) or with `cosign verify-attestation --key`: the envelope is the one
cosign writes (DER signatures, a keyid cosign ignores).

An arch gets a Statement only when this run's GPU stages ran on it: absence says "not tested here", never
"failed". What was tested and failed is signed too, as FAILED. A Statement's subject is the platform manifest
that ran (for an index, the verifier's platform's), and it says when it was signed: per digest and arch the
newest verdict decides (a re-run that passed after a failure, or failed after a pass), to the second and
bounded by this machine's clock (freshness.py); one with no signing time (an older verifier's) cannot be
placed and counts for nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import log, strictjson
from ..errors import ConfigError, NotVerified
from ..registry import manifests, references
from ..results import CPU_STAGES, GPU_STAGES, REQUIRED_GPU_STAGES, CellResult, Verdict, family
from ..workspace import checked_name
from . import cosign, dsse, freshness, keys, statement, verdict_form
from .freshness import age_text, parse_time, stamp
from .keys import PublicKey

SHA256 = re.compile(r"sha256:[0-9a-f]{64}")

FOLDER = "attestations"                      # under a run folder: FOLDER/CELL/ARCH.json
GOOD_RESULTS = ("PASSED", "WARNED")


@dataclass(frozen=True)
class SignedVerdict:
    """One Statement whose signature a trusted key made, read for what it vouches."""

    arch: str | None                 # the GPU arch its GPU tests name (None: it names none, or several)
    result: str                      # PASSED | WARNED | FAILED (as signed)
    digests: tuple[str, ...]         # its subjects, `sha256:…`
    subjects: tuple[str, ...]        # the repositories it names (informative: the digest is what counts)
    passed: tuple[str, ...]
    warned: tuple[str, ...]
    failed: tuple[str, ...]
    signer: PublicKey
    url: str | None
    signed_at: datetime | None = None  # when the verifier signed it (None: an older verifier's, undated)
    index: str | None = None           # the index the verified platform manifest was chosen from
    cell: str | None = None            # the cell id it was judged as (None: an older verifier's, naming none)
    axes: tuple[tuple[str, str], ...] = ()   # that cell's coordinates, as signed

    def why_not(self) -> str | None:
        """Why this verdict does not show its arch verified (None: it does)."""
        if self.arch is None:
            return "it names no single GPU arch"
        if self.result not in GOOD_RESULTS:
            return f"its result is {self.result}" + (f" ({', '.join(self.failed)})" if self.failed else "")
        if self.failed:
            return f"it lists failed tests ({', '.join(self.failed)})"
        # a stage added later (nccl-allreduce) is absent from older verdicts; when present, it must have passed
        missing = [s for s in REQUIRED_GPU_STAGES if f"{s}@{self.arch}" not in self.passed + self.warned]
        if missing:
            return f"GPU stages did not pass on {self.arch}: {', '.join(missing)}"
        # as the judge (results/judge.py) claims nothing for a cell whose CPU stages did not all pass, here or
        # carried from the build runner: a GPU-only run's verdict shows what ran, never an arch verified
        missing = [s for s in CPU_STAGES if f"{s}@cpu" not in self.passed + self.warned]
        if missing:
            return f"CPU stages did not pass, here or carried: {', '.join(missing)}"
        return None

    def names_arch(self, arch: str) -> bool:
        return self.arch is not None and arch_matches(arch, self.arch)

    def signed_text(self, now: datetime) -> str:
        """`signed 2026-12-01T21:05:09Z (3 h ago)`: which verdict was used, and how old it is."""
        if self.signed_at is None:
            return "undated"
        return f"signed {stamp(self.signed_at)} ({age_text((now - self.signed_at).total_seconds())})"


def arch_matches(asked: str, named: str) -> bool:
    """Whether a verdict naming `named` answers for `asked`: a target with its suffix (`sm_90a`, `sm_100f`) asks
    for that very spelling, as the cosign policy of that target does; a family (`sm_90`, as `check --arch` also
    takes, or `sm90` as tags spell it) for any target of it."""
    if verdict_form.arch_problem(asked) is None and asked.endswith(("a", "f")):
        return named == asked
    return family(named) == family(asked)


def split_digest_ref(ref: str) -> tuple[str, str]:
    """`REPO@sha256:HEX` -> (REPO, `sha256:HEX`); a ConfigError for anything else (a tag can move)."""
    found = references.by_digest(ref.strip())
    if found is None or not SHA256.fullmatch(found[1]):   # statements name sha256 digests only
        msg = f"{ref!r} is not REPOSITORY@sha256:DIGEST"
        raise ConfigError(msg, hint="a verdict belongs to one digest: name the image by it, not by a tag")
    return found


def run_url(env: Mapping[str, str]) -> str | None:
    """The CI run that verified (GitHub Actions' own variables), when there is one."""
    server, repo, run = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if not (server and repo and run):
        return None
    attempt = env.get("GITHUB_RUN_ATTEMPT")
    return f"{server.rstrip('/')}/{repo}/actions/runs/{run}" + (f"/attempts/{attempt}" if attempt else "")


def configuration(cell: CellResult, *, matrix: Path, probe: str) -> dict[str, str]:
    """The inputs of the verification, name -> sha256: matrix.yaml, the cell's lockfiles, the probe."""
    found = {matrix.name: hashlib.sha256(matrix.read_bytes()).hexdigest(), "buildscripts/probe": probe}
    found.update(cell.locks)
    return found


def tested_archs(cell: CellResult) -> list[str]:
    """The cell's target archs on which this record's GPU stages ran (passed or not)."""
    ran = {family(s.arch) for s in cell.stages if s.name in GPU_STAGES and s.arch}
    return [arch for arch in cell.targets if family(arch) in ran]


def verdict_files(run_dir: Path, cell_id: str) -> list[Path]:
    """The envelopes a run wrote for one cell (what the promote job attaches)."""
    return sorted((run_dir / FOLDER / checked_name(cell_id, "cell id")).glob("*.json"))


def sign_verdicts(cell: CellResult, run_dir: Path, *, image: str, matrix: Path, probe: str,
                  env: Mapping[str, str]) -> list[Path]:
    """Sign one Statement per arch the cell's GPU stages ran on, for `image` (REPO@sha256:…, the digest that
    was verified: for an index, the record's platform manifest is the subject), with this verifier's key; write
    them under run_dir/attestations/CELL/; return the files."""
    repository, digest = split_digest_ref(image)
    index = None
    if cell.image.platform_digest and cell.image.digest == digest:   # handed an index: the platform that ran
        index, digest = digest, cell.image.platform_digest
    archs = tested_archs(cell)
    if not archs:
        log.info(f"{cell.cell_id}: no GPU stage ran on a target arch: no verdict to sign")
        return []
    if cell.verdict is Verdict.BUILT:   # the judge claims nothing (a GPU-only run): a verdict would be attached, read
        log.warn(f"{cell.cell_id}: no verdict signed: {cell.verdict_reason}; run every CPU stage, or give the build "
                 "runner's record of this digest with --cpu-record")
        return []
    key = keys.signing_key(env)
    config, url = configuration(cell, matrix=matrix, probe=probe), run_url(env)
    folder = run_dir / FOLDER / checked_name(cell.cell_id, "cell id")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for arch in archs:
        document = statement.statement(cell, arch, subject=repository, digest=digest, configuration=config, url=url,
                                       signed_at=stamp(datetime.now(UTC)), index=index)
        payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        path = folder / f"{checked_name(arch, 'arch')}.json"
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps(dsse.sign(payload, dsse.IN_TOTO, key), indent=1) + "\n")
        scratch.replace(path)   # a reader sees the old envelope or the new one, never half of one
        written.append(path)
    log.info(f"{cell.cell_id}: signed verdicts for {', '.join(archs)} of {digest[:19]} with key "
             f"{key.public.keyid[:16]} ({folder})")
    return written


class MalformedVerdict(NotVerified):
    """A payload a trusted key signed that is not in the one form of a verdict (verdict_form): it counts
    against the digests it names (`digests`; none when its subject could not be read: against any)."""

    def __init__(self, message: str, *, hint: str | None = None, digests: Sequence[str] = ()) -> None:
        super().__init__(message, hint=hint)
        self.digests = tuple(digests)


def open_verdict(envelope: Any, trusted: Sequence[PublicKey], *, where: str = "the attestation") -> SignedVerdict:
    """What a signed Statement vouches for; NotVerified (naming `where`) when no trusted key signed it or it
    is no test-result Statement, MalformedVerdict when a trusted key signed one not in the one form."""
    payload, signer = dsse.trusted_statement(envelope, trusted, where)
    try:
        document = verdict_form.read(payload)
    except verdict_form.OtherStatement as exc:
        msg = f"{where}: signed, but not an in-toto test-result Statement"
        raise NotVerified(msg, hint=str(exc)) from None
    except verdict_form.Malformed as exc:
        msg = f"{where}: a trusted key signed a malformed verdict: {exc}"
        raise MalformedVerdict(msg, hint="no verifier of this project writes one: it counts for no arch, and "
                                         "against the digest it names", digests=exc.digests) from None
    predicate = document["predicate"]
    subjects = document["subject"]
    axes = predicate.get("axes", {})
    return SignedVerdict(
        arch=predicate["arch"], result=predicate["result"],
        digests=tuple(verdict_form.subject_digests(subjects)), subjects=tuple(s.get("name", "") for s in subjects),
        passed=tuple(predicate["passedTests"]), warned=tuple(predicate["warnedTests"]),
        failed=tuple(predicate["failedTests"]), signer=signer, url=predicate.get("url"),
        signed_at=parse_time(predicate.get("signedAt")), index=predicate.get("imageIndex"),
        cell=predicate.get("cell"), axes=tuple(sorted(axes.items())))


def read_envelope(path: Path) -> Any:
    try:
        return strictjson.loads(path.read_bytes(), fields=dsse.FIELDS, free=frozenset())
    except (OSError, ValueError) as exc:   # strictjson.Ambiguous is a ValueError
        msg = f"cannot read the verdict {path}: {exc}"
        raise NotVerified(msg, hint="it was damaged or is no signed verdict: verify the image again") from None


def same_envelope(a: Any, b: Any) -> bool:
    """Two envelopes of the same payload and signatures (however their JSON was spaced)."""
    def key(env: Any) -> tuple[Any, ...]:
        if not isinstance(env, Mapping):
            return (None,)
        sigs = sorted(str(s.get("sig")) for s in env.get("signatures") or [] if isinstance(s, Mapping))
        return env.get("payloadType"), env.get("payload"), tuple(sigs)
    return key(a) == key(b)


def attach_verdicts(files: Sequence[Path], ref: str, *, trusted: Sequence[PublicKey],
                    env: Mapping[str, str] | None = None, log_file: Path | None = None) -> list[Path]:
    """Attach the verdicts in `files` to the digest each names, `ref` (REPO@sha256:…) or, when `ref` is an
    index, the platform manifest of it that ran; with cosign; return those newly attached.

    Every file is checked first (signed by a trusted key, a Statement for this digest or one of its platforms):
    one that is not stops the promotion before anything is attached. One already attached is not attached again."""
    repository, digest = split_digest_ref(ref)
    env = env or {}
    children: list[str] | None = None
    targets: dict[str, list[tuple[Path, Any]]] = {}
    for path in files:
        envelope = read_envelope(path)
        verdict = open_verdict(envelope, trusted, where=str(path))
        if digest in verdict.digests:
            target = digest
        else:
            if children is None:
                top = manifests.lookup(ref, env, log=log_file)
                children = top.children() if top is not None and top.is_index else []
            target = next((d for d in verdict.digests if d in children), "")
        if not target:
            msg = (f"{path} is a verdict for {', '.join(verdict.digests) or 'no digest'}, not for {ref} "
                   "(nor for a platform of it)")
            raise NotVerified(msg, hint="a verdict is attached only to the digest that was verified")
        targets.setdefault(target, []).append((path, envelope))
    attached = []
    for target, envelopes in targets.items():
        attached += _attach_to(f"{repository}@{target}", envelopes, env, log_file)
    return attached


def _attach_to(ref: str, envelopes: Sequence[tuple[Path, Any]], env: Mapping[str, str],
               log_file: Path | None) -> list[Path]:
    present = cosign.download(ref, env, log_file=log_file)
    attached = []
    for path, envelope in envelopes:
        if any(same_envelope(envelope, p) for p in present):
            log.info(f"{path.name}: already attached to {ref}")
            continue
        cosign.attach(path, ref, env, log_file=log_file)
        attached.append(path)
    if attached:
        now = cosign.download(ref, env, log_file=log_file)
        lost = [p for p, e in envelopes if not any(same_envelope(e, n) for n in now)]
        if lost:
            msg = f"{ref}: the registry does not return {', '.join(p.name for p in lost)} after attaching it"
            raise NotVerified(msg, hint="another writer replaced the attestations meanwhile; promote again, alone")
    return attached


@dataclass(frozen=True)
class ArchFinding:
    """What the valid verdicts for one digest say of one arch: the newest decides (`used`)."""

    arch: str
    verified: bool
    detail: str
    verdicts: tuple[SignedVerdict, ...]      # the newest (several when signed in one second), or those dated ahead
    older: int = 0                           # valid verdicts of this arch that a newer one outdates


@dataclass(frozen=True)
class Judgement:
    digest: str
    archs: tuple[ArchFinding, ...]
    ignored: tuple[str, ...]          # why each envelope that does not count was left out

    @property
    def verified(self) -> bool:
        return bool(self.archs) and all(a.verified for a in self.archs)


def _counted(envelopes: Sequence[Any], digest: str, trusted: Sequence[PublicKey],
             now: datetime) -> tuple[list[SignedVerdict], list[SignedVerdict], list[str], list[str]]:
    """The verdicts that count for `digest`, those dated ahead of `now` (freshness.py: they count for nothing
    and keep their arch from being verified), why each other envelope does not count, and why this digest cannot
    be verified at all (a trusted key signed a malformed verdict for it)."""
    valid: list[SignedVerdict] = []
    unplaced: list[SignedVerdict] = []
    ignored: list[str] = []
    against: list[str] = []
    for number, envelope in enumerate(envelopes, 1):
        try:
            verdict = open_verdict(envelope, trusted, where=f"attestation {number}")
        except MalformedVerdict as exc:
            ignored.append(exc.message)
            if not exc.digests or digest in exc.digests:
                against.append(exc.message)
            continue
        except NotVerified as exc:
            ignored.append(exc.message)
            continue
        if digest not in verdict.digests:
            ignored.append(f"attestation {number}: a verdict for {', '.join(verdict.digests) or 'no digest'}, "
                           f"not for {digest}")
        elif verdict.arch is None:
            ignored.append(f"attestation {number}: {verdict.why_not()}")
        elif verdict.signed_at is None:
            ignored.append(f"attestation {number}: a verdict with no signing time (an older verifier's): it "
                           "cannot be told from a newer one; verify the image again")
        elif (why := freshness.ahead(verdict.signed_at, now)) is not None:
            ignored.append(f"attestation {number} ({verdict.arch}, {verdict.result}): {why}; check the verifier's "
                           "clock and verify the image again")
            unplaced.append(verdict)
        else:
            valid.append(verdict)
    return valid, unplaced, ignored, against


def judge(envelopes: Sequence[Any], digest: str, trusted: Sequence[PublicKey], archs: Sequence[str] = (), *,
          now: datetime | None = None) -> Judgement:
    """Which of `archs` (default: every arch a valid verdict names) the verdicts show verified for `digest`.

    Only a dated verdict a trusted key signed, for this very digest, in the one form (verdict_form), counts; the
    others are listed as ignored, and a malformed one a trusted key signed for it leaves no arch verified.
    Per arch the newest counts, to the second (a FAILED and a PASSED signed in one second: not verified); a
    verdict dated more than freshness.SKEW after `now` (default: this machine's clock) counts for nothing and
    leaves its arch not verified. What the registry does not show cannot be weighed: a writer of the registry
    who removes the newer verdict leaves the older one to decide (docs/trust.md)."""
    now = now or datetime.now(UTC)
    valid, unplaced, ignored, against = _counted(envelopes, digest, trusted, now)
    asked = list(archs) or sorted({v.arch for v in valid + unplaced if v.arch}, key=family)
    findings = [_finding(arch, valid, unplaced, now) for arch in asked]
    if against:   # cannot be placed among the others, so nothing of this digest is shown verified beside it
        findings = [ArchFinding(f.arch, False, f"{against[0]} (so no arch of this digest is verified); {f.detail}",
                                f.verdicts, f.older) for f in findings]
    return Judgement(digest, tuple(findings), tuple(ignored))


def _finding(arch: str, valid: Sequence[SignedVerdict], unplaced: Sequence[SignedVerdict],
             now: datetime) -> ArchFinding:
    """What `valid` says of `arch`: the verdicts of its newest second decide, unless one that cannot be placed
    names it too."""
    group = [v for v in valid if v.names_arch(arch)]
    ahead = [v for v in unplaced if v.names_arch(arch)]
    if ahead:
        when = max(stamp(v.signed_at) for v in ahead if v.signed_at)
        return ArchFinding(arch, False, f"a verdict for {arch} is dated {when}, more than {freshness.SKEW_TEXT} "
                                        "ahead of this machine's clock: it may be newer than any other, so none "
                                        "decides", tuple(ahead), len(group))
    if not group:
        named = sorted({v.arch for v in valid if v.arch})
        also = f" (valid verdicts name {', '.join(named)})" if named else ""
        return ArchFinding(arch, False, f"no valid signed verdict for {arch}{also}", ())
    newest = max(freshness.second_of(v.signed_at) for v in group if v.signed_at)
    used = tuple(v for v in group if v.signed_at and freshness.second_of(v.signed_at) == newest)
    reasons = list(dict.fromkeys(why for why in (v.why_not() for v in used) if why))
    said = "; ".join(reasons) if reasons else f"{', '.join(sorted({v.result for v in used}))}: every CPU " \
                                              f"stage and every GPU stage on {arch} passed"
    tie = f" ({len(used)} verdicts signed in one second: all must pass)" if len(used) > 1 else ""
    older = len(group) - len(used)
    also = f", outdating {older} older verdict{'s' if older > 1 else ''}" if older else ""
    return ArchFinding(arch, not reasons, f"{said}{tie}; {used[0].signed_text(now)}{also}", used, older)
