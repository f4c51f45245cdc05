"""QEMU user emulation: what lets this host build and run images of another CPU (linux/arm64 on x86_64).

The kernel runs a foreign binary through a binfmt_misc handler; Debian's qemu-user-static registers one per CPU
(`qemu-aarch64`) with the F flag (the interpreter is opened once, at registration, so it works inside
containers and chroots too: the base bootstrap's package scripts, BuildKit's RUN steps, `docker run`). Nothing here is
needed for the host's own platform. `setup --for build` registers the handler when the matrix holds a cell that
needs it (machine.py); a build or verification that needs it and finds none stops with that fix.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from .. import proc
from ..errors import ToolMissingError
from ..matrix.platforms import Cpu, host

BINFMT = Path("/proc/sys/fs/binfmt_misc")
PACKAGES = ("qemu-user-static", "binfmt-support")
FIX = ("run `python -m buildscripts setup --for build` (as root on Debian it installs qemu-user-static and "
       "registers the handler), or by hand: `apt-get install qemu-user-static binfmt-support`, then "
       "`update-binfmts --enable qemu-{qemu}`")


def needed(cpu: Cpu, machine: str | None = None) -> bool:
    """Whether images for `cpu` need emulation on this host."""
    here = host(machine)
    return here is None or here.oci != cpu.oci


def handler_problem(cpu: Cpu, binfmt: Path = BINFMT) -> str | None:
    """Why this host cannot run `cpu`'s binaries in containers (None: it can, emulated through a handler)."""
    entry = binfmt / f"qemu-{cpu.qemu}"
    try:
        lines = entry.read_text().splitlines()
    except OSError:
        where = "binfmt_misc is not mounted" if not (binfmt / "register").exists() else f"no {entry}"
        return f"no QEMU handler for {cpu.oci} binaries is registered ({where})"
    if not lines or lines[0].strip() != "enabled":
        return f"the QEMU handler {entry} is registered but disabled"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the QEMU handler {entry} lacks the F flag (flags: {flags or 'none'}): containers cannot reach "
                f"its interpreter; qemu-user-static's handler has it")
    return None


def require(cpu: Cpu, binfmt: Path = BINFMT) -> None:
    """Stop before any work when `cpu`'s images need emulation here and no handler is registered."""
    if not needed(cpu):
        return
    problem = handler_problem(cpu, binfmt)
    if problem:
        msg = f"building or running {cpu.oci} images on this host needs QEMU user emulation: {problem}"
        raise ToolMissingError(msg, hint=FIX.format(qemu=cpu.qemu))


def register(cpu: Cpu, say: Callable[[str], None], log: Path, binfmt: Path = BINFMT) -> str | None:
    """Install qemu-user-static and register its handler for `cpu` (Debian, as root); why not, or None when done."""
    if shutil.which("update-binfmts") is None or not Path(f"/usr/libexec/qemu-binfmt/{cpu.qemu}-binfmt-P").exists():
        say(f"installing {' '.join(PACKAGES)} (QEMU user emulation, to build and check {cpu.oci} images here)")
        done = proc.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], log=log,
                        timeout=1200, env={"DEBIAN_FRONTEND": "noninteractive"})
        if not done.ok:
            return f"apt-get install {' '.join(PACKAGES)} exited {done.returncode}: {done.tail(3)}"
    if not (binfmt / "register").exists():
        say(f"mounting binfmt_misc on {binfmt} (the kernel's table of interpreters for foreign binaries)")
        done = proc.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], log=log, timeout=60)
        if not done.ok:
            return f"mounting binfmt_misc failed: {done.tail(3)}"
    say(f"registering the qemu-{cpu.qemu} handler: the kernel then runs {cpu.oci} binaries through QEMU")
    done = proc.run(["update-binfmts", "--enable", f"qemu-{cpu.qemu}"], log=log, timeout=60)
    if not done.ok:
        return f"update-binfmts --enable qemu-{cpu.qemu} exited {done.returncode}: {done.tail(3)}"
    return handler_problem(cpu, binfmt)
