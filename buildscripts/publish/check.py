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
`--write-policies` writes the cosign policies (trust/policy.py) of matrix.yaml's archs under policies/.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import log, platform_reading
from ..errors import ConfigError, NotVerified
from ..matrix import load
from ..matrix.spellings import arch_problem
from ..refs import FORMS, reference_problem
from ..trust import keys, policy, seen, sources
from ..trust.freshness import stamp
from ..trust.verdicts import Judgement
from ..workspace import Workspace, path_argument

STATE_HELP = (f"where the verdicts seen per digest are kept, to refuse a rollback (default: ${seen.STATE_ENV}, else "
              "$XDG_STATE_HOME/sglang-images, else ~/.local/state/sglang-images)")
HINT = ("use an image whose good tag was promoted after a GPU verification, or pass --key with the public key "
        "of a verifier you trust")


def parse(argv: Sequence[str]) -> argparse.Namespace:
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
    ap.add_argument("--trust-key", "--key", dest="key", action="append", default=[], type=path_argument,
                    metavar="PUB", help="a public key (PEM) to trust besides the project's keys/*.pub (repeatable)")
    ap.add_argument("--json", action="store_true", help="the findings as JSON on stdout")
    ap.add_argument("--state-dir", type=path_argument, metavar="DIR", help=STATE_HELP)
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
    if a.image and not a.image.startswith(sources.ARCHIVE):
        problem = reference_problem(a.image)
        if problem:
            msg = f"IMAGE {problem}"
            raise ConfigError(msg, hint=f"give an image as {FORMS}, or oci-archive:PATH")
    return a


def show(source: sources.Source, judgement: Judgement, *, to_stderr: bool) -> None:
    console = log.err if to_stderr else log.console
    console.print(f"[bold]{escape(source.shown)}[/]")
    if source.seen:
        console.print(f"[dim]{escape(source.seen)}[/]")
    if judgement.archs:
        table = Table("arch", "verdict", "signed by", "detail (the newest verdict decides)")
        for finding in judgement.archs:
            mark = "[green]✓ verified[/]" if finding.verified else "[red]✕ not verified[/]"
            signers = sorted({f"{v.signer.keyid[:16]} ({Path(v.signer.name).name})" for v in finding.verdicts})
            urls = sorted({v.url for v in finding.verdicts if v.url})
            table.add_row(escape(finding.arch), mark, escape(", ".join(signers) or "—"),
                          escape("\n".join([finding.detail, *urls])))
        console.print(table)
    else:
        console.print("[red]✕[/] no valid signed verdict for this digest")
    for reason in dict.fromkeys(judgement.ignored):
        console.print(f"[yellow]ignored:[/] {escape(reason)}")


def as_json(source: sources.Source, judgement: Judgement) -> dict[str, Any]:
    def used(finding: Any) -> dict[str, Any]:
        newest = finding.verdicts[0] if finding.verdicts else None
        return {"signed_at": stamp(newest.signed_at) if newest and newest.signed_at else None,
                "older_verdicts": finding.older}

    return {"image": source.shown, "digest": judgement.digest, "platform": source.platform, "index": source.index,
            "verified": judgement.verified, "seen": source.seen,
            "archs": {f.arch: {"verified": f.verified, "detail": f.detail,
                               "results": sorted({v.result for v in f.verdicts}),
                               "signers": sorted({v.signer.keyid for v in f.verdicts}),
                               "urls": sorted({v.url for v in f.verdicts if v.url}), **used(f)}
                      for f in judgement.archs},
            "ignored": list(dict.fromkeys(judgement.ignored))}


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None, *,
         now: datetime | None = None) -> int:
    """`now`: the clock verdicts are placed by (trust/freshness.py), this machine's unless a test gives one."""
    ws, env = ws or Workspace.at(), env or {}
    a = parse(argv)
    if a.write_policies:
        for path in policy.write(ws.root, load(ws.matrix).spec.all_archs):
            log.info(f"wrote {path.relative_to(ws.root)}")
        return 0
    judged = sources.check(a.image, keys.trusted(ws.root, env, a.key), env, a.arch, now=now,
                           history=seen.History.at(env, a.state_dir))
    for source, judgement in judged:
        show(source, judgement, to_stderr=a.json)
    if a.json:
        print(json.dumps([as_json(s, j) for s, j in judged], indent=1))
    verified, line = sources.summary(a.image, judged, a.platform)
    if not verified:
        raise NotVerified(line, hint=HINT)
    (log.err if a.json else log.console).print(f"[green]✓[/] {escape(line)}")   # stdout is the JSON's alone
    return 0
