"""The LXC runner: the probe inside a running LXC container (lxc/target.py), with the container's own Python,
the way a user's work runs there, in a login shell with a cleared environment. The probe travels as a tar on
stdin; nothing is installed.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from .. import log, proc
from ..lxc import fix_hints
from ..lxc.target import Target, outside_env, running
from . import netns
from .container import MODEL_ROOT, PROBE_ROOT, probe_archive
from .handoff import Handoff, Handover
from .host import ProcessReach, marker
from .output import failed, from_process
from .plan import Plan
from .runner import Options, Outcome

if TYPE_CHECKING:
    from .host_model import TinyModel

STOP_FILE = re.compile(r"/tmp/sglang-images-probe\.[A-Za-z0-9]{6,}/stop")   # in probe_script's folder


def probe_script(plan: Plan, python: str, *, mark: str = "", model: bool = False, cut: bool = False) -> str:
    """The shell line that unpacks the probe (and the host's model) from stdin into a fresh temporary folder,
    runs it with `python` (its work folder and stop file inside that one; `mark` in its environment) and
    removes the folder again: nothing stays in the container."""
    args = shlex.join([*plan.probe_args("lxc"), *(["--cut-network"] if cut else [])])
    own = ('--workdir "$d/work" --stop-file "$d/stop"' + (f' --model-dir "$d{MODEL_ROOT}"' if model else ""))
    env = f"{shlex.quote(mark)} " if mark else ""
    return ('d=$(mktemp -d /tmp/sglang-images-probe.XXXXXX) || exit 125; tar -x -C "$d" && '
            f'cd "$d{PROBE_ROOT}" && {env}PYTHONDONTWRITEBYTECODE=1 {shlex.quote(python)} -m probe {args} '
            f'{own}; rc=$?; cd / && rm -rf "$d"; exit $rc')


class LxcRunner:
    """The probe inside a running LXC container, with its own Python (`python`: python3 on its PATH, or a
    venv's); a stopped or unknown container is one failed stage."""

    mode = "lxc"

    def __init__(self, target: Target, python: str = "python3") -> None:
        self.target, self.python = target, python

    def run(self, options: Options, model: TinyModel | None) -> Outcome:
        plan, log_file = options.plan, options.log_file
        log_file.parent.mkdir(parents=True, exist_ok=True)
        is_running, state = running(self.target)
        if not is_running:
            log_file.write_text(f"# {self.target.shown} is not running: {state}\n")
            return Outcome([failed("container", f"{self.target.shown} is not running ({state})", "lxc-not-running",
                                   log=state)])
        config = self.target.config()
        if config is not None and config.unprivileged and config.idmap is not None:
            log.info(f"{self.target.shown} is unprivileged: {config.idmap.shown()}")
        mark, cut_problem = marker(), netns.problem()
        handoff = Handoff(ProcessReach(mark, self._stop, enter=cut_problem is None), options.handed, model,
                          ready_deadline_s=plan.stage_timeout, cut_problem=cut_problem)
        script = probe_script(plan, self.python, mark=mark, model=model is not None, cut=cut_problem is None)
        done = proc.run(self.target.login_argv(script), log=log_file, timeout=len(plan.stages) * plan.deadline,
                        stdin=probe_archive(model=model), keep_lines=100000, on_line=handoff.feed,
                        env=outside_env(), inherit_env=False)
        observation = handoff.finish()
        stages = from_process(done, plan.stages, plan.stage_timeout, python=self.python, mode=self.mode)
        where = (self.target.shown, self.target.tool, str(self.target.config_path()))
        return Outcome([fix_hints.for_container(fix_hints.name_missing_rules(stage, self.target), *where, config)
                        for stage in stages], observation)

    def _stop(self, handover: Handover) -> None:
        """The stop file, inside the container (the probe's own folder under /tmp, nowhere else)."""
        if not STOP_FILE.fullmatch(handover.stop_file):
            msg = f"the probe named the stop file {handover.stop_file!r}, outside its own folder"
            raise ValueError(msg)
        self.target.run(["/bin/sh", "-c", '[ -d "${1%/*}" ] && : > "$1"', "sh", handover.stop_file])
