"""Fix hints for a GPU that cannot be used inside an LXC container, in the words of that container's config.

The catalogue's hints are written for any place a GPU stage runs, and a container engine's are the usual
ones (`--gpus`, CDI). Inside an LXC container verified in place the fix is in the container's config or on
its host, and it differs with the container's kind: in an unprivileged one the host's GPU nodes belong to
nobody unless they were made for it (their mode must let "other" read and write, or Proxmox makes them for the
container with `devN:`); in a privileged one the device cgroup must allow the GPU's majors. The stage keeps its
class and its evidence (nvidia-smi's own words among them); only the hint is this container's.

A stage that failed on a standard node the device cgroup denies (`/dev/urandom`, `/dev/pts`) gets the exact
allow lines for it, in the syntax of the container's config file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..results import StageResult
from .config_file import LxcConfig
from .target import STANDARD_NODES, Target, config_line

GPU_CLASSES = ("gpu-node-permission", "gpu-unusable", "container-missing-device-nodes")
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MODPROBE = "options nvidia NVreg_DeviceFileMode=0666"              # /etc/modprobe.d/nvidia.conf on the host
UDEV = 'KERNEL=="nvidia*", MODE="0666"'                              # /etc/udev/rules.d/70-nvidia.rules
DEVICE_DENIED = "lxc-device-not-allowed"      # the failure class (data/failures.yaml) of a denied standard node
_DENIED_NODE = re.compile(r"(?:Unable to open|cannot (?:create|open)|Can't open) /dev/(pts|[a-z]+)")


def unprivileged_fix(tool: str, config_path: str) -> str:
    """How the GPU nodes become openable for an unprivileged container's root, plain LXC and Proxmox."""
    host = (f"make the nodes 0666 on the host: `{MODPROBE}` in /etc/modprobe.d/nvidia.conf (then reload the "
            f"module or reboot), or a udev rule `{UDEV}` in /etc/udev/rules.d/70-nvidia.rules; `chmod 0666 "
            "/dev/nvidia*` lasts until the driver makes them again")
    if tool == "pct":
        devs = ", ".join(f"`dev{i}: {node},mode=0666`" for i, node in enumerate(NODES))
        return (f"pass them as nodes Proxmox makes for the container ({devs} in {config_path}, instead of "
                f"lxc.mount.entry binds), or {host}")
    return host


def for_container(stage: StageResult, shown: str, tool: str, config_path: str, config: LxcConfig | None) -> StageResult:
    """A failed GPU stage's hint for this LXC container (unchanged for other stages and classes)."""
    if stage.failure_class not in GPU_CLASSES or config is None:
        return stage
    idmap = config.idmap
    preflight = f"`nox -s preflight -- {'--ctid' if tool == 'pct' else '--lxc-name'} {shown.rsplit(maxsplit=1)[-1]}`"
    if config.unprivileged and idmap is not None:
        hint = (f"{shown} is unprivileged ({idmap.shown()}): the host's GPU nodes show there as nobody's, so its "
                f"root may open them only through their mode. To let it, {unprivileged_fix(tool, config_path)}. "
                f"{preflight} checks the nodes as the container's root sees them.")
    else:
        sep = ":" if tool == "pct" else " ="
        hint = (f"{shown} is privileged: its device cgroup must allow the GPU's nodes (`lxc.cgroup2.devices.allow{sep} "
                f"c 195:* rwm` and the nvidia-uvm major from /proc/devices) and they must be passed to it "
                f"({'devN: /dev/nvidia0 ...' if tool == 'pct' else 'lxc.mount.entry binds of /dev/nvidia*'}); "
                f"{preflight} names the lines missing from {config_path}.")
    return stage.model_copy(update={"hint": hint})


def missing_rule_lines(nodes: Sequence[str], target: Target) -> list[str]:
    """The allow lines for standard nodes (`urandom`, `pts`), in the syntax of the target's config file."""
    return [config_line(target, "lxc.cgroup2.devices.allow", f"c {STANDARD_NODES[n]} rwm")
            for n in dict.fromkeys(nodes) if n in STANDARD_NODES]


def name_missing_rules(stage: StageResult, target: Target) -> StageResult:
    """A stage failed on a denied standard node: its hint names the exact allow line(s) for this container."""
    if stage.failure_class != DEVICE_DENIED:
        return stage
    text = "\n".join(part for part in (stage.reason, stage.log_excerpt) if part)
    lines = missing_rule_lines(_DENIED_NODE.findall(text), target)
    if not lines:
        return stage
    named = f"add to {target.config_path()}: " + "; ".join(f"`{line}`" for line in lines) + ", then restart it. "
    return stage.model_copy(update={"hint": named + (stage.hint or "")})
