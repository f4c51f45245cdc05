"""Push, read back and pull images through the Docker engine, by image id and by digest.

The engine does the talking to the registry, so authentication comes from docker's own
config.json (the SDK reads it and sends it as a header); no credential passes through this
module's messages. Plain HTTP works for registries on 127.0.0.0/8, which the engine treats as
insecure-allowed by default (`docker info` lists them under "Insecure Registries").
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any

from .. import distribution
from ..errors import RegistryError

if TYPE_CHECKING:
    import docker

PUSH, PULL, READ = distribution.PUSH, distribution.PULL, distribution.READ
HOST_RE = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9._/-]+)?")  # ASCII digits only (`\d` takes any)


def check_url(url: str) -> str:
    """`host[:port][/namespace]` without a scheme; the engine picks https, or http on loopback."""
    url = url.strip().rstrip("/")
    if "://" in url or not HOST_RE.fullmatch(url):
        # `user:password@host` is a likely mistake: the message must not show what came before the @
        shown = "***@" + url.rpartition("@")[2] if "@" in url else url
        msg = f"registry {shown!r} is not HOST[:PORT][/NAMESPACE] (no scheme, no credentials)"
        hint = "e.g. --registry 127.0.0.1:5000, or registry.url: ghcr.io/ORG in matrix.yaml"
        raise RegistryError(msg, hint=hint)
    return url


def split_ref(ref: str) -> tuple[str, str]:
    """`host:5000/repo:tag` -> (`host:5000/repo`, `tag`); the port's colon is not the tag's."""
    repository, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repository, tag


def push(client: docker.DockerClient, image_id: str, ref: str) -> str:
    """Tag `image_id` (by id, so nothing else can slip in) as `ref`, push it, return the manifest digest."""
    import docker.errors

    repository, tag = split_ref(ref)
    try:
        client.api.tag(image_id, repository, tag)
        events: Any = client.api.push(repository, tag=tag, stream=True, decode=True)
        digest, failure = None, None
        for event in events:  # read to the end, so that the engine's stream is closed
            if "error" in event and failure is None:
                failure = str(event.get("error"))
            aux = event.get("aux") or {}
            if aux.get("Tag") == tag and aux.get("Digest"):
                digest = str(aux["Digest"])
    except docker.errors.APIError as exc:
        raise distribution.failure(PUSH, ref, str(exc.explanation or exc)) from None
    if failure is not None:
        raise distribution.failure(PUSH, ref, failure)
    if digest is None:
        raise distribution.failure(PUSH, ref, "the engine reported no digest")
    return digest


def remote_digest(client: docker.DockerClient, ref: str) -> str:
    """The manifest digest the registry serves for `ref` now (read back, not remembered)."""
    import docker.errors

    try:
        found = client.api.inspect_distribution(ref)  # type: ignore[no-untyped-call]
    except docker.errors.APIError as exc:
        raise distribution.failure(READ, ref, str(exc.explanation or exc)) from None
    return str(found["Descriptor"]["digest"])


def untag(client: docker.DockerClient, ref: str) -> None:
    """Drop a local tag (never the image behind it while other tags hold it)."""
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):  # already gone: nothing to undo
        client.images.remove(ref, noprune=True)
