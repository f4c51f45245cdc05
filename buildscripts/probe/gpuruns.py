"""Which of a library's GPU code a GPU of an arch would run (the driver's own order of choice): its own SASS,
else SASS of an older minor of its family, else PTX JIT-compiled at start, else nothing.

Apart from fatbin.py on purpose: fatbin.py is copied into every image (the fatbin pruner reads with it), so a
change there rebuilds every layer; this rule is the audit's alone.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple, Tuple

from .fatbin import Entry, parse_arch, runs_on

# What a GPU of an arch would run from a library's code, best first (the driver's own order of choice).
EXACT, OLDER_MINOR, PTX_JIT, NOTHING = "exact-sass", "older-minor-sass", "ptx-jit", "nothing"
RUNS_WORDS = {EXACT: "its own SASS", OLDER_MINOR: "SASS of an older minor of its family",
              PTX_JIT: "PTX, JIT-compiled at start", NOTHING: "nothing"}


class Runs(NamedTuple):
    code: str    # EXACT, OLDER_MINOR, PTX_JIT or NOTHING
    uses: str    # the entry it would run, e.g. "sm_120" or "compute_90"; "" for NOTHING
    present: Tuple[str, ...]   # every arch the code carries (what NOTHING is said against)

    def says(self) -> str:
        """`sm_120 SASS (older minor)`, `compute_90 PTX (JIT at start)`, `nothing (has sm_120a)`."""
        if self.code == EXACT:
            return f"{self.uses} SASS"
        if self.code == OLDER_MINOR:
            return f"{self.uses} SASS (older minor)"
        if self.code == PTX_JIT:
            return f"{self.uses} PTX (JIT at start)"
        return f"nothing (has {', '.join(self.present)})" if self.present else "nothing"


def what_runs(entries: Iterable[Entry], target: str) -> Runs:
    """Which of `entries` a GPU of `target` would run: its own arch's SASS; else the newest SASS of an older
    minor of its major (plain `sm_120` or family `sm_120f` on sm_121; never `sm_120a`, which runs on sm_120
    alone); else PTX it can JIT-compile at start (the newest); else nothing."""
    entries = list(entries)
    number, _suffix = parse_arch(target)
    present = tuple(sorted({e.name for e in entries if e.kind in ("sass", "ptx")},
                           key=lambda n: (int(re.sub(r"\D", "", n) or 0), n)))
    sass = [e for e in entries if e.kind == "sass" and runs_on(e, target)]
    exact = [e for e in sass if e.arch == number]
    if exact:
        return Runs(EXACT, min(e.name for e in exact), present)
    if sass:
        best = max(e.arch for e in sass)
        return Runs(OLDER_MINOR, min(e.name for e in sass if e.arch == best), present)
    ptx = [e for e in entries if e.kind == "ptx" and runs_on(e, target)]
    if ptx:
        best = max(e.arch for e in ptx)
        return Runs(PTX_JIT, min(e.name for e in ptx if e.arch == best), present)
    return Runs(NOTHING, "", present)
