"""An LXC container's config as LXC reads it: its `key = value` lines (Proxmox: `key: value`), the files of
`lxc.include` read where they stand, and the idmap that says whether the container is unprivileged.

Unprivileged means a user namespace: the container's uid 0 is some other uid on the host (LXC's and Proxmox's
habit: 100000). Inside it, files the host owns show through the idmap, and an id the map leaves out shows as
nobody (65534); the container's root then has no more rights over them than any other user. Proxmox writes
`unprivileged: 1` in /etc/pve/lxc/CTID.conf and applies its default map (u and g 0 100000 65536) unless the
file has lxc.idmap lines of its own; plain LXC has only the lxc.idmap lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

Read = Callable[[str], "str | None"]      # a file's text by its path on the host, None when unreadable
LINE = re.compile(r"^\s*([\w.]+)\s*[:=]\s*(.*?)\s*$")
OVERFLOW = 65534                           # what an id outside the map shows as (nobody / nogroup)
MAX_INCLUDES = 8                           # LXC's own includes nest two deep; a loop must not hang a reader


@dataclass(frozen=True)
class IdRange:
    kind: str        # "u" or "g"
    inside: int      # first id in the container
    outside: int     # first id on the host
    count: int

    def to_host(self, inner: int) -> int | None:
        return self.outside + inner - self.inside if self.inside <= inner < self.inside + self.count else None

    def to_inner(self, host: int) -> int | None:
        return self.inside + host - self.outside if self.outside <= host < self.outside + self.count else None


PVE_DEFAULT = (IdRange("u", 0, 100000, 65536), IdRange("g", 0, 100000, 65536))


@dataclass(frozen=True)
class IdMap:
    ranges: tuple[IdRange, ...]

    def to_host(self, kind: str, inner: int) -> int | None:
        return next((h for r in self.ranges if r.kind == kind and (h := r.to_host(inner)) is not None), None)

    def to_inner(self, kind: str, host: int) -> int | None:
        """The id a host id shows as in the container (None: unmapped, shown as nobody)."""
        return next((i for r in self.ranges if r.kind == kind and (i := r.to_inner(host)) is not None), None)

    @property
    def root(self) -> tuple[int | None, int | None]:
        """The host uid and gid of the container's root."""
        return self.to_host("u", 0), self.to_host("g", 0)

    def problems(self) -> list[str]:
        """What keeps this map from giving the container a root (LXC refuses to start such a container)."""
        uid, gid = self.root
        return [f"no lxc.idmap line maps the container's {what} 0" for what, host in (("uid", uid), ("gid", gid))
                if host is None]

    def shown(self) -> str:
        uid, gid = self.root
        return f"its root is uid {uid}, gid {gid} on the host"


@dataclass(frozen=True)
class LxcConfig:
    lines: tuple[tuple[str, str], ...]     # (key, value) in the order LXC reads them, includes inlined
    tool: str                              # "pct" (a Proxmox CT's file) or "lxc"

    def values(self, key: str) -> list[str]:
        return [v for k, v in self.lines if k == key]

    def listed(self, key: str) -> list[str]:
        """The values of a list key as LXC ends up with them: an empty value clears what came before it
        (`lxc.idmap =` empties the map, and the container then runs privileged)."""
        found = self.values(key)
        cleared = max((i for i, v in enumerate(found) if not v.strip()), default=-1)
        return found[cleared + 1:]

    def first(self, key: str) -> str | None:
        found = self.values(key)
        return found[-1] if found else None    # LXC keeps the last value of a single-valued key

    @property
    def idmap(self) -> IdMap | None:
        """The container's idmap; None when it has none (privileged: its root is the host's root)."""
        ranges = tuple(r for v in self.listed("lxc.idmap") if (r := _range(v)))
        if ranges:
            return IdMap(ranges)
        cleared = len(self.listed("lxc.idmap")) < len(self.values("lxc.idmap"))
        if self.tool == "pct" and self.first("unprivileged") == "1" and not cleared:
            return IdMap(PVE_DEFAULT)
        return None

    @property
    def unprivileged(self) -> bool:
        """Whether the container's uid 0 is another uid on the host."""
        idmap = self.idmap
        return idmap is not None and idmap.root[0] not in (None, 0)


def _range(value: str) -> IdRange | None:
    parts = value.split()
    if len(parts) != 4 or parts[0] not in ("u", "g", "b") or not all(p.isdigit() for p in parts[1:]):
        return None
    inside, outside, count = (int(p) for p in parts[1:])
    return IdRange("u" if parts[0] == "b" else parts[0], inside, outside, count)


def parse(text: str, tool: str, read: Read | None = None) -> LxcConfig:
    """The config's lines; a Proxmox file's snapshot sections ([name] and after) are not the running config."""
    return LxcConfig(tuple(_lines(text, read, 0)), tool)


def _lines(text: str, read: Read | None, depth: int) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("["):
            break
        match = LINE.match(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        key, value = match.groups()
        if key == "lxc.include":
            if read is not None and depth < MAX_INCLUDES:
                found += _lines(read(value) or "", read, depth + 1)
            continue
        found.append((key.replace("lxc.cgroup.", "lxc.cgroup2.") if key.startswith("lxc.cgroup.devices") else key,
                      value))
    return found


def read_file(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def load(path: Path, tool: str, read: Read = read_file) -> LxcConfig | None:
    """The config at `path` (None when it cannot be read)."""
    text = read(str(path))
    return None if text is None else parse(text, tool, read)


def mount_entries(config: LxcConfig) -> Sequence[tuple[str, str, str]]:
    """(source, target, options) of each lxc.mount.entry."""
    found = []
    for value in config.listed("lxc.mount.entry"):
        parts = value.split()
        if len(parts) >= 4:
            found.append((parts[0], parts[1], parts[3]))
    return found
