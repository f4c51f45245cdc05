"""What an LXC container's root may reach, checked from the host for the preflight (read-only): the idmap that
makes it unprivileged, the GPU nodes as its root would open them, and the loopback of its network namespace.

In an unprivileged container (a user namespace: its uid 0 is uid 100000 on the host, say) a node bound in from
the host keeps its host owner, which the container sees as nobody when the map leaves it out; its root's
capabilities then do not reach the node, and only the mode's "other" bits decide. A node of mode 0660 owned by
root:root is not openable there, and CUDA says no more than that it sees no GPU. Proxmox's `devN:` entries are
made for the container instead (owner its uid/gid 0 unless `uid=`/`gid=` say otherwise, mode 0660 unless
`mode=` does), so its root opens them. A container with a network namespace of its own has its loopback down
until something brings it up; SGLang's processes and NCCL talk over 127.0.0.1.
Each failure names the line that fixes it, spelled for the container's config (plain LXC or Proxmox).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .config_file import IdMap, LxcConfig, mount_entries
from .fix_hints import MODPROBE, UDEV
from .preflight_check import Attach, Check
from .target import Target, config_line

Stat = Callable[[str], "tuple[int, int, int, tuple[int, int]] | None"]   # path -> (mode, uid, gid, (major, minor))
GPU_NODE = re.compile(r"/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset)$")
# Open each GPU node for reading and writing as the container's root would (the probe's stages do the same).
OPEN_GPU_NODES = 'for n in /dev/nvidia*; do [ -c "$n" ] && (exec 3<>"$n") 2>&1 | head -n 1; done; echo opened'
REFUSED = re.compile(r"(/dev/nvidia[\w-]*)\S*:? (Permission denied|Operation not permitted)")
LOOPBACK = "cat /sys/class/net/lo/flags 2>&1 || ip -o link show lo 2>&1"
DEFAULT_MAP = ("u 0 100000 65536", "g 0 100000 65536")


@dataclass(frozen=True)
class Passed:
    node: str                       # the host's node it stands for, /dev/nvidia0
    key: str                        # "dev0" (Proxmox makes the node) or "lxc.mount.entry" (a host file bound in)
    source: str = ""                # what is bound in (the node itself, or another node of its number)
    options: Mapping[str, str] = field(default_factory=dict)   # a devN entry's mode, uid, gid


def passed_nodes(config: LxcConfig, nodes: Mapping[str, tuple[int, int]], host_stat: Stat) -> list[Passed]:
    """The host's GPU nodes the config passes: `devN:` entries (`dev0: /dev/nvidia0,mode=0666`, or `path=`), and
    bind mounts recognised by their source, by the device number of a source elsewhere (/dev/char/195:0), or by
    their target in the container (dev/nvidia0)."""
    by_number = {number: node for node, number in nodes.items()}
    found: dict[str, Passed] = {}
    for k in range(256):
        for value in config.values(f"dev{k}"):
            path, options = _dev_entry(value)
            if path in nodes:
                found.setdefault(path, Passed(path, f"dev{k}", path, options))
    for source, target, mount_options in mount_entries(config):
        if "bind" not in mount_options:
            continue
        seen = host_stat(source)
        node = source if source in nodes else by_number.get(seen[3]) if seen and stat.S_ISCHR(seen[0]) else None
        node = node or next((n for n in nodes if target.strip("/") == n[1:]), None)
        if node is not None:
            found.setdefault(node, Passed(node, "lxc.mount.entry", source))
    return [found[n] for n in sorted(found)]


def _dev_entry(value: str) -> tuple[str, dict[str, str]]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    options = dict(p.split("=", 1) for p in parts if "=" in p)
    path = options.pop("path", None) or next((p for p in parts if "=" not in p), "")
    return path, options


def root_may_open(mode: int, uid: int, gid: int, idmap: IdMap | None) -> bool:
    """Whether the container's root may open a host node for reading and writing. Privileged: always. In a user
    namespace its capabilities reach a node only when the node's owner and group are both mapped; otherwise the
    mode decides, for the host ids the container's root has."""
    if idmap is None:
        return True
    if idmap.to_inner("u", uid) is not None and idmap.to_inner("g", gid) is not None:
        return True
    root_uid, root_gid = idmap.root
    bits = mode >> 6 if uid == root_uid else mode >> 3 if gid == root_gid else mode
    return bits & 0o6 == 0o6


def idmap_check(config: LxcConfig, target: Target) -> Check:
    """Privileged or unprivileged, as its config says; a map that gives the container no root is an error (LXC
    does not start such a container)."""
    idmap = config.idmap
    if idmap is None:
        return Check("idmap", "pass", "privileged (no lxc.idmap): the container's root is the host's root")
    if problems := idmap.problems():
        return Check("idmap", "fail", "; ".join(problems),
                     (f"add to {target.config_path()}:",
                      *(config_line(target, "lxc.idmap", line) for line in DEFAULT_MAP)))
    return Check("idmap", "pass", f"unprivileged: {idmap.shown()}")


