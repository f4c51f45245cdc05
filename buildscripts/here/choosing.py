"""Which image fits this machine, and which of those was verified here.

An image fits when it holds a manifest of this machine's platform (linux/amd64, linux/arm64: an H200 and a GH200
are both sm_90, and take different images) and one of its cell's targets is of this GPU's arch family (`sm_120a`
for an sm_120 GPU). The fitting ones are tried in order (a driver that meets the image's CUDA floor first, then the
newest SGLang) and checked one by one, as `check` does, until one is verified on this GPU's arch with a driver that
runs it; at most MAX_CHECKS are checked (each check reads the registry). When none is, the answer is the best one
found, with every "no" it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from .. import driver_floors
from ..driver_floors import DriverVerdict
from ..results import family
from ..verify.gpus import Gpu
from .candidates import Candidate
from .checked import Checker, Verification

MAX_CHECKS = 5


@dataclass(frozen=True)
class Fit:
    """One candidate against this machine."""

    candidate: Candidate
    target: str | None              # the cell's target of this GPU's family, as a verdict names it
    why_not: str | None             # why it does not fit (None: it fits)
    driver: DriverVerdict | None    # the driver against the floor of its CUDA (None: no floor known)

    @property
    def fits(self) -> bool:
        return self.why_not is None

    @property
    def driver_meets(self) -> bool:
        return self.driver is not None and self.driver.meets


@dataclass(frozen=True)
class Choice:
    chosen: Fit | None                                  # the answer: verified and runnable, else the best found
    verification: Verification | None                   # of the chosen one (None: nothing was checked)
    considered: tuple[Fit, ...]                         # every candidate, fitting or not
    checked: tuple[tuple[Fit, Verification], ...] = ()  # every check made, in order

    @property
    def good(self) -> bool:
        return self.chosen is not None and self.verification is not None and self.verification.verified is True \
            and self.chosen.driver_meets


def fit(candidate: Candidate, platform: str, gpu: Gpu) -> Fit:
    target = next((t for t in candidate.targets if family(t) == gpu.arch), None)
    driver = driver_floors.judge(gpu.driver, candidate.cuda) if candidate.cuda else None
    held = ", ".join(candidate.platforms) or "none named"
    if candidate.refused is not None:
        why: str | None = candidate.refused
    elif candidate.platform_digest is None:
        why = f"it holds no {platform} image (its platforms: {held})"
    elif target is None:
        why = f"it is not built for {gpu.arch} (its targets: {', '.join(candidate.targets) or 'none named'})"
    else:
        why = None
    return Fit(candidate, target, why, driver)


def _sglang(fit: Fit) -> Version:
    try:
        return Version(fit.candidate.sglang or "0")
    except InvalidVersion:
        return Version("0")


def ranked(fits: Sequence[Fit]) -> list[Fit]:
    """The fitting ones, best first: a driver that runs it, then the newest SGLang, then by name."""
    fitting = sorted((f for f in fits if f.fits), key=lambda f: f.candidate.shown)
    return sorted(fitting, key=lambda f: (f.driver_meets, _sglang(f)), reverse=True)   # stable: names stay in order


def choose(candidates: Sequence[Candidate], platform: str, gpu: Gpu, checker: Checker) -> Choice:
    considered = tuple(fit(c, platform, gpu) for c in candidates)
    checked: list[tuple[Fit, Verification]] = []
    for found in ranked(considered)[:MAX_CHECKS]:
        assert found.target is not None   # a fitting candidate has a target of this GPU's family
        verification = checker(found.candidate, found.target, platform)
        checked.append((found, verification))
        if verification.verified and found.driver_meets:
            return Choice(found, verification, considered, tuple(checked))
    if not checked:
        return Choice(None, None, considered)
    best = next(((f, v) for f, v in checked if v.verified), checked[0])
    return Choice(best[0], best[1], considered, tuple(checked))
