"""An image of the engine, read for comparison (saved.Image); a name the engine does not know is a clear error."""

from __future__ import annotations

import tarfile
from typing import TYPE_CHECKING

from ..errors import ConfigError, EngineError
from .saved import CHUNK, Image, read_saved

if TYPE_CHECKING:
    import docker


def read(client: docker.DockerClient, ref: str) -> Image:
    """`ref` (a tag or an id) as the engine saves it, read as a stream."""
    import docker.errors

    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        msg = f"no image {ref!r} in the Docker engine"
        raise ConfigError(msg, hint="`docker images` lists them; pull or build it first") from None
    try:
        return read_saved(ref, image.save(chunk_size=CHUNK, named=False))
    except (tarfile.TarError, ValueError, KeyError, EOFError) as exc:
        msg = f"the engine's saved archive of {ref} could not be read: {exc}"
        raise EngineError(msg, hint=f"check that `docker save {ref}` writes a whole archive") from None
