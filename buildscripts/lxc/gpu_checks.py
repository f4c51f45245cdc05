"""The checks of `nox -s preflight` (commands/preflight.py): is this LXC host (Proxmox or plain LXC), and
optionally one container, ready to run an image on its GPUs? Read-only: they read /proc, /dev and the container's
config and ask the running container a few questions; each says what passed, what failed, and the exact lines to
add. They never edit the host or the container. Unprivileged containers (Proxmox's default) get their own checks
(root_access.py): the idmap, the GPU nodes as the container's root opens them, the loopback of the container's
network namespace.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .. import driver_floors, log
from . import config_file, root_access
from .fix_hints import missing_rule_lines
from .preflight_check import Attach, Check
from .target import STANDARD_NODES, Target, config_line, running

NVIDIA_HOOK = "/usr/share/lxc/hooks/nvidia"
DEVICE_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
SHM_WANTED_KB = 16 * 1024 * 1024    # what the verifier gives containers (SGLang's queues, NCCL)
LIBCUDA = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
SHM_MOUNT = "tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0"   # lxc.mount.entry, as it worked
# Opening each standard node inside the running container; the device cgroup refuses with EPERM ("cannot open
# /dev/urandom: Operation not permitted"). Not ptmx: devpts' own mode (ptmxmode) refuses it in many good
# containers, with another error. No /dev/null redirection: it may be the node that is denied.
OPEN_NODES = "for n in null zero full random urandom; do (exec 3</dev/$n) 2>&1 | head -n 1; done; echo opened"
DENIED = re.compile(r"(?:cannot open|Can't open|Unable to open) /dev/([a-z]+)\S*:? (?:- )?Operation not permitted"
                    r"|Operation not permitted - Can't open /dev/([a-z]+)")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class HostView:
    """The host's files, rooted at `root` (the real host at /; a fixture tree in tests)."""

    root: Path = Path("/")

    def read(self, path: str) -> str | None:
        try:
            return (self.root / path.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    def char_majors(self) -> dict[str, int]:
        """{driver name: major} of the character devices in /proc/devices (nvidia-uvm's major is dynamic)."""
        text = self.read("/proc/devices") or ""
        block = text.split("Block devices:")[0]
        found = (re.match(r"^\s*(\d+)\s+(\S+)\s*$", line) for line in block.splitlines())
        return {m.group(2): int(m.group(1)) for m in found if m}

    def node(self, path: str) -> tuple[int, int, int, tuple[int, int]] | None:
        """(mode, uid, gid, (major, minor)) of `path` on the host, following links; None when it is not there."""
        try:
            info = (self.root / path.lstrip("/")).stat()
        except OSError:
            return None
        return info.st_mode, info.st_uid, info.st_gid, (os.major(info.st_rdev), os.minor(info.st_rdev))

    def device_nodes(self) -> dict[str, tuple[int, int]]:
        """{/dev/nvidia*: (major, minor)} for the character devices present."""
        found: dict[str, tuple[int, int]] = {}
        for path in sorted((self.root / "dev").glob("nvidia*")):
            try:
                info = path.stat()
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode):
                found[f"/dev/{path.name}"] = (os.major(info.st_rdev), os.minor(info.st_rdev))
        return found


@dataclass(frozen=True)
class ContainerView:
    target: Target
    config: str | None                                 # the config file's text (None: unreadable)
    attach: Attach | None = None                       # None when the container is not running
    state: str = ""

    def keys(self, key: str) -> list[str]:
        """Values of `key: value` (Proxmox) or `key = value` (LXC) lines."""
        return self.lxc.values(key)

    @cached_property
    def lxc(self) -> config_file.LxcConfig:
        """The config as LXC reads it on this host: lxc.include files read where they stand."""
        return self.parsed(HostView())

    def parsed(self, host: HostView) -> config_file.LxcConfig:
        return config_file.parse(self.config or "", self.target.tool, host.read)


def kernel_module(host: HostView) -> tuple[Check, str | None]:
    text = host.read("/proc/driver/nvidia/version")
    match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([\d.]+)", text or "")
    if match is None:
        return Check("kernel module", "fail", "no NVIDIA kernel module is loaded (/proc/driver/nvidia/version)",
                     ("install the NVIDIA driver on the host (Proxmox: the .run installer or Debian's "
                      "nvidia-driver, with the pve headers), then `modprobe nvidia`",)), None
    return Check("kernel module", "pass", f"NVIDIA kernel module {match.group(1)}"), match.group(1)


