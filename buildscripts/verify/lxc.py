"""The LXC runner: the probe inside a running LXC container, with the container's own Python, the way a
user's work runs there. Through `pct` on a Proxmox host (container by numeric id) and through LXC's own
`lxc-attach` elsewhere (container by name). The probe travels as a tar on stdin; nothing is installed.

The probe runs from a temporary folder that is removed afterwards, in a login shell (`sh -lc`) with a
cleared environment: what a user who enters the container gets (`pct enter`, `lxc-attach` then
`bash -l`), so CUDA_HOME and PATH must come from the container itself (/etc/environment,
/etc/profile.d), not from this process.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import ConfigError
from ..results import StageResult
from .container import PROBE_ROOT, probe_archive
from .output import failed, from_process
from .plan import Plan

PVE_CONFIG = Path("/etc/pve/lxc")
LXC_PATH = Path("/var/lib/lxc")


@dataclass(frozen=True)
class Target:
    """One LXC container: `pct` addresses it by id on Proxmox, plain LXC by name."""

    tool: str          # "pct" or "lxc"
    ident: str         # "200" or "sglang-ct"

    @classmethod
    def pct(cls, ctid: str) -> Target:
        if not re.fullmatch(r"[0-9]+", ctid):
            msg = f"--lxc {ctid!r} is not a Proxmox container id (a number such as 200)"
            raise ConfigError(msg, hint="`pct list` shows them; for plain LXC use --lxc-name NAME")
        return cls("pct", ctid)

    @classmethod
    def named(cls, name: str) -> Target:
        if not name or name.startswith("-") or "/" in name:
            msg = f"--lxc-name {name!r} is not an LXC container name"
            raise ConfigError(msg, hint="`lxc-ls -f` shows them")
        return cls("lxc", name)

    @property
    def shown(self) -> str:
        return f"CT {self.ident}" if self.tool == "pct" else f"LXC container {self.ident}"

    def config_path(self, lxc_path: Path = LXC_PATH) -> Path:
        return PVE_CONFIG / f"{self.ident}.conf" if self.tool == "pct" else lxc_path / self.ident / "config"

    def state_argv(self) -> list[str]:
        return ["pct", "status", self.ident] if self.tool == "pct" else ["lxc-info", "-n", self.ident, "-s"]

    def exec_argv(self, command: Sequence[str], *, clear_env: bool = True) -> list[str]:
        """`command` inside the container. pct exec clears the environment itself; for lxc-attach it is
        asked for, so both give the container's own environment and nothing of this process."""
        if self.tool == "pct":
            return ["pct", "exec", self.ident, "--", *command]
        return ["lxc-attach", "-n", self.ident, *(["--clear-env"] if clear_env else []), "--", *command]

    def run(self, command: Sequence[str], *, timeout: float = 60) -> proc.Completed:
        """`command` inside the container, its output captured (short questions, not the probe)."""
        return proc.run(self.exec_argv(command), timeout=timeout)

    def login_argv(self, script: str) -> list[str]:
        """`script` in a login shell inside the container (what a user who enters it gets)."""
        return self.exec_argv(["/bin/sh", "-lc", script])


def running(target: Target) -> tuple[bool, str]:
    """(is it running, what the tool said)."""
    done = proc.run([proc.which(target.state_argv()[0], hint=_hint(target)), *target.state_argv()[1:]],
                    timeout=60)
    text = done.output.strip()
    return done.ok and "RUNNING" in text.upper(), text or f"exit {done.returncode}"


def _hint(target: Target) -> str:
    return "run this on the Proxmox host (pct)" if target.tool == "pct" else "apt-get install lxc"


def cell_labels(target: Target) -> dict[str, str]:
    """The cell's labels from /etc/sglang-images/cell.json inside the container ({} when it has none)."""
    done = target.run(["cat", "/etc/sglang-images/cell.json"])
    try:
        data = json.loads(done.output) if done.ok else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def probe_script(plan: Plan, python: str) -> str:
    """The shell line that unpacks the probe from stdin into a fresh temporary folder, runs it with `python`
    (its work folder inside that one) and removes the folder again: nothing stays in the container."""
    args = shlex.join(plan.probe_args("lxc"))
    return ('d=$(mktemp -d /tmp/sglang-images-probe.XXXXXX) || exit 125; tar -x -C "$d" && '
            f'cd "$d{PROBE_ROOT}" && PYTHONDONTWRITEBYTECODE=1 {shlex.quote(python)} -m probe {args} '
            '--workdir "$d/work"; rc=$?; cd / && rm -rf "$d"; exit $rc')


def verify_in_lxc(target: Target, plan: Plan, *, log_file: Path, python: str = "python3") -> list[StageResult]:
    """The plan's stages inside a running container; a stopped or unknown container is one failed stage."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    is_running, state = running(target)
    if not is_running:
        log_file.write_text(f"# {target.shown} is not running: {state}\n")
        return [failed("container", f"{target.shown} is not running ({state})", "lxc-not-running", log=state)]
    argv = target.login_argv(probe_script(plan, python))
    done = proc.run(argv, log=log_file, timeout=len(plan.stages) * plan.deadline, stdin=probe_archive(),
                    keep_lines=100000)
    return from_process(done, plan.stages, plan.stage_timeout, python=python)
