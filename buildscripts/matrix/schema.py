"""The schema of matrix.yaml: pydantic models that forbid unknown keys.

Loading and the error messages (YAML line, did-you-mean) live in `load.py`; this module is only
the shape of the file, so that it can be read top to bottom as documentation.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..refs import reference_problem, repository_problem
from .platforms import DEFAULT as DEFAULT_PLATFORM
from .platforms import WHEEL_PLATFORM_RE, Cpu, by_oci, of_wheel_platform
from .spellings import (
    CUDA_VERSION_RE,
    ArchList,
    FlavourName,
    Labels,
    Name,
    PlatformName,
    Version,
    arch_problem,
    flavour_version,
)
from .tagtemplates import template_problems

# A day: the longest wait a server or stage may ask for (waits refuse far larger numbers, and none is meant).
MAX_TIMEOUT_S = 86_400

LABEL_PREFIX = "io.sglang-images"  # the namespace of every label this project puts on images


def _reference(value: str) -> str:
    problem = reference_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _repository(value: str) -> str:
    problem = repository_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Debootstrap(Strict):
    suite: Name = Field(description="Debian suite, e.g. bookworm")
    variant: Literal["minbase", "buildd"] = "minbase"
    include: tuple[str, ...] = Field(default=(), description="extra Debian packages baked into the base")


class Base(Strict):
    """Where the OS layer comes from: debootstrap (no registry needed) or a registry image."""

    debootstrap: Debootstrap | None = None
    image: Annotated[str, AfterValidator(_reference)] | None = Field(
        default=None, description="registry reference, e.g. debian:bookworm-slim")
    python: Version = Field(description="the Python that the image's Debian packages provide")
    platform: str = Field(
        pattern=WHEEL_PLATFORM_RE,
        description="wheel platform that the base's glibc and CPU support, used for locking; its CPU "
                    "(x86_64, aarch64) is the platform the base's images are built for",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Base:
        if (self.debootstrap is None) == (self.image is None):
            msg = "give exactly one of `debootstrap` or `image`"
            raise ValueError(msg)
        return self

    @property
    def cpu(self) -> Cpu:
        """The CPU of the base's images (linux/amd64 for x86_64 wheels, linux/arm64 for aarch64)."""
        return of_wheel_platform(self.platform)


class CudaFlavour(Strict):
    """A CUDA flavour the matrix builds for: the CUDA build of a lane's torch wheels, and the CUDA major.minor that
    a toolkit layer's recipe for it (`toolkits: NAME: pip: FLAVOUR:`) must match. The version is spelled out for
    the reader and checked against the name (checks.py): it carries nothing the name does not."""

    version: str = Field(pattern=f"^{CUDA_VERSION_RE.pattern}$", description="CUDA major.minor, e.g. 13.0")


class TorchLane(Strict):
    torch: Version
    # checked against `cuda:` across entries (checks.py), with a did-you-mean among the declared flavours
    cuda: str = Field(description="CUDA flavour of the torch wheels, declared under `cuda:`")
    index: str | None = Field(default=None, description="package index URL; default: the host's pip index")

    @property
    def id(self) -> str:
        return f"torch{self.torch}-{self.cuda}"

    @property
    def cuda_version(self) -> str:
        return flavour_version(self.cuda) or ""  # a declared flavour (checked on load): never empty


class SGLang(Strict):
    version: Version
    torch: Version = Field(description="the torch version this SGLang release pins")


class Toolkit(Strict):
    """A CUDA toolkit layer recipe: pip requirements per CUDA flavour plus Debian packages."""

    description: str
    pip: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="per CUDA flavour declared under `cuda:`")
    apt: tuple[str, ...] = ()
    cuda_home: bool = Field(default=False, description="assemble /usr/local/cuda from the pip wheels")
    warm: bool | tuple[Name, ...] = Field(
        default=False,
        description="bake the kernel caches a server start needs (images/warm/): true for the `default` "
                    "profile, or the server profiles to bake")

    @model_validator(mode="after")
    def _warm_needs_a_compiler(self) -> Toolkit:
        # The caches are compiled at build time with the layer's own nvcc and g++: without a CUDA
        # home there is nothing to compile them with.
        if self.warm and not self.cuda_home:
            msg = "warm needs cuda_home: true (the kernel caches are compiled with the layer's nvcc)"
            raise ValueError(msg)
        return self

    @field_validator("warm", mode="before")
    @classmethod
    def _warm_is_a_switch_or_a_list(cls, value: object) -> object:
        # Said once, in words, instead of one error per branch of the union.
        if isinstance(value, (bool, list, tuple)):
            return value
        msg = "warm takes true, false or a list of server profiles, e.g. [default, flashinfer]"
        raise ValueError(msg)

    @property
    def warm_profiles(self) -> tuple[str, ...]:
        """The server profiles whose start-up kernels the layer bakes (none when not warm)."""
        if self.warm is True:
            return ("default",)
        return self.warm or ()


