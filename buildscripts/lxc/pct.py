"""The Proxmox VE command lines for an exported image: create the container from the OCI archive, give it
the GPU, start the server, check and verify it. Built here as data (and unit-tested); `pct` runs only on a
Proxmox host, so nothing here executes them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..probe import shm
from ..trust.sources import SOURCE_KEY

GPU_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
TEMPLATE_CACHE = "/var/lib/vz/template/cache"   # the `local` storage's templates
# The container's config records the image it came from in its description (comment lines of
# /etc/pve/lxc/CTID.conf, which the container cannot edit): what preflight and `verify --lxc` check.


@dataclass(frozen=True, kw_only=True)
class Plan:
    archive: str                  # NAME.oci.tar
    ctid: str = "200"
    storage: str = "local"        # a storage with content type vztmpl
    rootfs: str = "local-lvm:64"  # where the container's root goes, and its size in GB
    memory_mb: int = 65536
    cores: int = 16
    gpus: Sequence[str] = GPU_NODES
    cuda: str | None = None       # the image's CUDA, for the preflight
    verdicts: bool = False        # its signed verdicts travel beside it (NAME.oci.tar.verdicts.json)
    server_args: str = "--model-path /models/MODEL --host 0.0.0.0 --port 30000"
    registry_source: str | None = None   # REPO@sha256:… the archive was copied from (`here`), checked from there

    @property
    def template(self) -> str:
        return f"{self.storage}:vztmpl/{self.archive}"

    @property
    def source(self) -> str:
        """The image the container is made from, as `nox -s check` takes it (once copied to the cache): the
        registry digest it was copied from when it travels without its verdicts, whose registry holds them."""
        return self.registry_source or f"oci-archive:{TEMPLATE_CACHE}/{self.archive}"


def create(plan: Plan) -> list[str]:
    """`pct create`: the image's own values (Env, Entrypoint/Cmd) override create options, so the
    container's resources and devices go on afterwards with `pct set`."""
    return ["pct", "create", plan.ctid, plan.template, "--hostname", f"sglang-{plan.ctid}", "--unprivileged", "1",
            "--rootfs", plan.rootfs, "--net0", "name=eth0,bridge=vmbr0,ip=dhcp",
            "--description", f"{SOURCE_KEY}: {plan.source}"]


def set_resources(plan: Plan) -> list[str]:
    devices = [x for i, node in enumerate(plan.gpus) for x in (f"--dev{i}", node)]
    return ["pct", "set", plan.ctid, "--memory", str(plan.memory_mb), "--cores", str(plan.cores), *devices]


def server_args(plan: Plan) -> list[str]:
    """The image's init runs the server with the flags in /etc/sglang-images/server.args (one line)."""
    line = f"printf '%s\\n' {shlex.quote(plan.server_args)} > /etc/sglang-images/server.args"
    return ["pct", "exec", plan.ctid, "--", "sh", "-c", line]


def commands(plan: Plan) -> list[list[str]]:
    cuda = ["--cuda", plan.cuda] if plan.cuda else []
    check = [["nox", "-s", "check", "--", f"oci-archive:{plan.archive}"]] if plan.verdicts else []
    sidecar = [f"{plan.archive}.verdicts.json"] if plan.verdicts else []
    return [
        ["sha256sum", "-c", f"{plan.archive}.sha256"],
        *check,
        ["cp", plan.archive, *sidecar, f"{TEMPLATE_CACHE}/"],
        create(plan),
        set_resources(plan),
        ["pct", "start", plan.ctid],
        ["nox", "-s", "preflight", "--", "--ctid", plan.ctid, *cuda],
        ["nox", "-s", "verify", "--", "--lxc", plan.ctid],
        server_args(plan),
    ]


def install_note(plan: Plan, *, image: str, annotations: dict[str, str], forced: str | None) -> str:
    """A short Markdown note with the exact commands, written next to the archive."""
    cell = annotations.get("io.sglang-images.cell", image)
    lines = [f"# {cell} on Proxmox VE (9.1 or newer: OCI images as container templates)", ""]
    if forced:
        lines += [f"**Not verified on a GPU** (exported with --force: {forced}).", ""]
    else:
        lines += [f"Verified on {annotations.get('io.sglang-images.verified.archs', '?')} "
                  f"({annotations.get('io.sglang-images.verified.gpus', '?')}).", ""]
    if plan.verdicts:
        lines += [f"Its signed verdicts travel beside it ({plan.archive}.verdicts.json): `nox -s check -- "
                  f"oci-archive:{plan.archive}` proves, offline, that this archive holds the image a verifier "
                  "signed for (keep the two files together).", ""]
    else:
        lines += ["This archive carries no signed verdict (the image was not promoted to a registry with its "
                  "verdicts attached): `nox -s check` cannot vouch for it.", ""]
    lines += ["On the Proxmox host, next to the archive:", "", "```sh"]
    lines += [shlex.join(argv) for argv in commands(plan)]
    lines += ["```", "",
              "- The `local` storage keeps templates in /var/lib/vz/template/cache; use your own storage and "
              "container id as you like.",
              "- `--devN` passes the device nodes only: the container needs the host driver's user-space "
              "libraries of the same version (`NVIDIA-Linux-x86_64-VERSION.run --no-kernel-module` inside it), "
              "or use LXC's nvidia hook in an unprivileged container. `nox -s preflight` checks both.",
              "- CUDA_HOME and PATH come from the image: its environment (the init), /etc/environment and "
              "/etc/profile.d/sglang-images.sh (login shells: `pct enter`, `pct exec CTID -- bash -l`).",
              f"- A server on more than one GPU (`--tp-size N`) needs /dev/shm for NCCL; in LXC it is the "
              f"container's own tmpfs (Docker's --shm-size / --ipc=host have no pct flag): {shm.FIXES['lxc']}.",
              "- The image's init starts the server within 10 s of /etc/sglang-images/server.args appearing (one "
              "line of flags, read as shell words) and restarts it if it exits; its log is "
              "/var/log/sglang-server.log.", ""]
    return "\n".join(lines)
