"""`nox -s verify -- REPO@sha256:…`: the image a GPU job verifies is pulled by digest, never by tag.

A tag can move between the build that staged an image and the job that verifies it; a digest cannot.
So the reference must carry one, the engine pulls exactly that, and the record names it: the subject
digest (and, when it is an index, the digest of the manifest this engine's platform ran), read back
from the registry, with the pulled image id checked to be that image.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import engine, log
from ..errors import ConfigError, RegistryError
from ..registry import failures, manifests, references, through_engine
from ..results import ImageInfo

if TYPE_CHECKING:
    import docker


def pinned(ref: str) -> tuple[str, str]:
    """(repository, digest) of a `REPO@sha256:…` reference; a ConfigError saying why a tag is refused."""
    found = references.by_digest(ref)
    if found is None:
        msg = (f"{ref} names a tag, not a digest: a GPU job verifies the image the build staged, by digest "
               "(a tag can move between the build and this job)")
        raise ConfigError(msg, hint="pass REPO@sha256:… (the `image` of the verify jobs: `nox -s matrix -- --github "
                                    "--staged RESULTS`), or `skopeo inspect docker://REF` to find the digest")
    return found


def pull(client: docker.DockerClient, ref: str, env: Mapping[str, str], *, log_file: Path | None = None) -> ImageInfo:
    """Pull `ref` by digest and return what the record says of it: id, repository, digest(s)."""
    repository, digest = pinned(ref)
    subject = f"{repository}@{digest}"
    found = manifests.locate(subject, env, platform=engine.platform(client), log=log_file)
    with log.working(f"pulling {subject}"):
        image_id = through_engine.pull(client, subject, through_engine.PULL_SILENCE * failures.deadline(env))
    if image_id not in found.ids:
        msg = f"the engine pulled {image_id} for {subject}, which is not the image the registry serves there"
        raise RegistryError(msg, hint="check the engine's registry mirrors (`docker info`): a mirror served "
                                      "another image")
    log.info(f"pulled {subject}" + (f" (platform manifest {found.platform_digest})" if found.platform_digest else ""))
    return ImageInfo(ref=subject, id=image_id, repository=repository, digest=digest,
                     platform_digest=found.platform_digest)
