"""A root file system tar as an image whose id is the same wherever and whenever it is made.

`docker import` stamps the time of the import into the image's config (and so into its id: two imports of one
tar give two ids) and records the engine's own CPU whatever `--platform` says (Docker 20.10). So the image is
written here instead, as the engine's own save format (a docker-archive: manifest.json, the config, the layer
tar; https://github.com/moby/moby/blob/master/image/spec/v1.2.md), and `docker load`ed: its config holds
nothing but the platform, the environment, the labels, the layer's digest and a creation time that is the
root file system's own epoch. The same tar and labels give the same config bytes, and the image id is their
sha256, on any engine that loads it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BaseBuildError

if TYPE_CHECKING:
    import docker

CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What the image says of itself besides its one layer."""

    platform: str                    # linux/amd64, linux/arm64
    env: Sequence[str]
    labels: Mapping[str, str]
    epoch: int                       # its creation time: the root file system's SOURCE_DATE_EPOCH
    created_by: str                  # its one history entry


def config(spec: Spec, diff_id: str) -> bytes:
    """The image config, serialised the one way (sorted keys, no spaces): its sha256 is the image id."""
    os_name, _, arch = spec.platform.partition("/")
    arch, _, variant = arch.partition("/")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(spec.epoch))
    body: dict[str, Any] = {
        "architecture": arch, "os": os_name, "created": created,
        "config": {"Env": list(spec.env), "Labels": dict(spec.labels)},
        "history": [{"created": created, "created_by": spec.created_by}],
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    if variant or arch == "arm64":
        body["variant"] = variant or "v8"   # as BuildKit writes linux/arm64 (v8 is what the platform means)
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def write(layer: Path, spec: Spec, archive: Path, *, tag: str) -> str:
    """The docker-archive `archive` of one image: `layer` (an uncompressed tar) under `spec`, named `tag`;
    returns the image id it loads as."""
    diff_id = sha256_of(layer)
    body = config(spec, diff_id)
    image_id = hashlib.sha256(body).hexdigest()
    layer_dir = diff_id.removeprefix("sha256:")
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": [f"{layer_dir}/layer.tar"]}])
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, f"{image_id}.json", body)
        tar.add(layer, arcname=f"{layer_dir}/layer.tar", filter=_plain)
        _add_bytes(tar, "manifest.json", manifest.encode())
    return "sha256:" + image_id


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def load(client: docker.DockerClient, layer: Path, spec: Spec, *, tag: str, work: Path) -> str:
    """`layer` loaded as the image `tag` under `spec`; its id, as the engine names it."""
    import docker.errors

    archive = work / "image.docker.tar"
    write(layer, spec, archive, tag=tag)
    try:
        with archive.open("rb") as fh:
            client.images.load(fh)
    except docker.errors.APIError as exc:
        msg = f"the engine refused to load the base image {tag}: {exc.explanation}"
        raise BaseBuildError(msg, hint="check the engine's log (`journalctl -u docker`) and free disk space") from None
    finally:
        archive.unlink(missing_ok=True)
    # The engine's image store names it: the classic store by the config's digest (what `write` returns), the
    # containerd store (Docker 26 and later, optionally) by the digest of the manifest it writes itself.
    return str(client.images.get(tag).id)
