"""`nox -s check -- IMAGE|TAG|oci-archive:PATH [--arch sm_120a] [--key PUB] [--json]`: was this very image
verified on a GPU? Anyone can run it, offline but for reading the registry.

The digest first (trust/sources.py: what the registry serves for the tag now, what the local engine recorded,
or the tested digest an archive is shown to hold), then the verdicts attached to that digest, each checked
with the project's public keys (keys/*.pub) and any --key: only a Statement a trusted key signed, for this
digest, counts. Exit 0 only when the asked arch (default: every arch the valid verdicts name) is verified;
18 when it is not; 19 when the check could not be made (registry unreachable, cosign or skopeo missing, an
unreadable archive).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import log
from ..errors import ConfigError, NotVerified
from ..matrix.schema import arch_problem
from ..refs import FORMS, reference_problem
from ..trust import keys, sources
from ..trust.verdicts import Judgement
from ..workspace import Workspace, path_argument

HINT = ("use an image whose good tag was promoted after a GPU verification, or pass --key with the public key "
        "of a verifier you trust")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="nox -s check --", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("image", metavar="IMAGE|TAG|oci-archive:PATH",
                    help="a registry reference, a local engine image, or an archive written by `nox -s export`")
    ap.add_argument("--arch", action="append", default=[],
                    help="the GPU arch that must be verified, e.g. sm_120a (default: every arch the verdicts name)")
    # --trust-key, as every command that weighs signatures spells it; --key is the spelling the docs first gave.
    ap.add_argument("--trust-key", "--key", dest="key", action="append", default=[], type=path_argument,
                    metavar="PUB", help="a public key (PEM) to trust besides the project's keys/*.pub (repeatable)")
    ap.add_argument("--json", action="store_true", help="the findings as JSON on stdout")
    a = ap.parse_args(list(argv))
    for arch in a.arch:
        problem = arch_problem(arch)
        if problem:
            msg = f"--arch: {problem}"
            raise ConfigError(msg, hint="e.g. --arch sm_120a")
    if not a.image.startswith(sources.ARCHIVE):
        problem = reference_problem(a.image)
        if problem:
            msg = f"IMAGE {problem}"
            raise ConfigError(msg, hint=f"give an image as {FORMS}, or oci-archive:PATH")
    return a


def show(source: sources.Source, judgement: Judgement, *, to_stderr: bool) -> None:
    console = log.err if to_stderr else log.console
    console.print(f"[bold]{escape(source.shown)}[/]")
    if judgement.archs:
        table = Table("arch", "verdict", "signed by", "detail")
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
    return {"image": source.shown, "digest": judgement.digest, "verified": judgement.verified,
            "archs": {f.arch: {"verified": f.verified, "detail": f.detail,
                               "results": sorted({v.result for v in f.verdicts}),
                               "signers": sorted({v.signer.keyid for v in f.verdicts}),
                               "urls": sorted({v.url for v in f.verdicts if v.url})} for f in judgement.archs},
            "ignored": list(dict.fromkeys(judgement.ignored))}


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws, env = ws or Workspace.at(), env or {}
    a = parse(argv)
    judged = sources.check(a.image, keys.trusted(ws.root, env, a.key), env, a.arch)
    for source, judgement in judged:
        show(source, judgement, to_stderr=a.json)
    if a.json:
        print(json.dumps([as_json(s, j) for s, j in judged], indent=1))
    verified, line = sources.summary(a.image, judged)
    if not verified:
        raise NotVerified(line, hint=HINT)
    (log.err if a.json else log.console).print(f"[green]✓[/] {escape(line)}")   # stdout is the JSON's alone
    return 0
