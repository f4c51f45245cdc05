"""The arguments the commands share, each with one spelling and one meaning (and the rules behind them).

  --matrix PATH         the matrix.yaml a command reads its cells, tags and profiles from (default: the project's)
  --only GLOB / --skip  cell ids to act on / to leave out (repeatable); matrix.selected is the one matching rule
  --results GLOB        results files to READ (repeatable; `**` any depth); `tag` and `promote` also record the
                        tags they applied in the files they read. A pattern that matches no file is an error:
                        a typo must never quietly act on other records (`results_files`)
  --out PATH            where a command WRITES (a results file, a report folder, an archive folder): never
                        `--results`
  --trust-key PUB       a public key whose seals count besides the project's (`tag`, `promote`, `export`)

Each command adds what it takes from here, with a help text that says its default, so `--help` of any of
them reads the same.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, ResultsError
from .workspace import Workspace

SHM_SIZE_FORM = re.compile(r"[1-9][0-9]*[bkmg]?", re.I)   # what docker's --shm-size takes


def path_text(text: str) -> str:
    """argparse `type=` for a path or glob: what no file system takes is a usage error, not a traceback later.

    A NUL character, or text that cannot become bytes (a lone surrogate; undecodable bytes of a real command
    line arrive as escapes that do convert back)."""
    if "\x00" in text:
        msg = "a path cannot contain a NUL character"
        raise argparse.ArgumentTypeError(msg)
    try:
        os.fsencode(text)
    except UnicodeError:
        msg = f"{text!r} cannot be a file name on this system"
        raise argparse.ArgumentTypeError(msg) from None
    return text


def path_argument(text: str) -> Path:
    """argparse `type=` for a path (see `path_text`)."""
    return Path(path_text(text))


def shm_size_argument(text: str) -> str:
    """An argparse type for a /dev/shm size in docker's form (16g, 64m, 1073741824)."""
    if not SHM_SIZE_FORM.fullmatch(text.strip()):
        msg = f"{text!r} is not a size as docker's --shm-size takes it (e.g. 16g, 1g, 64m)"
        raise argparse.ArgumentTypeError(msg)
    return text.strip().lower()


def add_matrix(parser: argparse.ArgumentParser, ws: Workspace | None, *,
               help: str = "the matrix.yaml to read (default: the project's)") -> None:
    """--matrix PATH; `ws` None leaves the default to the command (None when not given)."""
    parser.add_argument("--matrix", type=path_argument, default=ws.matrix if ws else None, metavar="PATH",
                        help=help)


def add_selection(parser: argparse.ArgumentParser, *, what: str = "cell ids to act on",
                  skip: bool = False) -> None:
    """--only GLOB (and with `skip`, --skip GLOB), repeatable."""
    parser.add_argument("--only", action="append", default=[], metavar="GLOB", help=f"{what} (repeatable)")
    if skip:
        parser.add_argument("--skip", action="append", default=[], metavar="GLOB",
                            help="cell ids to leave out (repeatable)")


def add_verification(parser: argparse.ArgumentParser, *, profile: str, gpu: int) -> None:
    """--profile NAME and --gpu N: the server profile and the GPU the GPU stages use (`build`, `verify`); their
    defaults are the command's (its Options)."""
    parser.add_argument("--profile", default=profile, help="server profile from matrix.yaml (GPU stages)")
    parser.add_argument("--gpu", type=int, default=gpu,
                        help="index of the GPU the GPU stages run on (verify with a tp profile: every GPU)")


def check_gpu(index: int) -> int:
    """--gpu's index, else a ConfigError (argparse takes any integer)."""
    if index < 0:
        msg = f"--gpu {index} is not a GPU index"
        raise ConfigError(msg, hint="GPU indexes count from 0, as nvidia-smi shows them")
    return index


def add_results(parser: argparse.ArgumentParser, *, default: str) -> None:
    """--results GLOB: results files to read; `default` says what the command reads without it."""
    parser.add_argument("--results", action="append", type=path_text, default=[], metavar="GLOB",
                        help=f"results files to read (repeatable; `**` is any depth); default: {default}")


def results_files(patterns: Sequence[str]) -> list[Path]:
    """The files `patterns` match, sorted (disk.glob_files); ResultsError when patterns are given and match
    nothing, so that a typo never quietly acts on other records."""
    from . import disk

    paths = disk.glob_files(patterns)
    if patterns and not paths:
        msg = "no results file matches " + ", ".join(repr(p) for p in patterns)
        raise ResultsError(msg, hint="check the pattern; results live in runs/RUN_ID/results.json")
    return paths


def add_trust_keys(parser: argparse.ArgumentParser) -> None:
    """--trust-key PUB, the same for every command that acts on records (`tag`, `promote`, `export`)."""
    parser.add_argument("--trust-key", action="append", default=[], type=Path, metavar="PUB",
                        help="also trust records sealed by this public key (repeatable; keys/*.pub and this "
                             "machine's verifier key are trusted always)")
