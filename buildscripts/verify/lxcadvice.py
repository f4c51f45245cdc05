"""Fix hints for a GPU that cannot be used inside an LXC container, in the words of that container's config.

The catalogue's hints are written for any place a GPU stage runs, and a container engine's are the usual
ones (`--gpus`, CDI). Inside an LXC container verified in place the fix is in the container's config or on
its host, and it differs with the container's kind: in an unprivileged one the host's GPU nodes belong to
nobody unless they were made for it (their mode must let "other" read and write, or Proxmox makes them for the
container with `devN:`); in a privileged one the device cgroup must allow the GPU's majors. The stage keeps its
class and its evidence (nvidia-smi's own words among them); only the hint is this container's.
"""

from __future__ import annotations

from ..results import StageResult
from .lxcconfig import LxcConfig

GPU_CLASSES = ("gpu-node-permission", "gpu-unusable", "container-missing-device-nodes")
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MODPROBE = "options nvidia NVreg_DeviceFileMode=0666"              # /etc/modprobe.d/nvidia.conf on the host
UDEV = 'KERNEL=="nvidia*", MODE="0666"'                              # /etc/udev/rules.d/70-nvidia.rules


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
