"""Push, read back and pull images through the Docker engine, by image id and by digest.

The engine does the talking to the registry, so authentication comes from docker's own
config.json (the SDK reads it and sends it as a header); no credential passes through this
module's messages. Plain HTTP works for registries on 127.0.0.0/8, which the engine treats as
insecure-allowed by default (`docker info` lists them under "Insecure Registries").
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from typing import TYPE_CHECKING, Any

from ..errors import RegistryError
from .failures import DEADLINE_S, PULL, PUSH, READ, failure, no_answer
from .references import by_digest

if TYPE_CHECKING:
    import docker

PULL_SILENCE = 10            # the engine's silence a pull may have, in registry deadlines (200 s by default)
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
        digest, refused = None, None
        for event in events:  # read to the end, so that the engine's stream is closed
            if "error" in event and refused is None:
                refused = str(event.get("error"))
            aux = event.get("aux") or {}
            if aux.get("Tag") == tag and aux.get("Digest"):
                digest = str(aux["Digest"])
    except docker.errors.APIError as exc:
        raise failure(PUSH, ref, str(exc.explanation or exc)) from None
    if refused is not None:
        raise failure(PUSH, ref, refused)
    if digest is None:
        raise failure(PUSH, ref, "the engine reported no digest")
    return digest


def remote_digest(client: docker.DockerClient, ref: str) -> str:
    """The manifest digest the registry serves for `ref` now (read back, not remembered)."""
    import docker.errors

    try:
        found = client.api.inspect_distribution(ref)  # type: ignore[no-untyped-call]
    except docker.errors.APIError as exc:
        raise failure(READ, ref, str(exc.explanation or exc)) from None
    return str(found["Descriptor"]["digest"])


def untag(client: docker.DockerClient, ref: str) -> None:
    """Drop a local tag (never the image behind it while other tags hold it)."""
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):  # already gone: nothing to undo
        client.images.remove(ref, noprune=True)


def pull(client: docker.DockerClient, ref: str, stall_s: float = DEADLINE_S) -> str:
    """Pull `ref` (`repo:tag` or `repo@sha256:...`) into the engine and return the local image id.

    The engine reports progress as it goes (waiting, downloading, extracting, every few hundred ms while bytes
    move): a pull that reports nothing for `stall_s` fails, naming the registry, as every other read of a
    registry does. A pull's size has no limit; a registry that stops sending has."""
    import docker.errors
    import requests.exceptions

    pinned = by_digest(ref)
    if pinned:
        repository, tag = pinned
    else:
        name, sep, tag = ref.rpartition(":")
        repository, tag = (name, tag) if sep and "/" not in tag else (ref, "latest")
    try:
        stream = client.api.pull(repository, tag=tag, stream=True, decode=True)
        error = _watch(stream, stall_s)
    except docker.errors.APIError as exc:
        raise failure(PULL, ref, str(exc.explanation or exc)) from None
    except requests.exceptions.RequestException as exc:   # the engine's connection broke mid-pull
        raise failure(PULL, ref, f"the engine's answer broke off: {exc}") from None
    except TimeoutError:
        raise no_answer(PULL, ref, stall_s) from None
    if error:
        raise failure(PULL, ref, error)
    try:
        image = client.images.get(f"{repository}@{tag}" if pinned else f"{repository}:{tag}")
    except docker.errors.APIError as exc:
        raise failure(PULL, ref, str(exc.explanation or exc)) from None
    return str(image.id)


def _watch(stream: Any, stall_s: float) -> str | None:
    """Drain the engine's progress messages of a pull; the error it ended with, if any. TimeoutError when
    no message came for `stall_s`: the stalled read is left to its thread, and the engine cancels the pull
    when this process ends and the connection closes."""
    messages: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()

    def drain() -> None:
        try:
            for message in stream:
                messages.put(message)
        except BaseException as exc:   # handed to the caller's thread, raised there
            messages.put(exc)
        messages.put(None)

    threading.Thread(target=drain, name="pull-progress", daemon=True).start()
    error = None
    while True:
        try:
            message = messages.get(timeout=stall_s)
        except queue.Empty:
            raise TimeoutError from None
        if message is None:
            return error
        if isinstance(message, BaseException):
            raise message
        if isinstance(message, dict) and message.get("error"):
            error = str(message.get("error"))