def driver_for_cuda(version: str | None, cuda: str | None) -> Check:
    """The host's driver against the image's CUDA floor (driver_floors.py, the one home of that rule)."""
    if version is None:
        return Check("driver for the image's CUDA", "skip", "no kernel module to compare")
    if cuda is None:
        return Check("driver for the image's CUDA", "skip", "no CUDA given (--cuda 13.0)")
    verdict = driver_floors.judge(version, cuda)
    if verdict is None:
        return Check("driver for the image's CUDA", "skip", f"no known minimum driver for CUDA {cuda}")
    if not verdict.meets:
        return Check("driver for the image's CUDA", "fail", verdict.said, (verdict.fix or "",))
    return Check("driver for the image's CUDA", "pass", verdict.said)


def device_nodes(host: HostView) -> tuple[Check, dict[str, tuple[int, int]]]:
    nodes = host.device_nodes()
    gpus = sorted(n for n in nodes if re.fullmatch(r"/dev/nvidia\d+", n))
    missing = [f"/dev/{n}" for n in DEVICE_NODES if f"/dev/{n}" not in nodes]
    if not gpus or "/dev/nvidiactl" in missing:
        return Check("device nodes", "fail", "no /dev/nvidia0 or /dev/nvidiactl on the host",
                     ("modprobe nvidia && nvidia-smi   # creates /dev/nvidia0.. and /dev/nvidiactl",)), nodes
    majors = sorted({f"{node} {major}:{minor}" for node, (major, minor) in nodes.items()})
    if missing:
        return Check("device nodes", "fail", "missing " + ", ".join(missing) + "; present: " + "; ".join(majors),
                     ("modprobe nvidia-uvm && nvidia-modprobe -u -c=0   # creates /dev/nvidia-uvm*",)), nodes
    # nvidia-uvm's major is given out when the module loads: a node made before a reload can be stale.
    uvm = host.char_majors().get("nvidia-uvm")
    if uvm is not None and nodes["/dev/nvidia-uvm"][0] != uvm:
        return Check("device nodes", "fail", f"/dev/nvidia-uvm is {nodes['/dev/nvidia-uvm'][0]}:*, but /proc/devices "
                     f"gives nvidia-uvm major {uvm} (a node left from before the module was reloaded)",
                     ("rm /dev/nvidia-uvm /dev/nvidia-uvm-tools && nvidia-modprobe -u -c=0",)), nodes
    where = f"; nvidia-uvm major {uvm} in /proc/devices" if uvm is not None else ""
    return Check("device nodes", "pass", "; ".join(majors) + where), nodes


def container_config(view: ContainerView, nodes: Mapping[str, tuple[int, int]]) -> Check:
    if view.config is None:
        return Check("container config", "fail", f"cannot read {view.target.config_path()}",
                     (f"check the container exists: {'pct list' if view.target.tool == 'pct' else 'lxc-ls -f'}",))
    unprivileged = view.lxc.unprivileged
    hook = any(NVIDIA_HOOK in v for v in view.keys("lxc.hook.mount"))
    kind = "unprivileged" if unprivileged else "privileged"
    if hook:
        if not unprivileged:
            return Check("container config", "fail", "the nvidia mount hook refuses privileged containers",
                         ("use an unprivileged container (`unprivileged: 1`), or pass the devices without the hook",))
        return Check("container config", "pass", f"{kind}, LXC's nvidia mount hook (host libraries injected)")
    if not nodes:
        return Check("container config", "skip", f"{kind}; no /dev/nvidia* on the host to pass through yet")
    binds = _bind_mounts(view)
    passed = {p.node for p in root_access.passed_nodes(view.lxc, nodes, HostView().node)}
    gpus = sorted(n for n in nodes if re.fullmatch(r"/dev/nvidia\d+", n))
    # What CUDA needs: the control and uvm nodes, and at least one GPU (the container may get one of several).
    missing = [n for n in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
               if n in nodes and n not in passed]
    if gpus and not any(g in passed for g in gpus):
        missing.insert(0, gpus[0])
    needed = [n for n in nodes if n in passed or n in missing]
    if view.target.tool == "pct" and not binds:
        # devN passthrough also grants the device cgroup: nothing else to add.
        first = next(k for k in range(64) if not view.keys(f"dev{k}"))
        lines = [f"dev{first + i}: {node}" for i, node in enumerate(missing)]
    else:
        allowed = " ".join(view.keys("lxc.cgroup2.devices.allow"))
        lines = [gpu_mount(view.target, n) for n in missing]
        majors = sorted({nodes[n][0] for n in needed})
        lines += [config_line(view.target, "lxc.cgroup2.devices.allow", f"c {m}:* rwm") for m in majors
                  if f"c {m}:" not in allowed and allowed.strip() != "a"]
    if lines:
        what = ", ".join(missing) if missing else "the device cgroup does not allow their majors"
        return Check("container config", "fail", f"{kind}; GPU devices not passed: {what}",
                     (f"add to {view.target.config_path()}:", *lines))
    return Check("container config", "pass", f"{kind}; passed through: {', '.join(n for n in needed)}")


