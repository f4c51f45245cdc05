"""One LXC container as this machine reaches it: through `pct` on a Proxmox host (container by numeric id) and
through LXC's own `lxc-attach` elsewhere (container by name), its config file, its state, and its labels.

Commands run in a login shell with a cleared environment: what a user who logs in to the container gets
(console, ssh, `su -`), so CUDA_HOME and PATH must come from the container itself (/etc/profile,
/etc/profile.d, ~/.profile), not from this process. `lxc-attach --clear-env` leaves only PATH and
`container=lxc` (LXC's attach.c), and `sh -l` adds nothing, so the login's own part is done first, as login(1)
does it: HOME, USER, LOGNAME and SHELL from the container's /etc/passwd. Without HOME a login shell skips
~/.profile, and DeepGEMM's JIT cache ($HOME/.deep_gemm) becomes the relative path `.deep_gemm`, which its
`cd .deep_gemm/tmp && nvcc .deep_gemm/tmp/…/kernel.cu` cannot find (measured on an H200 test machine,
2026-12-01).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import ConfigError
from ..handed_env import handed_environment
from . import config_file

PVE_CONFIG = Path("/etc/pve/lxc")
LXC_PATH = Path("/var/lib/lxc")
ATTACH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"   # lxc-attach --clear-env's PATH
# The nodes every container needs, as LXC's common.conf allows them after `lxc.cgroup2.devices.deny = a`
# (a config that denies all and allows only the GPU's breaks even `import torch`: "Unable to open /dev/urandom").
STANDARD_NODES = {"null": "1:3", "zero": "1:5", "full": "1:7", "random": "1:8", "urandom": "1:9",
                  "tty": "5:0", "console": "5:1", "ptmx": "5:2", "pts": "136:*"}
# LXC takes almost any name; these are the ones that are safe as a path component, a log folder and a
# word on a terminal (no /, no leading dot or dash, no spaces or control characters).
LXC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}")
# What login(1) sets before the shell starts, from the container's own passwd entry for the user the command
# runs as (root unless the container maps it); a value the container's lxc.environment set is kept.
LOGIN_ENV = (
    'u=$(id -u 2>/dev/null || echo 0); '
    'pw=$( (getent passwd "$u" || grep "^[^:]*:[^:]*:$u:" /etc/passwd) 2>/dev/null | head -n 1); '
    'name=$(printf %s "$pw" | cut -d: -f1); home=$(printf %s "$pw" | cut -d: -f6); '
    'shell=$(printf %s "$pw" | cut -d: -f7); '
    'HOME=${HOME:-${home:-/}}; USER=${USER:-${name:-root}}; LOGNAME=${LOGNAME:-$USER}; '
    'SHELL=${SHELL:-${shell:-/bin/sh}}; export HOME USER LOGNAME SHELL; '
    'cd "$HOME" 2>/dev/null || cd /; exec /bin/sh -l -c "$1"'
)


@dataclass(frozen=True)
class Target:
    """One LXC container: `pct` addresses it by id on Proxmox, plain LXC by name (under `lxc_path`)."""

    tool: str                      # "pct" or "lxc"
    ident: str                     # "200" or "sglang-ct"
    lxc_path: Path | None = None   # plain LXC's container folder when it is not the default

    @classmethod
    def pct(cls, ctid: str, *, flag: str = "--lxc") -> Target:
        if not re.fullmatch(r"[0-9]{1,9}", ctid):
            msg = f"{flag} {ctid!r} is not a Proxmox container id (a number such as 200)"
            raise ConfigError(msg, hint="`pct list` shows them; for plain LXC use --lxc-name NAME")
        return cls("pct", ctid)

    @classmethod
    def named(cls, name: str, *, lxc_path: Path | None = None, flag: str = "--lxc-name") -> Target:
        if not LXC_NAME.fullmatch(name):
            msg = f"{flag} {name!r} is not an LXC container name"
            raise ConfigError(msg, hint="`lxc-ls -f` shows them: a name starts with a letter or digit and holds "
                                        "only letters, digits and . _ + -")
        return cls("lxc", name, None if lxc_path in (None, LXC_PATH) else lxc_path)

    @property
    def shown(self) -> str:
        return f"CT {self.ident}" if self.tool == "pct" else f"LXC container {self.ident}"

    def config_path(self) -> Path:
        if self.tool == "pct":
            return PVE_CONFIG / f"{self.ident}.conf"
        return (self.lxc_path or LXC_PATH) / self.ident / "config"

    def _lxc(self, program: str) -> list[str]:
        return [program, "-n", self.ident, *(["-P", str(self.lxc_path)] if self.lxc_path else [])]

    def state_argv(self) -> list[str]:
        return ["pct", "status", self.ident] if self.tool == "pct" else [*self._lxc("lxc-info"), "-s"]

    def exec_argv(self, command: Sequence[str], *, clear_env: bool = True) -> list[str]:
        """`command` inside the container with nothing of this process's environment. lxc-attach is asked
        for that; `pct exec` keeps the caller's environment (its --keep-env defaults to 1 in PVE 8, and
        PVE 7 has no such option), so there `env -i` clears it, leaving what lxc-attach --clear-env leaves."""
        if self.tool == "pct":
            clean = ["env", "-i", f"PATH={ATTACH_PATH}", "container=lxc"] if clear_env else []
            return ["pct", "exec", self.ident, "--", *clean, *command]
        return [*self._lxc("lxc-attach"), *(["--clear-env"] if clear_env else []), "--", *command]

    def run(self, command: Sequence[str], *, timeout: float = 60) -> proc.Completed:
        """`command` inside the container, its output captured (short questions, not the probe)."""
        return proc.run(self.exec_argv(command), timeout=timeout, env=outside_env(), inherit_env=False)

    def cell_labels(self) -> dict[str, str]:
        """The cell's labels from /etc/sglang-images/cell.json inside the container ({} when it has none).
        lxc-attach's own warnings share the output (`Can't open /dev/null`), so the JSON object is cut out."""
        done = self.run(["cat", "/etc/sglang-images/cell.json"])
        text = done.output[done.output.find("{"):done.output.rfind("}") + 1] if done.ok else ""
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def config(self) -> config_file.LxcConfig | None:
        """The container's config as LXC reads it (None when it cannot be read here)."""
        return config_file.load(self.config_path(), self.tool)

    def unprivileged(self) -> bool:
        """Whether the container's idmap maps its uid 0 to a non-zero host uid (read from its config: Proxmox's
        `unprivileged: 1`, or lxc.idmap lines); False when the config cannot be read."""
        config = self.config()
        return config is not None and config.unprivileged

    def login_argv(self, script: str) -> list[str]:
        """`script` in a login shell inside the container: the login's environment (LOGIN_ENV), then
        `sh -l`, which reads /etc/profile, /etc/profile.d and ~/.profile."""
        return self.exec_argv(["/bin/sh", "-c", LOGIN_ENV, "sh", script])


def running(target: Target) -> tuple[bool, str]:
    """(is it running, what the tool said)."""
    done = proc.run([proc.which(target.state_argv()[0], hint=_hint(target)), *target.state_argv()[1:]],
                    timeout=60)
    text = done.output.strip()
    return done.ok and "RUNNING" in text.upper(), text or f"exit {done.returncode}"


def _hint(target: Target) -> str:
    return "run this on the Proxmox host (pct)" if target.tool == "pct" else "apt-get install lxc"


def outside_env() -> dict[str, str]:
    """The environment lxc-attach and pct run with: `pct exec` hands the caller's on to the first program in
    the container (the container's own `env`, before it clears it), so no secret of the verifier's goes."""
    return handed_environment(os.environ)


def config_line(target: Target, key: str, value: str) -> str:
    """One line of the target's config file: `key: value` for Proxmox (/etc/pve/lxc), `key = value` for LXC."""
    return f"{key}{':' if target.tool == 'pct' else ' ='} {value}"
