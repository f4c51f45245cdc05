"""Images for the container path on an H200 test machine, made from that machine's own root filesystem
(its Python 3.12, torch 2.11.0+cu130 and CUDA 13.0 toolkit) plus SGLang 0.5.16 staged in a site folder.

    python3 make_images.py BASE_IMAGE SITE

BASE_IMAGE (made by run.sh with `docker import`) carries no CUDA environment. Three images are derived
from it, each labelled with the cell coordinates it truly has (this project's label names), so that
`verify IMAGE` and `tag` name them and their good tags:
  h200-good        CUDA_HOME=/usr/local/cuda and nvcc on PATH: what a toolkit image looks like
  h200-no-toolkit  no /usr/local/cuda at all, no CUDA_HOME: the seed incident's container
  h200-no-nvcc     /usr/local/cuda without bin/ and nvvm/: a CUDA runtime image
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import docker

PREFIX = "io.sglang-images"
CUDA = "/usr/local/cuda-13.0"
VARIANTS = {
    "h200-good": ("system13.0", [], ["ENV CUDA_HOME=/usr/local/cuda", "ENV PATH=/usr/local/cuda/bin:{path}"]),
    "h200-no-toolkit": ("none", ["rm", "-rf", "/usr/local/cuda", CUDA], []),
    "h200-no-nvcc": ("runtime13.0", ["rm", "-rf", f"{CUDA}/bin", f"{CUDA}/nvvm"], []),
}


def os_name() -> str:
    text = Path("/etc/os-release").read_text()
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return fields["ID"].strip('"') + fields["VERSION_ID"].strip('"')


def main(base: str, site: str) -> int:
    client = docker.from_env()
    path = next(e.split("=", 1)[1] for e in client.images.get(base).attrs["Config"]["Env"] if e.startswith("PATH="))
    python = ".".join(platform.python_version_tuple()[:2])
    for name, (toolkit, command, env) in VARIANTS.items():
        axes = {"base": os_name(), "python": python, "torch": "2.11.0", "cuda": "cu130", "lane": "torch2.11.0-cu130",
                "sglang": "0.5.16", "toolkit": toolkit, "archs": "sm_90a"}
        axes["cell"] = f"sglang{axes['sglang']}-{axes['lane']}-{toolkit}-{axes['base']}"
        labels = [f'LABEL "{PREFIX}.{k}"="{v}"' for k, v in axes.items()]
        labels.append(f'LABEL "{PREFIX}.note"="made from an H200 test machine root with SGLang staged in {site}"')
        made = client.containers.create(base, command or ["true"], network_mode="host")
        try:
            made.start()
            status = made.wait()["StatusCode"]
            if status != 0:
                print(f"{name}: {command} exited {status}", file=sys.stderr)
                return 1
            image = made.commit(repository=name, tag="latest",
                                changes=[c.format(path=path) for c in env] + labels)
        finally:
            made.remove(force=True)
        print(f"{name}: {image.id} cell {axes['cell']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