class PlatformTargets(Strict):
    """The GPU targets of one platform's images: built and audited for `archs`, audited for `also_audit`."""

    archs: Annotated[ArchList, Field(min_length=1)]
    also_audit: ArchList = Field(default=(), description="archs audited and compiled for, never failing")
    opt_in: str | None = Field(
        default=None, description="why this platform's cells are built only when a selection names them (`--only`): "
                                  "they are locked and checked all the same, and left out of a run of the whole matrix")

    @model_validator(mode="after")
    def _audited_only(self) -> PlatformTargets:
        for arch in self.also_audit:
            if arch in self.archs:
                msg = f"{arch!r} is a target arch already (under `archs:`); list it in one of the two"
                raise ValueError(msg)
        return self


class Rule(Strict):
    """Cells whose id matches the glob `match` are excluded (with `reason`)."""

    match: str
    reason: str


class Expectation(Strict):
    """A cell expected to fail at `stage` (like pytest's xfail): documented, not an error of the run."""

    match: str
    stage: Name | Annotated[tuple[Name, ...], Field(min_length=1)] = Field(
        description="the stage it fails at, or a list of stages")
    failure_class: Name | None = Field(default=None, alias="class")
    reason: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def stages(self) -> tuple[str, ...]:
        return (self.stage,) if isinstance(self.stage, str) else self.stage


# The tiny models the host can make for the server stages (verify/host_model.py ARCHITECTURES): a Llama (with
# 8 attention heads as `llama-tp`, for tensor parallelism), or
# a NemotronH hybrid of Mamba2, attention and MLP layers (for the flags only a hybrid model takes).
TinyModelName = Literal["llama", "llama-tp", "hybrid"]


class Profile(Strict):
    """Server flags for the GPU stages (`python -m sglang.launch_server ...`), and the tiny model they serve."""

    args: tuple[str, ...] = ()
    model: TinyModelName = Field(default="llama",
                                 description="the tiny model the host makes: llama, llama-tp or hybrid")
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: int = Field(default=900, gt=0, le=MAX_TIMEOUT_S)


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


class Cache(Strict):
    """A build cache shared between runners: BuildKit's registry cache, one ref per cell under `ref`, and
    the debootstrapped bases pushed beside it (every runner must build on the very same base image for
    the cache's keys to match)."""

    # a repository, no tag: each cell's tag is added (`REF:CELL`); a port is fine (`host:5000/cache`); what
    # Docker refuses is refused here (the build would fail later, or `host:abc` crash a URL)
    ref: Annotated[str, AfterValidator(_repository)] = Field(
        description="registry repository for the cache, e.g. registry.example.com/sglang-images/cache")
    mode: Literal["max", "min"] = Field(default="max", description="max: every layer of every stage; min: the image's")
    compression: Literal["zstd", "gzip", "uncompressed"] = "zstd"
    export: bool = Field(default=True, description="push what this runner built (false: only read the cache)")


class PlatformRunners(Strict):
    """The CI runners of one platform's cells other than linux/amd64's (`runners.platforms: linux/arm64:`), so that
    a runner of one CPU is never asked for another's cell: an H200 and a GH200 are both sm_90a, and their labels
    live under different keys (checks.py also wants each self-hosted label set to name its CPU)."""

    build: Labels | None = Field(
        default=None, description="a build runner of this platform's CPU: its cells are built there natively; "
                                  "without it, on the `build` runner under QEMU emulation")
    default: Labels | None = Field(
        default=None, description="a GPU job per cell on any runner with these labels (when `archs` is empty)")
    archs: dict[str, Labels] = Field(default_factory=dict, description="arch of this platform -> labels")
    cpu: Labels | Literal[False] | None = Field(
        default=None, description="with no GPU runner: a CPU-only verify job on a runner of this CPU with these "
                                  "labels (default: GitHub's hosted runner of the CPU, e.g. ubuntu-24.04-arm); "
                                  "false: no job")

    @property
    def gpu(self) -> bool:
        return bool(self.archs) or self.default is not None


