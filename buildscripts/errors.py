"""One error hierarchy. Only the top level (cli.main) catches FatalError, prints it and exits.

A message says what happened, where, and the next command to run; no traceback unless --debug.
"""

from __future__ import annotations


class FatalError(Exception):
    """An error that ends the run. Subclasses fix the exit code."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(FatalError):
    """matrix.yaml (or another input file) is malformed or inconsistent."""

    exit_code = 2


class SelectionError(FatalError):
    """--only/--skip matched no cell."""

    exit_code = 3


class EngineError(FatalError):
    """Docker engine unreachable, too old, or buildx missing."""

    exit_code = 4


class ToolMissingError(FatalError):
    """An external program (mmdebstrap, uv, ...) is not installed."""

    exit_code = 5


class DiskSpaceError(FatalError):
    """Not enough free disk space to build."""

    exit_code = 6


class LockError(FatalError):
    """A lockfile is missing, stale, tampered with, or cannot be resolved."""

    exit_code = 7


class ResultsError(FatalError):
    """A results file is corrupt or from an unsupported schema."""

    exit_code = 8


class RegistryError(FatalError):
    """The registry is unreachable or refuses a push/pull."""

    exit_code = 9


class RunFailed(FatalError):
    """Some cells ended with an unexpected outcome (the summary says which)."""

    exit_code = 10


class Interrupted(FatalError):
    """Ctrl-C: the run was stopped; no good tag was moved."""

    exit_code = 130


class BaseBuildError(FatalError):
    """mmdebstrap or the load of the base image failed."""

    exit_code = 12


class TagError(FatalError):
    """The engine refused to apply a good tag (the results so far are saved)."""

    exit_code = 13


class GpuError(FatalError):
    """A requested GPU does not exist, or GPUs were required and none can be used."""

    exit_code = 11


class PreflightFailed(FatalError):
    """The LXC host or container is not ready for a GPU image (the checks say what to add)."""

    exit_code = 14


class ExportError(FatalError):
    """An image could not be written as an OCI archive (nothing partial is left)."""

    exit_code = 15


class PackageIndexError(FatalError):
    """A package index cannot be reached, does not answer in time, or answers nonsense (nothing is written)."""

    exit_code = 16


class ProposalError(FatalError):
    """The release watch cannot make or write its proposal (another watch runs, matrix.yaml changed, ...)."""

    exit_code = 17


class NotVerified(FatalError):
    """No valid signed verdict shows the image verified on the asked arch, for this very digest."""

    exit_code = 18


class CannotCheck(FatalError):
    """An image's signed verdicts could not be read (registry, archive or cosign): nothing was concluded."""

    exit_code = 19


class NothingFits(FatalError):
    """`here`: no image of the source fits this machine (its platform and GPU arch), or no GPU can be read."""

    exit_code = 20


class DriverTooOld(FatalError):
    """`here`: this machine's NVIDIA driver is below the floor of the chosen image's CUDA (or no floor is known)."""

    exit_code = 21


class ImagesDiffer(FatalError):
    """`compare`: the two images differ (the lines before say how, file by file; the report has every one)."""

    exit_code = 22


class BisectError(FatalError):
    """`bisect`: a bisection cannot go on (a step it cannot build yet, two locks it cannot compare)."""

    exit_code = 23


class RebuildFailed(FatalError):
    """`compare --rebuild`: the cold rebuild of the cell did not build, so there is nothing to compare."""

    exit_code = 24
