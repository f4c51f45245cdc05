"""Where `verify` runs the ladder, one shape for every place (as cibuildwheel's platforms share one Protocol): a
container of an image (`InImage`), this machine's Python environment (`OnHost`: the code under test as an
identity of its own, host.py and identity.py), or a running LXC container in place (`InLxc`: its own Python, the
environment a login shell has there, lxcrunner.py). `verifier(place)` picks the one the command's options name.

Each first makes the request of its verification from what the command asked (provisioning: the GPUs it gets,
the one plan, the cell it is verified as, who seals its record: no key is read for a run that vouches for
nothing), then the judged record of the cell, and says what it has to say after it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .. import engine, log
from ..errors import ConfigError
from ..lxc.privileged import why_unsealed
from ..matrix import platforms
from ..matrix.schema import LABEL_PREFIX
from ..results import CPU_STAGES, BuildResult, CellResult, Given, ImageInfo, Status, cell_record
from ..trust import keys, sources
from ..trust.seen import History
from ..workspace import checked_name
from . import carry, identity, provision, pulled, tp
from .asked import Asked, Place
from .host import verify_as_identity
from .lxcrunner import LxcRunner
from .one_image import check_image, given, image_facts
from .request import VerificationRequest
from .runner import verify
from .sealed import sealed

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True, kw_only=True)
class Named:
    """What `verify` says of the record besides the verification: its name, its file, whose verdicts count."""

    cell_id: str | None                 # default: the image's cell label (in place: named after it), else adhoc
    out: Path                           # the results file
    trust_keys: Sequence[Path] = ()     # also trusted: an LXC container's source verdict, a --cpu-record's seal
    cpu_records: Sequence[carry.Offered] = ()   # the build runner's records, for its CPU stages (verify/carry.py)


class Verifier(Protocol):
    def request(self, asked: Asked, named: Named) -> VerificationRequest:
        """The request of this verification: its GPUs, its plan, its cell, who seals its record."""

    def record(self, request: VerificationRequest) -> CellResult:
        """The judged record of the ladder run where the request says, sealed as it says (sealed.py)."""

    def after(self, request: VerificationRequest) -> None:
        """What the place has to say once the record is shown."""


def verifier(place: Place) -> Verifier:
    return OnHost(place) if place.host else InLxc(place) if place.target is not None else InImage(place)


@dataclass
class InImage:
    """An image, pulled by digest first where the place says so, then verified by id in a container of it."""

    place: Place
    client: docker.DockerClient | None = None

    def request(self, asked: Asked, named: Named) -> VerificationRequest:
        profile = asked.matrix.profile(asked.profile)
        sealing = provision.sealing(asked, named.out, unsealed=None)   # a bad key is said before the engine is asked
        self.client = client = engine.connect()
        image = str(self.place.image)
        source = pulled.pull(client, image, asked.env, log_file=asked.run_dir / "pull.log") if self.place.pull else None
        local = source.id if source and source.id else image   # by id from here: nothing can move under it
        facts = image_facts(client, local)
        label = facts.labels.get(f"{LABEL_PREFIX}.cell", "adhoc")
        # The image's cell label names its log folder: an image is input too, and may carry any text there.
        checked_name(label, f"the cell label of {image}")
        provided = provision.find(client, asked.gpu, all_gpus=tp.wants_all_gpus(profile), shm_size=asked.shm_size)
        provision.say(provided.discovery)
        # --cell-id naming a matrix cell: verified as that cell (its axes, targets, lane and expectation), e.g. an
        # image built elsewhere for it; its label may name another, and the gate compares axes with the matrix.
        cell = (asked.matrix.cell(named.cell_id) if named.cell_id else None) or asked.matrix.cell(label)
        chosen = provision.plan(asked, profile, cell=cell, labels=facts.labels,
                                also_archs=asked.matrix.spec.targets().also_audit)
        made = provision.request(asked, provided, chosen, cell_id=named.cell_id or label, cell=cell, facts=facts,
                                 place=replace(self.place, image=local))
        return _carrying(replace(made, pulled=source, sealing=sealing), asked, named)

    def record(self, request: VerificationRequest) -> CellResult:
        assert self.client is not None, "the request connected to the engine"
        cell = check_image(self.client, str(request.place.image), request)
        return sealed(request, cell)

    def after(self, request: VerificationRequest) -> None:
        del request   # an image's record says it all


@dataclass(frozen=True)
class OnHost:
    """This machine's Python (root only: the code under test then runs as an identity of its own)."""

    place: Place

    def request(self, asked: Asked, named: Named) -> VerificationRequest:
        profile = asked.matrix.profile(asked.profile)
        if not identity.is_root():
            msg = (f"verify --host as uid {os.geteuid()} would run the code under test as this user, who can read "
                   "this user's keys, and plant one where a verifier would later take it")
            raise ConfigError(msg, hint="run it as root (the code under test then runs as an identity of its own), "
                                        "or verify an image in a container (`nox -s verify -- IMAGE`)")
        python = self.place.python or sys.executable
        sealing = provision.sealing(asked, named.out, unsealed=identity.why_unsealed(python))
        provided = provision.here({**os.environ, **asked.env})
        chosen = provision.plan(asked, profile, also_archs=asked.matrix.spec.targets(_host_platform()).also_audit)
        made = provision.request(asked, provided, chosen, cell_id=checked_name(named.cell_id or "host", "cell id"),
                                 facts=ImageInfo(ref="host", id=f"host:{python}"),
                                 place=replace(self.place, python=python))
        return replace(made, sealing=sealing)

    def record(self, request: VerificationRequest) -> CellResult:
        """The record of a run as an identity of its own; not sealed after all for what the verifier itself
        finds (host.verify_as_identity: what it hands on, what it can stat, its clean-up), never for what the
        code under test says."""
        python = str(request.place.python)
        workdir = request.logs / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        problem = identity.unreachable({"the interpreter": Path(python), "the run's folder": workdir})
        if problem:
            msg = f"the code under test runs as an identity of its own, which cannot reach {problem}"
            # The run's folder is runs/ of the folder the command runs in: root's 0700 home, as often as not.
            where = ("run from a folder others can pass into (e.g. `cd /var/tmp`): runs/ is made there"
                     if problem.startswith("the run's folder") else "place it elsewhere")
            raise ConfigError(msg, hint=f"let others read and pass into it (chmod o+rX), or {where}")
        done = verify_as_identity(python, request.env, workdir, request.runner_options())
        cell = cell_record(request.cell_id, Given(targets=request.plan.archs, run_id=request.run_id),
                           build=BuildResult(status=Status.PASSED, reason="existing image"),
                           image=request.facts or ImageInfo(ref="host"), stages=done.stages, notes=done.notes)
        return sealed(request, cell, done.unsealed)

    def after(self, request: VerificationRequest) -> None:
        del request


