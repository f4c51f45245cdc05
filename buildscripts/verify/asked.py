"""What a command asks of every verification it makes: its options, made once by the command (commands/build.py,
commands/verify.py: their Options are made of `Asked`, with the defaults both share), and where the ladder runs
(`Place`). Provisioning makes each verification's request of them (provision.py, request.py).

Nothing here is loaded but what the Options need to exist: the CLI imports every command's module when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..lxc.target import Target
    from ..matrix import Matrix
    from ..workspace import Workspace

# /dev/shm is 64 MB by default in Docker; NCCL and SGLang's shared-memory queues need far more
# (a too-small /dev/shm is a known NCCL failure: "Error while creating shared memory segment").
SHM_SIZE = "16g"
KEEP_ENV = "SGLANG_IMAGES_KEEP_CONTAINERS"   # =1: leave verification containers behind, for debugging


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where a verification runs: a container of an image (the build's, or `verify IMAGE`), this machine's Python
    (`--host`), or a running LXC container in place (`--lxc`, `--lxc-name`)."""

    image: str | None = None            # a reference or id; provisioning puts the pulled image's id here
    pull: bool = False                  # pull `image` by digest first (REPO@sha256:… always is)
    host: bool = False
    target: Target | None = None
    python: str | None = None           # the interpreter: host default this one, LXC default python3


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What a command asks of each verification it makes (its options, made once by the command)."""

    ws: Workspace                       # where runs go: runs/RUN_ID/CELL/probe.log
    matrix: Matrix                      # read once: the profiles and cells the options name
    env: Mapping[str, str] = field(default_factory=dict)
    run_id: str = "manual"
    stages: tuple[str, ...] | None = None       # None: the whole ladder
    profile: str = "default"                    # the server profile of matrix.yaml the GPU stages use
    gpu: int = 0                                # the GPU the GPU stages run on (a tp profile: every GPU)
    per_gpu: bool = False                       # one container per GPU, side by side
    archs: tuple[str, ...] | None = None        # None: the cell's, else the image's labels, else DEFAULT_ARCHS
    lane_cuda: str | None = None                # None: the cell's lane, else the image's labels
    stage_timeout: float | None = None          # None: 900 s, or the profile's timeout_s when longer
    shm_size: str = SHM_SIZE                    # /dev/shm of a verification container, as docker's --shm-size
    keep_containers: bool = False               # leave containers behind (KEEP_ENV=1)

    @property
    def run_dir(self) -> Path:
        return self.ws.run_dir(self.run_id)
