"""`here`'s answer for this machine: which image, was it verified on this GPU's arch, does this driver run it, and
how to run it; each "no" with its fix.

The questions are asked in order, and the first "no" is the exit code (errors.py): no GPU, or no image that fits
this platform and arch (NothingFits, 20); the chosen image's verdicts could not be read (CannotCheck, 19) or do not
show it verified on this arch (NotVerified, 18); the driver is below its CUDA's floor (DriverTooOld, 21). 0 only
when a verified image fits and the driver meets its floor. The lines to run are said only for a verified image.
What the runtime lacks (Docker's GPU request, a CT's nodes, /dev/shm, loopback) is said with its fix too, and leaves
the code alone: `preflight` is the check that fails on those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import CannotCheck, DriverTooOld, FatalError, NothingFits, NotVerified
from ..verify.gpus import Gpu
from . import readiness, runlines
from .candidates import Candidate
from .checked import Checker
from .choosing import Choice, choose
from .reading import Machine, Problem
from .runlines import Lines

Candidates = Callable[[str, str], Sequence[Candidate]]   # (platform, GPU arch) -> the images to choose among


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What the answer is asked for, besides the machine: which GPU, and the words of the lines."""

    source: str                 # the repository, or the results file, as the user named it
    gpu: int | None = None      # nvidia-smi's index (default: the first GPU)
    home: str = "/root"         # the caller's home, for the Hugging Face cache mount
    model: str = "MODEL"        # what --model-path gets in the lines
    ctid: str = "200"           # the Proxmox CT id in the lines


@dataclass(frozen=True)
class Answer:
    machine: Machine
    asked: Asked
    gpu: Gpu | None
    choice: Choice | None
    noes: tuple[Problem, ...]        # the answer's, in the order asked; the first decides the exit code
    runtime: tuple[Problem, ...]     # what the runtime lacks, with fixes (not in the exit code)
    lines: Lines | None
    error: FatalError | None         # None: a verified image fits and the driver runs it

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


def _gpu(machine: Machine, index: int | None) -> tuple[Gpu | None, Problem | None]:
    gpu = machine.gpu(index)
    if gpu is not None:
        return gpu, None
    if machine.gpu_problem is not None:
        return None, machine.gpu_problem
    known = ", ".join(str(g.index) for g in machine.gpus) or "none"
    return None, Problem("gpu", f"there is no GPU {index} here (GPUs: {known})", "give --gpu one of those indexes")


def _fit_noes(choice: Choice, gpu: Gpu, platform: str, source: str) -> list[Problem]:
    if not choice.considered:
        good = f"-verified-{gpu.arch.replace('_', '')}"
        return [Problem("fits", f"{source} names no image for {gpu.arch} (a registry's good tags of it end in "
                        f"`{good}`; a results file names images by registry digest)", "name another tag with --tag "
                        f"TAG, or ask the publisher for an image verified on {gpu.arch} ({gpu.name})")]
    if choice.chosen is None:
        first = next(f for f in choice.considered if f.why_not)
        return [Problem("fits", f"none of {len(choice.considered)} image(s) fits {platform} with {gpu.arch}: "
                        f"{first.candidate.shown}: {first.why_not}", "take an image built for this platform "
                        f"and arch, or ask the publisher for one ({gpu.name} is {gpu.arch} on {platform})")]
    return []


def _chosen_noes(choice: Choice) -> list[tuple[Problem, type[FatalError]]]:
    found: list[tuple[Problem, type[FatalError]]] = []
    chosen, verification = choice.chosen, choice.verification
    if chosen is None or verification is None:
        return found
    if not verification.verified:
        error = CannotCheck if verification.verified is None else NotVerified
        found.append((Problem("verified", verification.said, verification.fix or "see `sglang-images check`"), error))
    if chosen.driver is None:
        cuda = chosen.candidate.cuda
        found.append((Problem("driver", f"no driver floor is known for CUDA {cuda}" if cuda else
                              "the image names no CUDA (label io.sglang-images.cuda): its driver floor is unknown",
                              "compare the driver with NVIDIA's CUDA release notes (Table 3) by hand"), DriverTooOld))
    elif not chosen.driver.meets:
        found.append((Problem("driver", chosen.driver.said, chosen.driver.fix or ""), DriverTooOld))
    return found


def answer(machine: Machine, asked: Asked, candidates: Candidates, checker: Checker) -> Answer:
    runtime = tuple(readiness.problems(machine))
    gpu, problem = _gpu(machine, asked.gpu)
    if gpu is None:
        assert problem is not None
        return Answer(machine, asked, None, None, (problem,), runtime, None, NothingFits(problem.said,
                                                                                         hint=problem.fix))
    choice = choose(candidates(machine.platform, gpu.arch), machine.platform, gpu, checker)
    noes = _fit_noes(choice, gpu, machine.platform, asked.source)
    if noes:
        return Answer(machine, asked, gpu, choice, tuple(noes), runtime, None,
                      NothingFits(noes[0].said, hint=noes[0].fix))
    chosen = _chosen_noes(choice)
    assert choice.chosen is not None and choice.verification is not None
    # Lines only for a digest whose verdicts show it verified here: they are what a reader copies and runs. A
    # driver below the floor still gets them (they run once the driver is upgraded, which its "no" says).
    lines = runlines.lines(choice.chosen.candidate, machine, home=asked.home, model=asked.model, ctid=asked.ctid) \
        if choice.verification.verified else None
    error = chosen[0][1](chosen[0][0].said, hint=chosen[0][0].fix) if chosen else None
    return Answer(machine, asked, gpu, choice, tuple(p for p, _ in chosen), runtime, lines, error)