def gpu_mount(target: Target, node: str) -> str:
    """The bind mount of one host node into the container (a node the host lacks is skipped, not an error)."""
    return config_line(target, "lxc.mount.entry", f"{node} {node[1:]} none bind,optional,create=file")


def _bind_mounts(view: ContainerView) -> set[str]:
    return {v.split()[0] for v in view.keys("lxc.mount.entry") if v.startswith("/dev/nvidia")}


def shared_memory(view: ContainerView) -> Check:
    if view.attach is None:
        return Check("/dev/shm", "skip", f"{view.target.shown} is not running: {view.state}")
    code, out = view.attach(["df", "-k", "/dev/shm"])
    sizes = [int(parts[1]) for line in out.splitlines()[1:] if len(parts := line.split()) > 1 and parts[1].isdigit()]
    mount = config_line(view.target, "lxc.mount.entry", SHM_MOUNT)
    if "No such file" in out:
        return Check("/dev/shm", "fail", "the container has no /dev/shm (PyTorch, SGLang and NCCL need one)",
                     (f"add to {view.target.config_path()}: {mount}", "(this project's images mount one at start)"))
    if code != 0 or not sizes:
        return Check("/dev/shm", "warn", f"could not read its size: {out.strip()[-200:]}")
    if sizes[0] < SHM_WANTED_KB:
        have = f"{sizes[0] // 1024} MiB"
        return Check("/dev/shm", "warn", f"{have}; SGLang and NCCL want more (the verifier gives 16 GiB)",
                     (f"give the container more memory (/dev/shm is a tmpfs of half of it), or add: {mount}",))
    return Check("/dev/shm", "pass", f"{sizes[0] // 1024} MiB")


def device_rules(view: ContainerView, host: HostView) -> tuple[bool, list[tuple[str, str]]]:
    """(all denied by default, [(major, minor)] allowed) after the container's device lines in order,
    lxc.include files read where they stand. Proxmox puts its common config (which allows the standard
    nodes) before a container's own lxc.* lines; plain LXC starts from no rule at all (all allowed)."""
    deny_all = view.target.tool == "pct"
    allowed = [tuple(STANDARD_NODES[n].split(":")) for n in STANDARD_NODES] if deny_all else []
    for key, value in view.parsed(host).lines:
        if key not in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"):
            continue
        rule = value.split()
        if rule == ["a"]:
            deny_all, allowed = key.endswith("deny"), []
        elif len(rule) >= 2 and rule[0] in ("c", "a") and ":" in rule[1]:
            number = tuple(rule[1].split(":", 1))
            if key.endswith("allow"):
                allowed.append(number)
            else:
                allowed = [a for a in allowed if a != number]
    return deny_all, [(str(a), str(b)) for a, b in allowed]


def standard_nodes(view: ContainerView, host: HostView) -> Check:
    """The nodes every program needs (null, urandom, ...): allowed by the config, and opened in the container."""
    name = "standard device nodes"
    if view.config is None:
        return Check(name, "skip", f"cannot read {view.target.config_path()}")
    deny_all, allowed = device_rules(view, host)
    covered = {f"{a}:{b}" for a, b in allowed} | {f"{a}:*" for a, b in allowed if b == "*"}
    by_rules = [n for n, rule in STANDARD_NODES.items()
                if deny_all and rule not in covered and f"{rule.split(':')[0]}:*" not in covered]
    live: list[str] = []
    if view.attach is not None:
        _, out = view.attach(["sh", "-c", OPEN_NODES])
        live = list(dict.fromkeys(n for pair in DENIED.findall(out) for n in pair if n in STANDARD_NODES))
    missing = list(dict.fromkeys(by_rules + live))
    if missing:
        said = [f"denied in the container: {', '.join('/dev/' + n for n in live)}"] if live else []
        if by_rules:
            said.append("after `lxc.cgroup2.devices.deny = a` the allow list lacks "
                        + ", ".join(f"{n} ({STANDARD_NODES[n]})" for n in by_rules))
        return Check(name, "fail", "; ".join(said),
                     (f"add to {view.target.config_path()}:", *missing_rule_lines(missing, view.target),
                      "then restart the container"))
    how = "all devices allowed (no deny rule)" if not deny_all else "the allow list names null, zero, full, " \
          "random, urandom, tty, console, ptmx and pts"
    opened = "; null, zero, full, random and urandom open in the container" if view.attach else ""
    return Check(name, "pass", how + opened)


