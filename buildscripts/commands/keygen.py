"""`python -m buildscripts keygen DIR`: a signing key pair for the verifiers of a project's CI.

Writes DIR/signing-key.pem (the private key, owner-only: store it as the CI secret
SGLANG_IMAGES_SIGNING_KEY and delete the file) and DIR/signing-key.pub (commit it under keys/, where every
command and `check` trusts it). Never overwrites a key.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments, log
from ..workspace import Workspace

ABOUT = "a signing key pair for verifiers (CI secret + public key to commit)"


@dataclass(frozen=True, kw_only=True)
class Options:
    folder: Path        # where signing-key.pem and signing-key.pub go


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    del ws, env  # the folder is the one argument
    parser = argparse.ArgumentParser(prog="keygen", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dir", type=arguments.path_argument, help="folder for signing-key.pem and signing-key.pub")
    args = parser.parse_args(list(argv))
    return Options(folder=args.dir)


def run(options: Options) -> int:
    from ..trust import key_pair  # the library a command drives is imported when it runs: a start stays light

    private, public, keyid = key_pair.write_pair(options.folder)
    log.info(f"wrote {private} (secret: store it as SGLANG_IMAGES_SIGNING_KEY, then delete it) and {public} "
             f"(commit it as keys/NAME.pub); key id {keyid[:16]}")
    return 0
