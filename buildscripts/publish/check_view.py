"""What `nox -s check` (commands/check.py) shows of the signed verdicts it checked: per source (a registry's
manifest, the local engine's, an archive's), each arch's verdict with who signed it, on screen or as JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import log
from ..trust import sources
from ..trust.freshness import stamp
from ..trust.verdicts import Judgement


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
