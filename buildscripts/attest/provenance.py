"""The SLSA v1 provenance predicate (https://slsa.dev/provenance/v1) of one cell's image, as pydantic models of
our own: in-toto-attestation's Python bindings (the protobuf models) were last released in 2023 and bring
protobuf for a document of a dozen fields, which pydantic checks as well.

- buildType: this project's own (trust/described.py BUILD_TYPE): a cell of matrix.yaml built by `nox -s build`;
- externalParameters: the cell (its id and the digest of its definition, matrix/definition.py: what a record of
  it counts for) and the build's parameters (platform, candidate tag, inputs hash, toolkit, warm archs);
- resolvedDependencies: the cell's lockfiles (sha256 of each file), `images/` at its commit (the git tree hash,
  and whether the work tree had changes there), and the base image's origin (debootstrap suite and variant, the
  base image's id);
- runDetails.builder: who ran the build (the CI run's URL, else this machine) and the engine's version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import proc
from ..trust.described import BUILD_TYPE

LOCAL_BUILDER = "urn:sglang-images:builder:local"


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ResourceDescriptor(Model):
    name: str | None = None
    uri: str | None = None
    digest: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, Any] = Field(default_factory=dict)


class BuildDefinition(Model):
    build_type: str = Field(alias="buildType")
    external_parameters: dict[str, Any] = Field(alias="externalParameters")
    internal_parameters: dict[str, Any] = Field(default_factory=dict, alias="internalParameters")
    resolved_dependencies: list[ResourceDescriptor] = Field(default_factory=list, alias="resolvedDependencies")


class Builder(Model):
    id: str
    version: dict[str, str] = Field(default_factory=dict)


class BuildMetadata(Model):
    invocation_id: str | None = Field(default=None, alias="invocationId")
    started_on: str | None = Field(default=None, alias="startedOn")
    finished_on: str | None = Field(default=None, alias="finishedOn")


class RunDetails(Model):
    builder: Builder
    metadata: BuildMetadata = Field(default_factory=BuildMetadata)


class Provenance(Model):
    build_definition: BuildDefinition = Field(alias="buildDefinition")
    run_details: RunDetails = Field(alias="runDetails")

    def predicate(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True, kw_only=True)
class BuildFacts:
    """What the build knew when it made the image: one object from the caller, never read back from the image."""

    cell_id: str
    definition_digest: str           # sha256 hex of the cell's definition (matrix/definition.py)
    parameters: Mapping[str, Any]    # platform, candidate tag, inputs hash, toolkit, warm archs
    locks: Sequence[tuple[str, Path]]   # (name as the workspace shows it, path)
    base: Mapping[str, str]          # suite, variant, image id, inputs hash (build/base.py)
    engine: str                      # the engine's version
    builder_id: str                  # the CI run's URL, else LOCAL_BUILDER
    run_id: str
    finished: str                    # when the image was made (the build's own start is not recorded)
    cached: bool = False             # every layer came from the build cache


def images_tree(root: Path) -> ResourceDescriptor:
    """`images/` at its commit: git's tree hash of the folder, and whether the work tree changes it."""
    git = proc.which("git", hint="apt-get install git")
    tree = proc.run([git, "-C", str(root), "rev-parse", "HEAD:images"], timeout=30)
    if not tree.ok:
        return ResourceDescriptor(name="images/", annotations={"unknown": "not a git checkout: no tree hash"})
    commit = proc.run([git, "-C", str(root), "rev-parse", "HEAD"], timeout=30)
    dirty = proc.run([git, "-C", str(root), "status", "--porcelain", "--", "images"], timeout=30)
    return ResourceDescriptor(name="images/", digest={"gitTree": tree.output.strip()},
                              annotations={"commit": commit.output.strip(), "dirty": bool(dirty.output.strip())})


def make(facts: BuildFacts, images: ResourceDescriptor) -> Provenance:
    locks = [ResourceDescriptor(name=f"lockfiles/{shown}", digest={"sha256": hashlib.sha256(path.read_bytes())
                                                                   .hexdigest()}) for shown, path in facts.locks]
    base = ResourceDescriptor(name="base", uri=f"debootstrap:{facts.base.get('suite', '')}",
                              digest={"sha256": facts.base.get("id", "").removeprefix("sha256:")},
                              annotations={k: v for k, v in facts.base.items() if k != "id"})
    return Provenance(
        build_definition=BuildDefinition(
            build_type=BUILD_TYPE,
            external_parameters={"cell": facts.cell_id, "definition": {"sha256": facts.definition_digest},
                                "parameters": dict(facts.parameters)},
            internal_parameters={"cached": facts.cached},
            resolved_dependencies=[*locks, images, base]),
        run_details=RunDetails(builder=Builder(id=facts.builder_id, version={"engine": facts.engine}),
                              metadata=BuildMetadata(invocation_id=facts.run_id, finished_on=facts.finished)))
