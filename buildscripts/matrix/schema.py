"""The schema of matrix.yaml: pydantic models that forbid unknown keys.

Loading and the error messages (YAML line, did-you-mean) live in `load.py`; this module is only
the shape of the file, so that it can be read top to bottom as documentation.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .tagtemplates import template_problems

ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")
VERSION_RE = r"^\d+(\.\d+){1,3}([a-z0-9.+-]*)$"
NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"
CUDA_FLAVOURS: dict[str, str] = {"cu128": "12.8", "cu129": "12.9", "cu130": "13.0"}
LABEL_PREFIX = "io.sglang-images"  # the namespace of every label this project puts on images

Version = Annotated[str, Field(pattern=VERSION_RE)]
Name = Annotated[str, Field(pattern=NAME_RE)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Debootstrap(Strict):
    suite: Name = Field(description="Debian suite, e.g. bookworm")
    variant: Literal["minbase", "buildd"] = "minbase"
    include: tuple[str, ...] = Field(default=(), description="extra Debian packages baked into the base")


class Base(Strict):
    """Where the OS layer comes from: debootstrap (no registry needed) or a registry image."""

    debootstrap: Debootstrap | None = None
    image: str | None = Field(default=None, description="registry reference, e.g. debian:bookworm-slim")
    python: Version = Field(description="the Python that the image's Debian packages provide")
    platform: str = Field(
        pattern=r"^x86_64-manylinux_2_\d+$",
        description="wheel platform that the base's glibc supports, used for locking",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Base:
        if (self.debootstrap is None) == (self.image is None):
            msg = "give exactly one of `debootstrap` or `image`"
            raise ValueError(msg)
        return self


class TorchLane(Strict):
    torch: Version
    cuda: str = Field(description="CUDA flavour of the torch wheels: " + ", ".join(CUDA_FLAVOURS))
    index: str | None = Field(default=None, description="package index URL; default: the host's pip index")

    @field_validator("cuda")
    @classmethod
    def _known_flavour(cls, value: str) -> str:
        if value not in CUDA_FLAVOURS:
            msg = f"unknown torch CUDA flavour {value!r}; known: {', '.join(CUDA_FLAVOURS)}"
            raise ValueError(msg)
        return value

    @property
    def id(self) -> str:
        return f"torch{self.torch}-{self.cuda}"

    @property
    def cuda_version(self) -> str:
        return CUDA_FLAVOURS[self.cuda]


class SGLang(Strict):
    version: Version
    torch: Version = Field(description="the torch version this SGLang release pins")


class Toolkit(Strict):
    """A CUDA toolkit layer recipe: pip requirements per CUDA flavour plus Debian packages."""

    description: str
    pip: dict[str, tuple[str, ...]] = Field(default_factory=dict, description="per CUDA flavour")
    apt: tuple[str, ...] = ()
    cuda_home: bool = Field(default=False, description="assemble /usr/local/cuda from the pip wheels")
    warm: bool = Field(default=False, description="bake the kernel caches a server start needs (images/warm/)")

    @model_validator(mode="after")
    def _warm_needs_a_compiler(self) -> Toolkit:
        # The caches are compiled at build time with the layer's own nvcc and g++: without a CUDA
        # home there is nothing to compile them with.
        if self.warm and not self.cuda_home:
            msg = "warm: true needs cuda_home: true (the kernel caches are compiled with the layer's nvcc)"
            raise ValueError(msg)
        return self

    @field_validator("pip")
    @classmethod
    def _known_flavours(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for flavour in value:
            if flavour not in CUDA_FLAVOURS:
                msg = f"unknown CUDA flavour {flavour!r}; known: {', '.join(CUDA_FLAVOURS)}"
                raise ValueError(msg)
        return value


class Rule(Strict):
    """Cells whose id matches the glob `match` are excluded (with `reason`)."""

    match: str
    reason: str


class Expectation(Strict):
    """A cell expected to fail at `stage` (like pytest's xfail): documented, not an error of the run."""

    match: str
    stage: Name | tuple[Name, ...] = Field(description="the stage it fails at, or a list of stages")
    failure_class: Name | None = Field(default=None, alias="class")
    reason: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def stages(self) -> tuple[str, ...]:
        return (self.stage,) if isinstance(self.stage, str) else self.stage


class Profile(Strict):
    """Server flags for the GPU stages (`python -m sglang.launch_server ...`)."""

    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: int = Field(default=900, gt=0)


class Tags(Strict):
    candidate: str = "{cell}-{inputs}"
    good: tuple[str, ...] = ("{sglang}-{lane}-{toolkit}", "{sglang}-{lane}-{toolkit}-verified-{arch}")
    repository: str = "sglang-images"

    @model_validator(mode="after")
    def _known_fields(self) -> Tags:
        problems = template_problems(self.candidate, self.good, self.repository)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Registry(Strict):
    url: str | None = Field(default=None, description="host[:port] of a registry to promote to")


class MatrixFile(Strict):
    schema_version: Literal[1] = Field(alias="schema")
    bases: dict[Name, Base]
    archs: tuple[str, ...]
    torch_lanes: tuple[TorchLane, ...]
    sglang: tuple[SGLang, ...]
    toolkits: dict[Name, Toolkit]
    exclude: tuple[Rule, ...] = ()
    expect: tuple[Expectation, ...] = ()
    profiles: dict[Name, Profile] = Field(default_factory=lambda: {"default": Profile()})
    tags: Tags = Tags()
    registry: Registry = Registry()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("archs")
    @classmethod
    def _arch_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arch in value:
            if not ARCH_RE.match(arch):
                msg = f"{arch!r} is not a GPU target; write sm_XX, sm_XXa or sm_XXf (e.g. sm_100a)"
                raise ValueError(msg)
        return value

    @field_validator("bases", "toolkits", "archs", "torch_lanes", "sglang")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if not value:
            msg = "must not be empty: the matrix needs at least one entry on every axis"
            raise ValueError(msg)
        return value
