"""Verifying in place, from a request provisioning made (provision.for_verify): this machine's Python environment
(`verify --host`: the code under test as an identity of its own, host.py and identity.py), or a running LXC
container with its own Python, the environment a login shell has there and its GPU when it has one
(`verify --lxc`, lxcrunner.py). Each ends in the judged record of the cell; a host run also says why it must not
be sealed after all, when the interpreter under test shares an import folder with the verifier."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..results import BuildResult, CellResult, Given, ImageInfo, Status, cell_record
from ..workspace import PROJECT_ROOT
from . import identity
from .host import HostRunner
from .lxcrunner import LxcRunner
from .one_image import given
from .request import VerificationRequest
from .runner import verify


def on_host(request: VerificationRequest) -> tuple[CellResult, str | None]:
    """The record of a run as an identity of its own (root only: provisioning refuses the rest), and why it must
    not be sealed after all when the interpreter under test shares an import folder with the verifier."""
    python = str(request.place.python)
    workdir = request.logs / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    problem = identity.unreachable({"the interpreter": Path(python), "the probe": PROJECT_ROOT / "buildscripts",
                                    "the run's folder": workdir})
    if problem:
        msg = f"the code under test runs as an identity of its own, which cannot reach {problem}"
        raise ConfigError(msg, hint="let others read and pass into it (chmod o+rX), or place it elsewhere")
    with identity.sandbox(workdir) as box:   # every process of it is gone when this ends
        runner = HostRunner(python, request.env, workdir, box)
        shared = identity.shared_with_verifier(runner.import_path())
        found = verify(runner, request.runner_options())
    cell = cell_record(request.cell_id, Given(targets=request.plan.archs, run_id=request.run_id),
                       build=BuildResult(status=Status.PASSED, reason="existing image"),
                       image=request.facts or ImageInfo(ref="host"), stages=found)
    return cell, shared


def in_lxc(request: VerificationRequest) -> CellResult:
    """In place, in a running LXC container: the record of the container as it is now, as the cell its image
    was built for (its axes and declared expected failure; else what its labels say)."""
    target = request.place.target
    assert target is not None, "provisioning names the container of an LXC request"
    facts = request.facts or ImageInfo(ref=target.shown)
    found = verify(LxcRunner(target, str(request.place.python)), request.runner_options())
    return cell_record(request.cell_id, given(request, facts.labels),
                       build=BuildResult(status=Status.PASSED, reason=f"in place: {target.shown}"),
                       image=facts, stages=found)
