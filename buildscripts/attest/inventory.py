"""The image's inventory, read from the built image itself: scan.py runs inside it, and its output is read here.

The image is not trusted: scan.py runs as nobody, with no network, no capability, a read-only root and a deadline,
and its output is read strictly and bounded (pydantic, at most MOST_OUTPUT bytes). What it lists is what the
image's own files say (dpkg's status, each distribution's METADATA, the warm report): an SBOM of the image's word
about itself, made by this project's builder, not a proof of what the bytes do (docs/trust.md).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import strictjson
from ..errors import EngineError
from ..matrix.schema import LABEL_PREFIX
from . import scan

if TYPE_CHECKING:
    import docker

MOST_OUTPUT = 16 << 20
DEADLINE_S = 120
PYTHON = "/usr/bin/python3"     # Debian's, which every base carries (build/base.py); not the venv's
TEXT = Field(max_length=512)


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DebianPackage(Strict):
    name: str = TEXT
    version: str = TEXT
    arch: str = TEXT


class PythonDistribution(Strict):
    name: str = TEXT
    version: str = TEXT
    site: str = TEXT


class BakedCache(Strict):
    """One baked kernel module (images/warm/bake.py's report) and the archs it was built for."""

    kind: str
    module: str
    profile: str
    archs: tuple[str, ...]


class Inventory(Strict):
    debian: tuple[DebianPackage, ...]
    python: tuple[PythonDistribution, ...]
    os: dict[str, str]
    toolkit_lock: bool
    baked: tuple[BakedCache, ...] = ()
    warm_archs: tuple[str, ...] = ()


def _baked(report: Any) -> tuple[tuple[BakedCache, ...], tuple[str, ...]]:
    """The modules the warm report says were built, each with the archs it was built for."""
    if not isinstance(report, dict):
        return (), ()
    modules: dict[tuple[str, str, str], list[str]] = {}
    for per_arch in report.get("baked") or []:
        arch = str(per_arch.get("arch", "")) if isinstance(per_arch, dict) else ""
        for built in (per_arch.get("built") or []) if arch else []:
            if isinstance(built, dict) and built.get("ok"):
                key = (str(built.get("kind", "")), str(built.get("module", "")), str(built.get("profile", "")))
                modules.setdefault(key, []).append(arch)
    baked = tuple(BakedCache(kind=k, module=m, profile=p, archs=tuple(a)) for (k, m, p), a in sorted(modules.items()))
    archs = report.get("archs")
    return baked, tuple(str(a) for a in archs) if isinstance(archs, list) else ()


def read(output: bytes | str, where: str) -> Inventory:
    """The inventory scan.py printed for `where`; EngineError saying what was wrong with it."""
    try:
        data = strictjson.loads_object(output, fields=frozenset(), free=frozenset())
        baked, archs = _baked(data.pop("warm", None))
        return Inventory.model_validate({**data, "baked": baked, "warm_archs": archs})
    except (ValueError, ValidationError) as exc:   # strictjson.Ambiguous is a ValueError
        msg = f"the inventory of {where} cannot be read: {str(exc)[:300]}"
        raise EngineError(msg, hint="the image's files are not as this project's images hold them") from None


def from_tree(root: Path) -> Inventory:
    """The inventory of an unpacked file system at `root` (as scan.py reads it inside an image)."""
    import json

    return read(json.dumps(scan.scan(str(root))), str(root))


def from_image(client: docker.DockerClient, image: str) -> Inventory:
    """The inventory of a local image (id or name): scan.py run inside it, isolated."""
    import docker.errors
    import requests.exceptions
    from docker.types import LogConfig

    source = Path(scan.__file__).read_text(encoding="utf-8")
    name = f"sglang-images-inventory-{uuid.uuid4().hex[:12]}"
    container = None
    try:
        container = client.containers.create(
            image, [PYTHON, "-I", "-S", "-c", source, "/"], entrypoint=[], name=name, user="65534:65534",
            network_disabled=True, network_mode="none", read_only=True, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], environment={}, labels={f"{LABEL_PREFIX}.inventory": image},
            mem_limit="1g", pids_limit=64,
            # the engine keeps what it prints: at most a little more than we read, whatever the image writes
            log_config=LogConfig(type=LogConfig.types.JSON, config={"max-size": "20m", "max-file": "1"}))
        container.start()
        status = container.wait(timeout=DEADLINE_S)
        output = container.logs(stdout=True, stderr=False)[:MOST_OUTPUT + 1]
        if status.get("StatusCode") != 0 or len(output) > MOST_OUTPUT:
            tail = container.logs(stdout=False, stderr=True)[-400:].decode(errors="replace")
            msg = f"reading the inventory of {image} failed (exit {status.get('StatusCode')}): {tail.strip()}"
            raise EngineError(msg, hint=f"the image needs {PYTHON} (every base of matrix.yaml has it)")
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:   # a wait past DEADLINE_S
        msg = f"reading the inventory of {image} failed: {exc}"
        raise EngineError(msg, hint="is the image in the local engine? (`docker images`)") from None
    finally:
        if container is not None:
            container.remove(force=True)
    return read(output, image)
