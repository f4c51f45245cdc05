"""The exact lines to pull and run the chosen image here: `docker run`, or a Proxmox CT made from it.

Docker, with what the image was verified with (verify/gpus.py: 16 GiB of /dev/shm, memlock unlimited, a 64 MiB
stack, the NVIDIA runtime's compute and utility capabilities) and the GPU request this engine takes (`--gpus all`
with the NVIDIA runtime, `--device nvidia.com/gpu=all` with CDI). The image is named by the platform manifest
whose verdicts were checked (REPO@sha256:…), never by its tag, which can move. Its caches go to a named volume at
the folders the image's own Env names (SGLANG_CACHE_DIR and the others its build sets, images/Dockerfile), so that
a second start compiles nothing again, and a named volume starts as a copy of what the image baked there; an image
that names none keeps them under root's ~/.cache (SGLang's, DeepGEMM's and FlashInfer's defaults). Models come
from the host's Hugging Face cache, mounted as SGLang's own docs mount it (`-v ~/.cache/huggingface:/root/.cache/
huggingface`, HF_TOKEN from the caller's environment: docs/get-started/install.mdx, docker/compose.yaml).

Proxmox VE (9.1 takes an OCI archive as a CT template, docs/proxmox-lxc.md): skopeo copies that very manifest into
the template cache, keeping its digest; the CT is made and given its GPUs with lxc/pct.py's lines (the description
records the registry digest, whose verdicts `preflight` and `verify --lxc` check), and /dev/shm with the preflight's
own mount line.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..lxc import gpu_checks, pct
from ..lxc.target import Target, config_line
from ..verify import gpus as gpu_query
from ..verify.asked import SHM_SIZE
from ..workspace import SAFE_NAME
from .candidates import Candidate
from .reading import Machine

PORT = 30000
# The cache folders an image's Env may name (images/Dockerfile, the warm stage): one volume holds them.
CACHE_VARS = ("SGLANG_CACHE_DIR", "TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR",
              "TORCHINDUCTOR_CACHE_DIR")
DEFAULT_CACHE = "/root/.cache"
HF_CACHE = "/root/.cache/huggingface"
CT_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True, kw_only=True)
class Lines:
    """Shell lines, each one command, to run in order; config lines to add to a CT's config."""

    docker: tuple[str, ...] = ()
    proxmox: tuple[str, ...] = ()
    ct_config: tuple[str, ...] = ()     # for /etc/pve/lxc/CTID.conf
    ct_config_path: str = ""


def cache_dirs(env: Sequence[tuple[str, str]]) -> list[str]:
    """The folders to keep: those the image's Env names, none inside another; else root's ~/.cache."""
    named = sorted({value.rstrip("/") for key, value in env if key in CACHE_VARS and value.startswith("/")})
    kept = [d for d in named if not any(d.startswith(f"{other}/") for other in named if other != d)]
    return kept or [DEFAULT_CACHE]


def gpu_request(machine: Machine) -> list[str]:
    if machine.docker is not None and machine.docker.runtime == "cdi":
        return ["--device", f"{gpu_query.CDI_KIND}=all"]
    return ["--gpus", "all", "-e", f"NVIDIA_DRIVER_CAPABILITIES={gpu_query.DRIVER_CAPABILITIES}"]


def pinned(candidate: Candidate) -> str:
    """The image by the digest that was checked: this platform's manifest."""
    return f"{candidate.repository}@{candidate.platform_digest}"


def short(candidate: Candidate) -> str:
    return (candidate.platform_digest or "").removeprefix("sha256:")[:12]


def docker_lines(candidate: Candidate, machine: Machine, *, home: str, model: str) -> tuple[str, ...]:
    ref = pinned(candidate)
    volume = f"sglang-images-cache-{short(candidate)}"
    mounts = [x for i, d in enumerate(cache_dirs(candidate.env)) for x in ("-v", f"{volume}{f'-{i}' if i else ''}:{d}")]
    run = ["docker", "run", "--rm", "--name", "sglang", *gpu_request(machine),
           "--shm-size", SHM_SIZE, "--ulimit", "memlock=-1",
           "--ulimit", f"stack={gpu_query.STACK_BYTES}", "-p", f"{PORT}:{PORT}", *mounts,
           "-v", f"{home.rstrip('/')}/.cache/huggingface:{HF_CACHE}", "-e", "HF_TOKEN", ref,
           "python3", "-m", "sglang.launch_server", "--model-path", model, "--host", "0.0.0.0", "--port", str(PORT)]
    return shlex.join(["docker", "pull", ref]), shlex.join(run)


def archive_name(candidate: Candidate) -> str:
    name = candidate.cell if candidate.cell and SAFE_NAME.fullmatch(candidate.cell) else None
    return f"{name or 'sglang-images-' + short(candidate)}.oci.tar"


def proxmox_lines(candidate: Candidate, machine: Machine, *, ctid: str, model: str) -> Lines:
    gpus = [n for n in machine.nodes if n.removeprefix("/dev/nvidia").isdigit()] or ["/dev/nvidia0"]
    plan = pct.Plan(archive=archive_name(candidate), ctid=ctid, cuda=candidate.cuda,
                    gpus=(*gpus, *CT_NODES), registry_source=pinned(candidate),
                    server_args=f"--model-path {model} --host 0.0.0.0 --port {PORT}")
    copy = ["skopeo", "copy", "--preserve-digests", f"docker://{pinned(candidate)}",
            f"oci-archive:{pct.TEMPLATE_CACHE}/{plan.archive}:latest"]
    cuda = ["--cuda", candidate.cuda] if candidate.cuda else []
    argvs = [copy, pct.create(plan), pct.set_resources(plan), ["pct", "start", ctid],
             ["sglang-images", "preflight", "--ctid", ctid, *cuda], pct.server_args(plan)]
    target = Target("pct", ctid)
    return Lines(proxmox=tuple(shlex.join(a) for a in argvs),
                 ct_config=(config_line(target, "lxc.mount.entry", gpu_checks.SHM_MOUNT),),
                 ct_config_path=str(target.config_path()))


def lines(candidate: Candidate, machine: Machine, *, home: str, model: str, ctid: str) -> Lines:
    """Docker's lines where Docker is (or where nothing else is), and a CT's on a Proxmox host or inside a CT."""
    in_ct = machine.proxmox_host or machine.lxc is not None
    docker = docker_lines(candidate, machine, home=home, model=model) if machine.docker or not in_ct else ()
    ct = proxmox_lines(candidate, machine, ctid=ctid, model=model) if in_ct else Lines()
    return Lines(docker=docker, proxmox=ct.proxmox, ct_config=ct.ct_config, ct_config_path=ct.ct_config_path)
