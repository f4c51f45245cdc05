"""One cell's SBOM and provenance, made after its image was built and pushed: read from the image, signed,
written beside the run's results, attached to the platform manifest's digest (signed.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..trust import described
from ..trust.keys import PublicKey, SigningKey
from . import inventory, provenance, sbom, signed

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True, kw_only=True)
class Request:
    """What describing one image takes: the local image, where it was pushed, what built it, who signs."""

    image: str                        # the local image id (or name) the inventory is read from
    subject: sbom.Subject             # where it was pushed (its platform manifest's digest), as which cell
    facts: provenance.BuildFacts
    root: Path                        # the project (for images/' tree hash)
    run_dir: Path
    key: SigningKey
    trusted: Sequence[PublicKey]
    attach: bool = True


def make(client: docker.DockerClient, request: Request) -> list[Path]:
    """Write the signed SBOM and provenance of the image; attach them unless the request says not to."""
    found = inventory.from_image(client, request.image)
    subject = request.subject
    bom_json = sbom.to_json(sbom.bom(found, subject, request.facts.locks))
    made = provenance.make(request.facts, provenance.images_tree(request.root))
    paths = [signed.write(request.run_dir, request.facts.cell_id,
                          signed.statement(kind, predicate, subject.repository, subject.digest), request.key)
             for kind, predicate in ((described.SBOM, json.loads(bom_json)),
                                     (described.PROVENANCE, made.predicate()))]
    if request.attach:
        signed.attach(paths, f"{subject.repository}@{subject.digest}", trusted=request.trusted)
    return paths
