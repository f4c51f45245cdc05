"""The options of `nox -s build` that the pipeline reads (commands/build.py makes them once, from its arguments and
the CI's environment, which stands in for the flags when set), and their check against the matrix before anything
is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError
from .verify.asked import Asked

if TYPE_CHECKING:
    from .matrix import Matrix

# CI systems configure jobs through the environment: these stand in for the flags when set (and not empty).
CACHE_ENV, BUILDER_ENV = "SGLANG_IMAGES_CACHE", "SGLANG_IMAGES_BUILDER"
CACHE_KEEP_ENV, KEEP_SUPERSEDED_ENV = "SGLANG_IMAGES_CACHE_KEEP", "SGLANG_IMAGES_KEEP_SUPERSEDED"
LAYER_COMPRESSION_ENV = "SGLANG_IMAGES_LAYER_COMPRESSION"
COMPRESSIONS = ("gzip", "zstd")   # zstd pulls faster where it pulls at all: Docker 23+ and containerd, not 20.10


@dataclass(frozen=True, kw_only=True)
class BuildOptions(Asked):
    """What the pipeline reads besides what each cell's verification asks (`Asked`: stages, profile, GPU, ...)."""

    fail_fast: bool = False
    verify: bool = True
    reverify: bool = False              # verify again where saved results of the same inputs exist
    builder: str | None = None
    cache_ref: str | None = None        # overrides matrix.yaml's `cache.ref` ("" turns the cache off)
    cache_keep: int | None = None       # bytes of BuildKit cache kept after the run (None: unbounded)
    keep_superseded: bool = False       # keep candidates whose cell's inputs have changed since
    stage: str | None = None            # staging repository: CPU stages here, GPU stages by digest elsewhere
    cold: bool = False                  # every layer built again, no cache used (`compare --rebuild`)
    layer_compression: str = "gzip"     # zstd: a stamping builder's layers (BuildKit >= 0.13 only: prepare says)

    @property
    def verified_stages(self) -> tuple[str, ...] | None:
        """The stages each cell's verification runs: all (or --stages); with --stage only those that need no GPU."""
        from .results import CPU_STAGES, LADDER

        if not self.stage:
            return self.stages
        return tuple(s for s in self.stages or LADDER if s in CPU_STAGES)


def check_options(matrix: Matrix, opts: BuildOptions) -> None:
    """Bad options fail before anything is built, not after the first hour-long cell (--stages: as parsed)."""
    from .registry import references
    from .verify import tp

    if opts.stage is not None:
        conflict = "--no-verify" if not opts.verify else "--per-gpu" if opts.per_gpu else None
        if conflict:
            msg = f"--stage runs the CPU stages and pushes what passed them: it cannot go with {conflict}"
            raise ConfigError(msg, hint=f"drop {conflict}, or --stage")
        references.check_repository(opts.stage, "--stage")
    if opts.layer_compression not in COMPRESSIONS:   # $SGLANG_IMAGES_LAYER_COMPRESSION is no argparse choice
        msg = f"the layers' compression {opts.layer_compression!r} is none of {', '.join(COMPRESSIONS)}"
        raise ConfigError(msg, hint=f"--layer-compression zstd, or unset ${LAYER_COMPRESSION_ENV}")
    if tp.wants_all_gpus(matrix.profile(opts.profile)) and opts.per_gpu:
        msg = f"--per-gpu gives each server one GPU; profile {opts.profile!r} serves across all of them"
        raise ConfigError(msg, hint=f"drop --per-gpu (the {opts.profile} profile takes every GPU), or pick another "
                                    "--profile")
