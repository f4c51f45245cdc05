"""`sglang-images here --repository REGISTRY/REPO | --report results.json [--tag TAG] [--gpu N] [--json]`: on the
machine that will run an image, which image fits it, whether that digest was verified on this GPU's arch (its signed
verdicts, checked as `check` checks them), whether this driver meets the floor of its CUDA, and the exact lines to
pull and run it here (Docker, or a Proxmox CT). Each "no" comes with its fix.

Exit 0 when a verified image fits and the driver meets its floor; else the first "no" (docs/exit-codes.md): 20 no
GPU or no image fits, 19 its verdicts could not be read, 18 not verified on this arch, 21 the driver is below its
floor; 2 for a command line that does not parse or names no source.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape

from .. import arguments, log
from ..errors import CannotCheck, ConfigError, RegistryError, ToolMissingError
from ..here import candidates, facts, reading, show
from ..here.answer import Answer, Asked, Candidates, answer
from ..here.checked import SignedVerdicts
from ..refs import reference_problem
from ..registry.references import check_repository
from ..trust import keys
from ..trust.keys import PublicKey
from ..trust.seen import History
from ..workspace import Workspace

ABOUT = "which image fits this machine, verified on its GPU, and how to run it"   # cli.py's table says the same
SOURCE_HINT = "e.g. --repository ghcr.io/ORG/sglang-images, or --report results.json (a run's results file)"


@dataclass(frozen=True, kw_only=True)
class Options:
    repository: str | None = None                 # REGISTRY/REPO to choose from (its good tags of this GPU's arch)
    report: Path | None = None                    # a results file to choose from
    tags: tuple[str, ...] = ()                    # only these tags of the repository
    gpu: int | None = None                        # nvidia-smi's index of the GPU to answer for (default: the first)
    json: bool = False                            # the answer as JSON on stdout
    model: str = "MODEL"                          # what --model-path gets in the lines
    ctid: str = "200"                             # the Proxmox CT id in the lines
    trusted: tuple[PublicKey, ...] = ()           # the keys whose verdicts count (keys/*.pub, --trust-key)
    env: Mapping[str, str] = field(default_factory=dict)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglang-images here", description=ABOUT)
    source = ap.add_mutually_exclusive_group()
    source.add_argument("--repository", metavar="REGISTRY/REPO",
                        help="a registry repository: its good tags of this GPU's arch are read")
    source.add_argument("--report", type=arguments.path_argument, metavar="FILE",
                        help="a results file (results.json) naming images by registry digest")
    ap.add_argument("--tag", action="append", default=[], help="only this tag of --repository (repeatable)")
    ap.add_argument("--gpu", type=int, metavar="INDEX", help="the GPU to answer for, as nvidia-smi numbers them")
    ap.add_argument("--model", default="MODEL", help="the model the run lines serve (default: a MODEL placeholder)")
    ap.add_argument("--ctid", default="200", help="the Proxmox container id the CT lines use (default 200)")
    ap.add_argument("--trust-key", "--key", dest="key", action="append", default=[], type=arguments.path_argument,
                    metavar="PUB", help="a public key (PEM) to trust besides the project's keys/*.pub (repeatable)")
    ap.add_argument("--json", action="store_true", help="the answer as JSON on stdout (the words go to stderr)")
    return ap


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    a = parser().parse_args(list(argv))
    if a.tag and a.repository is None:
        msg = "--tag names a tag of --repository, which is not given"
        raise ConfigError(msg, hint="add --repository REGISTRY/REPO")
    repository = check_repository(a.repository, "--repository") if a.repository is not None else None
    for tag in a.tag:
        problem = reference_problem(f"{repository}:{tag}")
        if problem:
            msg = f"--tag {tag!r}: {problem}"
            raise ConfigError(msg, hint="a tag as the registry lists it, e.g. 0.5.16-torch2.11.0-cu130-pip")
    if not a.ctid.isdigit():
        msg = f"--ctid {a.ctid!r} is not a Proxmox container id (a number such as 200)"
        raise ConfigError(msg, hint="`pct list` shows them")
    return Options(repository=repository, report=a.report, tags=tuple(a.tag), gpu=a.gpu, json=a.json,
                   model=a.model, ctid=a.ctid, trusted=tuple(keys.trusted(ws.root, env, a.key)), env=dict(env))


def _candidates(options: Options) -> Candidates:
    def listed(platform: str, arch: str) -> list[candidates.Candidate]:
        if options.repository is not None:
            reader = candidates.Skopeo(options.env)
            return candidates.from_registry(reader, options.repository, platform, arch, options.tags)
        assert options.report is not None
        return candidates.from_results(options.report)
    return listed


def run(options: Options) -> int:
    machine = reading.read(facts.live(options.env))
    words = log.err if options.json else log.console   # stdout is the JSON's alone
    source = options.repository or (str(options.report) if options.report else None)
    if source is None:
        words.print(f"this machine: {escape(show.machine_words(machine))}")
        msg = "here needs images to choose from: a registry repository or a results file"
        raise ConfigError(msg, hint=SOURCE_HINT)
    asked = Asked(source=source, gpu=options.gpu, home=options.env.get("HOME", "/root"), model=options.model,
                  ctid=options.ctid)
    try:
        checker = SignedVerdicts(options.trusted, options.env, History.at(options.env))
        found: Answer = answer(machine, asked, _candidates(options), checker)
    except (RegistryError, ToolMissingError) as exc:
        words.print(f"this machine: {escape(show.machine_words(machine))}")
        msg = f"cannot read the images of {source}: {exc.message}"
        raise CannotCheck(msg, hint=exc.hint) from None
    show.show(found, words)
    if options.json:
        print(json.dumps(show.as_json(found), indent=1))
    if found.error is not None:
        raise found.error
    return 0
