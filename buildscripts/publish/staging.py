"""`nox -s build -- --stage REPO`: build once, on a machine without a GPU, for every GPU job to verify.

A cell whose CPU stages all passed is pushed (by image id) to the staging repository under its
candidate tag; its manifest digest is then read back from the registry (not taken from the push's
output alone), checked to be the image that was tested (its config or manifest digest is the image
id), and recorded in the cell's results as `image.repository` and `image.digest`. GPU jobs verify
that digest (`nox -s verify -- REPO@sha256:…`), and promotion points the good tags at it.

A cell that failed (or was expected to fail) a CPU stage is not staged: its GPU stages would be
aborted after that failure on any GPU, so a GPU job for it would only pull gigabytes to say so again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import engine, log
from ..errors import RegistryError, ResultsError
from ..registry import manifests, references, through_engine
from ..results import CellResult, ImageInfo, Verdict

if TYPE_CHECKING:
    import docker

STAGED_VERDICTS = (Verdict.CPU_CHECKED,)


def check(repository: str, env: Mapping[str, str]) -> str:
    """Before the first build: `--stage` names a registry repository, skopeo is here and the registry
    answers (a registry that does not would fail the run after an hour of building)."""
    references.check_repository(repository, "--stage")
    manifests.skopeo()
    manifests.tags(repository, env)   # [] for a repository not pushed to yet; raises when unreachable
    return repository


def stage(client: docker.DockerClient, cell: CellResult, repository: str, env: Mapping[str, str], *,
          log_file: Path | None = None) -> ImageInfo:
    """Push the cell's tested image to `repository` and return its image facts with the digest read back."""
    image = cell.image
    if not image.id or not image.ref or ":" not in image.ref:
        msg = f"{cell.cell_id}: no image id and candidate tag to stage"
        raise ResultsError(msg, hint="this is a bug: a cell that passed its CPU stages has both")
    ref = f"{repository}:{image.ref.rsplit(':', 1)[1]}"
    pushed = through_engine.push(client, image.id, ref)
    through_engine.untag(client, ref)
    found = manifests.locate(ref, env, platform=engine.platform(client), log=log_file)
    if found.digest != pushed:
        msg = f"{ref}: the registry serves {found.digest}, but the push reported {pushed}"
        raise RegistryError(msg, hint="someone else pushed to this tag meanwhile; run the build again")
    if image.id not in found.ids:
        msg = f"{ref}@{found.digest} is not the tested image {image.id}"
        raise RegistryError(msg, hint="the registry altered the image on the way; do not use it")
    log.step(cell.cell_id, "stage", "passed", detail=found.subject)
    return image.model_copy(update={"repository": repository, "digest": found.digest,
                                    "platform_digest": found.platform_digest})