def userspace_driver(view: ContainerView, host_version: str | None) -> Check:
    if any(NVIDIA_HOOK in v for v in view.keys("lxc.hook.mount")):
        return Check("driver in the container", "skip", "the nvidia hook mounts the host's own libraries")
    if view.attach is None:
        return Check("driver in the container", "skip", f"{view.target.shown} is not running: {view.state}")
    # 2>&1, not 2>/dev/null: in a container whose device rules deny /dev/null the redirection itself fails.
    _, out = view.attach(["sh", "-c", "ls -1 /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 "
                                         "2>&1 | grep '^libcuda\\.so\\.'"])
    versions = sorted({m.group(1) for line in out.split() if (m := LIBCUDA.search(line)) and m.group(1).count(".")})
    if not versions:
        return Check("driver in the container", "fail", "no libcuda.so.<version> in the container",
                     (f"install the host's driver userspace without its kernel module in the container: "
                      f"NVIDIA-Linux-x86_64-{host_version or 'VERSION'}.run --no-kernel-module",))
    if host_version and host_version not in versions:
        return Check("driver in the container", "fail",
                     f"the container has libcuda {', '.join(versions)}, the host's kernel module is {host_version}",
                     (f"install exactly {host_version}'s userspace in the container (--no-kernel-module)",))
    return Check("driver in the container", "pass", f"libcuda {', '.join(versions)}")


def run_checks(host: HostView, container: ContainerView | None, cuda: str | None) -> list[Check]:
    module, version = kernel_module(host)
    nodes_check, nodes = device_nodes(host)
    checks = [module, driver_for_cuda(version, cuda), nodes_check]
    if nodes and "/dev/nvidia-uvm" not in nodes:
        checks.append(Check("nvidia-uvm", "fail", "the nvidia-uvm module is not loaded (CUDA needs it)",
                            ("modprobe nvidia-uvm   # and add nvidia-uvm to /etc/modules-load.d/",)))
    if container is not None:
        checks += [container_config(container, nodes), *user_namespace(container, host, nodes),
                   standard_nodes(container, host), shared_memory(container), userspace_driver(container, version)]
    return checks


def user_namespace(view: ContainerView, host: HostView, nodes: Mapping[str, tuple[int, int]]) -> list[Check]:
    """What an unprivileged container's root may reach: its idmap, the GPU nodes, its loopback."""
    if view.config is None:
        return []
    config = view.parsed(host)
    passed = root_access.passed_nodes(config, nodes, host.node)
    return [root_access.idmap_check(config, view.target),
            root_access.gpu_node_access(config, view.target, passed, host.node, view.attach),
            root_access.loopback(config, view.target, view.attach)]


def container_view(target: Target) -> ContainerView:
    path = target.config_path()
    try:
        config: str | None = path.read_text(errors="replace")
    except OSError:
        config = None
    is_running, state = running(target) if config is not None else (False, "no config")

    def attach(argv: Sequence[str]) -> tuple[int, str]:
        done = target.run(argv)
        return done.returncode, done.output

    return ContainerView(target, config, attach if is_running else None, state)


def show(checks: Sequence[Check]) -> None:
    marks = {"pass": "[green]✓ pass[/]", "fail": "[red]✕ fail[/]", "warn": "[yellow]! warn[/]",
             "skip": "[dim]– skip[/]"}
    table = Table("check", "result", "detail", title="LXC host preflight (read-only)")
    for check in checks:
        table.add_row(check.name, marks[check.status], escape(printable(check.detail)))
    log.console.print(table)
    for check in checks:
        if check.fix and check.status in ("fail", "warn"):
            log.console.print(f"[bold]{escape(check.name)}[/]:", markup=True)
            for line in check.fix:
                log.console.print(f"  {printable(line)}", markup=False, highlight=False)


def printable(text: str) -> str:
    """What the container or host said, with control characters (terminal escapes) shown, not sent."""
    return CONTROL.sub(lambda m: ascii(m.group(0))[1:-1], text)
