"""`nox -s preflight`: is this LXC host (Proxmox or plain LXC), and optionally one container, ready to
run an image on its GPUs? Read-only: it reads /proc, /dev and the container's config, asks the running
container a few questions, checks the signed verdict of the image the container records as its source,
and prints per check what passed, what failed, and the exact lines to add (lxc/gpu_checks.py). It never edits
the host or the container.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, PreflightFailed
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..lxc.target import Target

ABOUT = "read-only checks of an LXC host (and container) for GPUs"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    target: Target | None = None            # the container to check too (--ctid or --lxc-name)
    cuda: str | None = None                 # the image's CUDA, checked against the host's driver
    trust_keys: tuple[Path, ...] = ()       # besides keys/*.pub


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from ..lxc.target import LXC_PATH

    ap = argparse.ArgumentParser(prog="nox -s preflight --", description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--ctid", help="a Proxmox container id to check too (read with pct)")
    where.add_argument("--lxc-name", help="a plain LXC container name to check too (read with lxc-attach)")
    ap.add_argument("--cuda", help="the image's CUDA, e.g. 13.0 (checked against the host's driver)")
    ap.add_argument("--lxc-path", type=Path, default=None,
                    help=f"LXC's container folder (plain LXC; default {LXC_PATH})")
    ap.add_argument("--trust-key", action="append", default=[], type=Path, metavar="PUB",
                    help="also trust verdicts signed by this public key (keys/*.pub are trusted always)")
    a = ap.parse_args(list(argv))
    return Options(ws=ws, env=env, target=_target(a), cuda=a.cuda, trust_keys=tuple(a.trust_key))


def run(options: Options) -> int:
    from ..lxc.gpu_checks import HostView, container_view, run_checks, show
    from ..lxc.preflight_check import Check
    from ..trust import keys, sources
    from ..trust.seen import History

    view = container_view(options.target) if options.target else None
    checks = run_checks(HostView(), view, options.cuda)
    if view is not None:   # the image it came from, as its config records it: verified, for that digest?
        trusted = keys.trusted(options.ws.root, options.env, options.trust_keys)
        status, detail = sources.source_verdict(view.config, trusted, options.env, History.at(options.env))
        checks.append(Check("image's signed verdict", status, detail))
    show(checks)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        msg = f"{len(failed)} preflight check(s) failed: {', '.join(failed)}"
        raise PreflightFailed(msg, hint="add the lines shown above, then run the preflight again")
    return 0


def _target(a: argparse.Namespace) -> Target | None:
    """The container to check, from preflight's own flags; an empty value is an error, never dropped."""
    from ..lxc.target import Target
    from ..matrix.spellings import CUDA_VERSION_RE

    if a.cuda is not None and not CUDA_VERSION_RE.fullmatch(a.cuda):
        msg = f"--cuda {a.cuda!r} is not a CUDA this project builds for"
        raise ConfigError(msg, hint="the CUDA major.minor of the image's lane, e.g. 13.0 (matrix.yaml `cuda:`)")
    if a.lxc_path is not None and a.lxc_name is None:
        msg = "--lxc-path is plain LXC's container folder: it goes with --lxc-name"
        raise ConfigError(msg, hint="a Proxmox container (--ctid) is found by pct itself")
    if a.ctid is not None:
        return Target.pct(a.ctid, flag="--ctid")
    if a.lxc_name is not None:
        return Target.named(a.lxc_name, lxc_path=a.lxc_path, flag="--lxc-name")
    return None