@dataclass(frozen=True)
class InLxc:
    """A running LXC container, in place: its cell comes from the labels it carries (/etc/sglang-images/cell.json,
    which every image of this project has and an export keeps); its record is a row of its own, named after it."""

    place: Place

    def request(self, asked: Asked, named: Named) -> VerificationRequest:
        profile = asked.matrix.profile(asked.profile)
        target = self.place.target
        assert target is not None, "an LXC place names its container"
        sealing = provision.sealing(asked, named.out, unsealed=why_unsealed(target),
                                    trusted=keys.trusted(asked.ws.root, asked.env, named.trust_keys))
        labels = target.cell_labels()
        provided = provision.here({})
        image_cell = labels.get(f"{LABEL_PREFIX}.cell", "")
        # Its own row in reports (a run in place is not a run of the image), named after the image's cell; the
        # cell's declared expected failure applies in place too.
        cell_id = checked_name(named.cell_id or f"{image_cell or 'lxc'}@{target.tool}-{target.ident}", "cell id")
        where = f"lxc:{target.tool}:{target.ident}"
        chosen = provision.plan(asked, profile, labels=labels,
                                also_archs=asked.matrix.spec.targets(_host_platform()).also_audit)
        made = provision.request(asked, provided, chosen, cell_id=cell_id, cell=asked.matrix.cell(image_cell),
                                 facts=ImageInfo(ref=where, id=where, labels=labels),
                                 place=replace(self.place, python=self.place.python or "python3"))
        return replace(made, sealing=sealing)

    def record(self, request: VerificationRequest) -> CellResult:
        """The record of the container as it is now, as the cell its image was built for."""
        target = request.place.target
        assert target is not None, "an LXC place names its container"
        facts = request.facts or ImageInfo(ref=target.shown)
        found = verify(LxcRunner(target, str(request.place.python)), request.runner_options())
        cell = cell_record(request.cell_id, given(request, facts.labels),
                           build=BuildResult(status=Status.PASSED, reason=f"in place: {target.shown}"),
                           image=facts, stages=found)
        return sealed(request, cell)

    def after(self, request: VerificationRequest) -> None:
        """The signed verdict of the image the container records as its source (its config, on the host): a run
        in place verifies the container as it is now, the verdict says what the image it came from earned."""
        target = request.place.target
        try:
            config: str | None = target.config_path().read_text(errors="replace") if target else None
        except OSError:
            config = None
        trusted = request.sealing.trusted if request.sealing else ()
        status, detail = sources.source_verdict(config, trusted, request.env, History.at(request.env))
        if status == "pass":
            log.info(f"source image: {detail}")
        else:
            log.warn(f"source image: {detail}")


def _carrying(request: VerificationRequest, asked: Asked, named: Named) -> VerificationRequest:
    """The request with the CPU stages a record given with --cpu-record stands for (verify/carry.py), said in one
    line; a record refused is said as a warning, and its CPU stages run here."""
    if not named.cpu_records or not any(s in CPU_STAGES for s in request.plan.stages):
        return request
    trusted = keys.trusted(asked.ws.root, asked.env, named.trust_keys)
    found = carry.choose(named.cpu_records, pulled=request.pulled, cell=request.cell, plan=request.plan,
                         trusted=trusted)
    if isinstance(found, str):
        log.warn(f"--cpu-record not used, the CPU stages run here: {found}")
        return replace(request, carry_refused=found)
    log.info(found.said)
    return replace(request, carried=found)


def _host_platform() -> str:
    """The platform of this host (in place, host and LXC runs are this machine's platform)."""
    found = platforms.host()
    return found.oci if found else platforms.DEFAULT