class Runners(Strict):
    """The CI runners a cell's jobs ask for (`nox -s matrix -- --github`): labels, all of which a runner must carry.
    `default` and `archs` are linux/amd64's GPU runners: without per-arch labels a cell runs once on any runner with
    the default labels; with them, once per listed arch, each on a runner whose labels name that GPU. Another
    platform's runners are under `platforms:`. The build job (`nox -s build -- --stage REPO`) runs on a runner with
    the `build` labels (no GPU needed); so do the cells of a platform that has no build runner of its own."""

    default: Labels = ("self-hosted", "linux", "x64", "gpu")
    build: Labels = ("self-hosted", "linux", "x64", "build")
    archs: dict[str, Labels] = Field(default_factory=dict, description="linux/amd64 arch -> labels")
    platforms: dict[PlatformName, PlatformRunners] = Field(
        default_factory=dict, description="another platform (linux/arm64) -> its runners")

    def of(self, platform: str) -> PlatformRunners:
        """`platform`'s runners: linux/amd64's are the top-level `default` and `archs` (and no CPU-only job)."""
        if platform == DEFAULT_PLATFORM:
            return PlatformRunners.model_construct(build=None, default=self.default, archs=self.archs, cpu=False)
        return self.platforms.get(platform) or PlatformRunners()

    def build_labels(self, platform: str) -> tuple[str, ...]:
        """Where `platform`'s cells are built: its own build runner, else the `build` runner (under emulation)."""
        return self.of(platform).build or self.build

    def cpu_labels(self, platform: str) -> tuple[str, ...] | None:
        """The runner of a CPU-only verify job of `platform`'s cells (None: no such job): only where no GPU runner
        is given, on the given labels or GitHub's hosted runner of the platform's CPU."""
        runners = self.of(platform)
        if runners.gpu or runners.cpu is False:
            return None
        return runners.cpu or (by_oci(platform).hosted,)


class MatrixFile(Strict):
    schema_version: Literal[1] = Field(alias="schema")
    bases: dict[Name, Base]
    # Either `platforms:` (targets per platform) or the shorthand `archs:`/`also_audit:` (linux/amd64's alone).
    platforms: dict[PlatformName, PlatformTargets] = Field(
        default_factory=dict, description="per platform (linux/amd64, linux/arm64): its GPU targets")
    archs: tuple[str, ...] = ()
    also_audit: tuple[str, ...] = Field(default=(), description="archs audited and compiled for, never failing")
    cuda: dict[FlavourName, CudaFlavour] = Field(description="the CUDA flavours lanes and toolkit recipes may name")
    torch_lanes: tuple[TorchLane, ...]
    sglang: tuple[SGLang, ...]
    toolkits: dict[Name, Toolkit]
    exclude: tuple[Rule, ...] = ()
    expect: tuple[Expectation, ...] = ()
    profiles: dict[Name, Profile] = Field(default_factory=lambda: {"default": Profile()})
    tags: Tags = Tags()
    registry: Registry = Registry()
    cache: Cache | None = None
    runners: Runners = Runners()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("archs")
    @classmethod
    def _arch_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arch in value:
            problem = arch_problem(arch)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("also_audit")
    @classmethod
    def _audited_only(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        targets = info.data.get("archs") or ()
        for arch in value:
            problem = arch_problem(arch)
            if problem:
                raise ValueError(problem)
            if arch in targets:
                msg = f"{arch!r} is a target arch already (under `archs:`); list it in one of the two"
                raise ValueError(msg)
        return value

    @field_validator("bases", "toolkits", "cuda", "torch_lanes", "sglang")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if not value:
            msg = "must not be empty: the matrix needs at least one entry on every axis"
            raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _targets_once(self) -> MatrixFile:
        if self.platforms and (self.archs or self.also_audit):
            msg = ("give the GPU targets once: under `platforms:` (per platform) or as the top-level `archs:` "
                   "(linux/amd64's alone), not both")
            raise ValueError(msg)
        if not self.platforms and not self.archs:
            msg = "no GPU targets: give `platforms:` (e.g. linux/amd64: {archs: [sm_90a]}) or a top-level `archs:`"
            raise ValueError(msg)
        for name, base in self.bases.items():
            if base.cpu.oci not in self.targets_by_platform:
                msg = (f"base {name!r} is {base.cpu.oci} (platform {base.platform}) but `platforms:` names only "
                       f"{', '.join(self.targets_by_platform)}: add {base.cpu.oci} there with its archs")
                raise ValueError(msg)
        return self

    @property
    def targets_by_platform(self) -> dict[str, PlatformTargets]:
        """Every platform's GPU targets (the shorthand `archs:` is linux/amd64's)."""
        if self.platforms:
            return dict(self.platforms)
        return {DEFAULT_PLATFORM: PlatformTargets(archs=self.archs, also_audit=self.also_audit)}

    def targets(self, platform: str = DEFAULT_PLATFORM) -> PlatformTargets:
        """The GPU targets of `platform`'s images (none when the matrix has no such platform)."""
        return self.targets_by_platform.get(platform) or PlatformTargets.model_construct(archs=(), also_audit=())

    @property
    def all_archs(self) -> tuple[str, ...]:
        """Every target arch of any platform, in file order."""
        return tuple(dict.fromkeys(a for t in self.targets_by_platform.values() for a in t.archs))