def gpu_node_access(config: LxcConfig, target: Target, passed: Sequence[Passed], host_stat: Stat,
                    attach: Attach | None) -> Check:
    """Each passed GPU node as the container's root would open it: from the host's modes and owners through the
    idmap, and, when the container runs, by opening it inside."""
    name = "GPU nodes as its root opens them"
    idmap = config.idmap if config.unprivileged else None
    if not passed:
        return Check(name, "skip", "no GPU node is passed to the container (see `container config`)")
    said: list[str] = []
    refused: list[str] = []
    sources: list[str] = []
    for entry in passed:
        if entry.key.startswith("dev"):
            o = entry.options
            said.append(f"{entry.node} ({entry.key}: made for the container, {o.get('uid', '0')}:{o.get('gid', '0')} "
                        f"mode {o.get('mode', '0660')})")
            continue
        seen = host_stat(entry.source)
        if seen is None:
            continue
        mode, uid, gid, _ = seen
        inside = f"{_shown(idmap, 'u', uid)}:{_shown(idmap, 'g', gid)}" if idmap else f"{uid}:{gid}"
        bound = "" if entry.source == entry.node else f" bound from {entry.source}"
        words = f"{entry.node}{bound} (mode {stat.S_IMODE(mode):04o}, host {uid}:{gid}, {inside} inside)"
        if root_may_open(stat.S_IMODE(mode), uid, gid, idmap):
            said.append(words)
        else:
            refused.append(words)
            sources.append(entry.source)
    live: list[str] = []
    if attach is not None:
        _, out = attach(["sh", "-c", OPEN_GPU_NODES])
        live = [f"{node}: {why}" for node, why in dict.fromkeys(REFUSED.findall(out))]
    if refused or any("Permission denied" in line for line in live):
        kind = f"unprivileged ({idmap.shown()})" if idmap else "privileged"
        detail = f"{kind}; its root cannot open " + "; ".join(refused + [f"inside: {line}" for line in live])
        return Check(name, "fail", detail, _node_fixes(target, config, passed, sources or ["/dev/nvidia*"]))
    how = "opened inside" if attach is not None else "by their modes and the idmap"
    kind = "unprivileged" if idmap else "privileged"
    return Check(name, "pass", f"{kind}; its root may open them ({how}): " + "; ".join(said))


def _shown(idmap: IdMap | None, kind: str, host: int) -> str:
    inner = idmap.to_inner(kind, host) if idmap else host
    return "nobody" if inner is None else str(inner)


def _node_fixes(target: Target, config: LxcConfig, passed: Sequence[Passed], sources: Sequence[str]) -> tuple[str, ...]:
    host = (f"on the host, /etc/modprobe.d/nvidia.conf: {MODPROBE}   (then reload the nvidia module or reboot)",
            f"or on the host, /etc/udev/rules.d/70-nvidia.rules: {UDEV}",
            f"or at once, until the driver makes them again: chmod 0666 {' '.join(sources)}")
    if target.tool != "pct":
        return host
    free = [k for k in range(256) if not config.values(f"dev{k}")]
    devs = [f"dev{free[i]}: {p.node},mode=0666" for i, p in enumerate(p for p in passed if p.key == "lxc.mount.entry")]
    return (f"in {target.config_path()}, instead of their lxc.mount.entry lines (Proxmox makes these nodes for "
            "the container):", *devs, *host)


def loopback(config: LxcConfig, target: Target, attach: Attach | None) -> Check:
    """The loopback in the container's network namespace: up, or the line that brings it up."""
    name = "loopback in its network namespace"
    types = [v for k, v in config.lines if re.fullmatch(r"lxc\.net\.\d+\.type", k)]
    nets = [k for k, _ in config.lines if re.fullmatch(r"net\d+", k)]
    if types and all(t == "none" for t in types):
        return Check(name, "pass", "the container shares the host's network namespace (lxc.net.0.type = none)")
    if attach is None:
        up = config.first("lxc.net.0.flags") == "up"
        if types[:1] == ["empty"] and not up and not nets:
            return Check(name, "warn", "lxc.net.0.type = empty without lxc.net.0.flags = up: loopback stays down "
                         "unless the container's init brings it up", _loopback_fixes(target, nets, types))
        return Check(name, "skip", f"{target.shown} is not running")
    _, out = attach(["sh", "-c", LOOPBACK])
    flags = re.search(r"^\s*0x([0-9a-f]+)\s*$", out, re.I | re.M)
    is_up = bool(int(flags.group(1), 16) & 1) if flags else (",UP" in out or "<UP" in out) if "lo:" in out else None
    if is_up is None:
        return Check(name, "warn", f"could not read it: {out.strip()[-200:]}")
    if is_up:
        return Check(name, "pass", "up")
    return Check(name, "fail", "down: SGLang's processes and NCCL talk over 127.0.0.1 (nccl-allreduce fails with "
                 "'no socket interface found' where the probe can make no namespace of its own)",
                 _loopback_fixes(target, nets, types))


def _loopback_fixes(target: Target, nets: Sequence[str], types: Sequence[str]) -> tuple[str, ...]:
    inside = ("or inside, until its next start: ip link set lo up   (its init brings lo up for good: ifupdown's "
              "`auto lo` + `iface lo inet loopback`, or systemd-networkd)")
    if (target.tool == "pct" and nets) or (types and types[0] not in ("empty", "none")):
        has = ", ".join(nets) or f"lxc.net.0.type = {types[0]}"
        return (f"{target.shown} has a network ({has}): its init must bring lo up", inside)
    lines = [config_line(target, "lxc.net.0.type", "empty")] if not types else []
    return (f"add to {target.config_path()} (then restart it):", *lines, config_line(target, "lxc.net.0.flags", "up"),
            inside)
