"""Whether a run in place in an LXC container may vouch for anything: a privileged container's root is this
machine's root, read from the id map the running container has."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .. import proc
from .target import Target


def why_unsealed(target: Target) -> str | None:
    """Why a run in place in `target` vouches for nothing (None: it may be sealed). A privileged container's
    root is this machine's root, so the code under test there is no further from the keys than the verifier.
    What counts is the id map the running container has (its init's /proc/PID/uid_map and gid_map), not its
    config: a config can say one thing (an empty `lxc.idmap =` clears the lines before it) and the container
    may have been started from another."""
    pid = init_pid(target)
    if pid is None:
        return f"the init process of {target.shown} was not found: nothing shows the container is unprivileged"
    for kind in ("uid_map", "gid_map"):
        try:
            lines = Path(f"/proc/{pid}/{kind}").read_text().split("\n")
        except OSError as exc:
            return f"/proc/{pid}/{kind} of {target.shown} cannot be read ({exc.strerror})"
        if maps_root(lines):
            return (f"{target.shown} is privileged (its {kind} maps an id inside to this machine's 0): its root is "
                    "this machine's root, so no boundary keeps the code under test from the verifier's keys")
    return None


def maps_root(lines: Sequence[str]) -> bool:
    """Whether an id map (`INSIDE OUTSIDE COUNT` lines) gives any id inside this machine's id 0, or cannot be read."""
    ranges = [line.split() for line in lines if line.strip()]
    if not ranges or any(len(r) != 3 or not all(x.isdigit() for x in r) for r in ranges):
        return True
    return any(int(outside) == 0 for _, outside, _count in ranges)


def init_pid(target: Target) -> int | None:
    """The pid here of the container's init (`lxc-info -p`; Proxmox containers are LXC containers named by id)."""
    done = proc.run(["lxc-info", "-n", target.ident, *(["-P", str(target.lxc_path)] if target.lxc_path else []),
                     "-p", "-H"], timeout=60)
    text = done.output.strip().splitlines()[-1:] if done.ok else []
    return int(text[0]) if text and text[0].strip().isdigit() else None
