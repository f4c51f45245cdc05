"""`nox -s check -- IMAGE|TAG|oci-archive:PATH [--arch sm_120a] [--platform linux/arm64] [--key PUB] [--json]`:
was this very image verified on a GPU? Anyone can run it, offline but for reading the registry.

The manifests first (trust/sources.py: what the registry serves for the tag now, what the local engine
recorded, or the manifest an archive holds; an index leads to each platform's manifest), then the verdicts
attached to each, checked with the project's public keys (keys/*.pub) and any --key: only a dated Statement a
trusted key signed, for that platform manifest, counts, and per arch the newest decides (to the second; one
dated more than 5 min after this machine's clock counts for nothing and leaves its arch not verified).
Exit 0 only when the asked arch (default: every arch the valid verdicts name) is verified for the asked
platform (an index's entry for --platform, default this machine's); 18 when it is not; 19 when the check could
not be made (a registry that does not answer, cosign or skopeo missing, an unreadable archive).
What it saw of each digest is kept in a state folder (--state-dir, trust/seen.py): a registry that later serves
an older snapshot of the verdicts, or fewer verdicts than were seen, is refused (trust/rollback.py).
Each manifest's provenance (trust/described.py) is shown, verified or not, with its cell and lock digests;
`--sbom` also verifies its SBOM (signed by a trusted key, for this digest) and lists it, and fails (18) without one.
`--write-policies` writes the cosign policies (trust/policy.py) of matrix.yaml's archs under policies/.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import arguments, log
from ..errors import ConfigError, NotVerified
from ..workspace import Workspace

if TYPE_CHECKING:
    from datetime import datetime

    from ..trust import described, sources
    from ..trust.keys import PublicKey

ABOUT = "was this very image verified on a GPU? its signed verdicts, checked"
HINT = ("use an image whose good tag was promoted after a GPU verification, or pass --key with the public key "
        "of a verifier you trust")


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    image: str = ""                         # IMAGE|TAG|oci-archive:PATH (none only with write_policies)
    archs: tuple[str, ...] = ()             # that must be verified (default: every arch the verdicts name)
    platform: str | None = None             # of an index (default: this machine's, as Docker pulls)
    write_policies: bool = False
    keys: tuple[Path, ...] = ()             # trusted besides the project's keys/*.pub
    json: bool = False
    sbom: bool = False                      # the SBOM must be attached and verified too (exit 18 when it is not)
    state_dir: Path | None = None           # where what was seen per digest is kept (trust/seen.py)
    now: datetime | None = None             # the clock verdicts are placed by (trust/freshness.py): this machine's


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from .. import platform_reading
    from ..matrix.spellings import arch_problem
    from ..refs import FORMS, reference_problem
    from ..trust.seen import STATE_ENV
    from ..trust.sources import ARCHIVE

    ap = argparse.ArgumentParser(prog="nox -s check --", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("image", metavar="IMAGE|TAG|oci-archive:PATH", nargs="?",
                    help="a registry reference, a local engine image, or an archive written by `nox -s export`")
    ap.add_argument("--arch", action="append", default=[],
                    help="the GPU arch that must be verified, e.g. sm_120a (default: every arch the verdicts name)")
    ap.add_argument("--platform", metavar="OS/ARCH[/VARIANT]",
                    help="the platform of an index that must be verified (default: this machine's, as Docker pulls)")
    ap.add_argument("--write-policies", action="store_true",
                    help="write the cosign policies of matrix.yaml's archs under policies/ and exit")
    # --trust-key, as every command that weighs signatures spells it; --key is the spelling the docs first gave.
    ap.add_argument("--trust-key", "--key", dest="key", action="append", default=[], type=arguments.path_argument,
                    metavar="PUB", help="a public key (PEM) to trust besides the project's keys/*.pub (repeatable)")
    ap.add_argument("--json", action="store_true", help="the findings as JSON on stdout")
    ap.add_argument("--sbom", action="store_true",
                    help="verify the image's signed SBOM too and list it (not verified without one)")
    ap.add_argument("--state-dir", type=arguments.path_argument, metavar="DIR",
                    help=(f"where the verdicts seen per digest are kept, to refuse a rollback (default: "
                          f"${STATE_ENV}, else $XDG_STATE_HOME/sglang-images, else ~/.local/state/sglang-images)"))
    a = ap.parse_args(list(argv))
    if a.image is None and not a.write_policies:
        ap.error("IMAGE|TAG|oci-archive:PATH is required")
    problem = a.platform and platform_reading.problem(a.platform)
    if problem:
        msg = f"--platform: {problem}"
        raise ConfigError(msg, hint="e.g. --platform linux/amd64 or --platform linux/arm64/v8")
    for arch in a.arch:
        problem = arch_problem(arch)
        if problem:
            msg = f"--arch: {problem}"
            raise ConfigError(msg, hint="e.g. --arch sm_120a")
    if a.image and not a.image.startswith(ARCHIVE):
        problem = reference_problem(a.image)
        if problem:
            msg = f"IMAGE {problem}"
            raise ConfigError(msg, hint=f"give an image as {FORMS}, or oci-archive:PATH")
    return Options(ws=ws, env=env, image=a.image or "", archs=tuple(a.arch), platform=a.platform,
                   write_policies=a.write_policies, keys=tuple(a.key), json=a.json, sbom=a.sbom,
                   state_dir=a.state_dir)


def run(options: Options) -> int:
    from rich.markup import escape

    from ..matrix import load
    from ..publish import described_view
    from ..publish.check_view import as_json, show
    from ..trust import keys, policy, provenance_policy, sources
    from ..trust.seen import History

    ws, env = options.ws, options.env
    if options.write_policies:
        for path in [*policy.write(ws.root, load(ws.matrix).spec.all_archs), provenance_policy.write(ws.root)]:
            log.info(f"wrote {path.relative_to(ws.root)}")
        return 0
    trusted = keys.trusted(ws.root, env, options.keys)
    judged = sources.check(options.image, trusted, env, list(options.archs),
                           now=options.now, history=History.at(env, options.state_dir))
    about = {s.digest: _described(s, trusted, sbom=options.sbom) for s, _ in judged}
    for source, judgement in judged:
        show(source, judgement, to_stderr=options.json)
        described_view.show_provenance(log.err if options.json else log.console, about[source.digest][0])
        if options.sbom:
            described_view.show_sbom(log.err if options.json else log.console, about[source.digest][1])
    if options.json:
        print(json.dumps([{**as_json(s, j), **described_view.as_json(*about[s.digest])} for s, j in judged],
                         indent=1))
    if options.sbom:
        asked = [(s.digest, about[s.digest][1]) for group in sources.choose(judged, options.platform)[0]
                 for s, _ in group]
        problem = described_view.sbom_problem(asked)
        if problem:
            raise NotVerified(problem, hint="an SBOM counts only when a key you trust signed it for this very "
                                            "digest; check the image's registry reference, or pass --trust-key")
    verified, line = sources.summary(options.image, judged, options.platform)
    if not verified:
        raise NotVerified(line, hint=HINT)
    (log.err if options.json else log.console).print(f"[green]✓[/] {escape(line)}")   # stdout is the JSON's alone
    return 0


def _described(source: sources.Source, trusted: Sequence[PublicKey], *,
               sbom: bool) -> tuple[described.Found, described.Found | None]:
    """The provenance of `source`'s digest, and its SBOM when asked for (trust/described.py)."""
    from ..trust import described as about

    provenance = about.find(source.described, about.PROVENANCE, source.digest, trusted)
    return provenance, (about.find(source.described, about.SBOM, source.digest, trusted) if sbom else None)
