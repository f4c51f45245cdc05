"""`nox -s export -- CELL_OR_IMAGE [--out DIR] [--force]`: an OCI archive that Proxmox VE's `pct create`
(and LXC's `oci` template) accepts, its sha256, and an install note with the exact commands (publish/oci_export.py).

Only an image a sealed results record vouches for (the gate of `tag` and `promote`, publish/trusted.py) is
exported, unless `--force`, and then the archive's annotations say so.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments, log
from ..errors import ConfigError
from ..workspace import Workspace

ABOUT = "an OCI archive of a verified image for Proxmox VE / LXC"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    image: str                          # a cell id (its built image) or an image reference
    out: Path                           # the archive's folder
    name: str | None = None             # without .oci.tar (default: the cell id)
    force: bool = False                 # export an image that has not earned a good tag, marked so
    results: tuple[str, ...] = ()       # globs (default: the saved runs of this matrix)
    matrix: Path
    trust_keys: tuple[Path, ...] = ()


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    ap = argparse.ArgumentParser(prog="nox -s export --", description=__doc__.splitlines()[0])
    ap.add_argument("image", metavar="CELL_OR_IMAGE", help="a cell id (its built image) or an image reference")
    ap.add_argument("--out", type=Path, default=ws.root / "exports", help="folder for the archive (default exports/)")
    ap.add_argument("--name", help="archive name without .oci.tar (default: the cell id)")
    ap.add_argument("--force", action="store_true", help="export an image that has not earned a good tag")
    arguments.add_results(ap, default="the saved runs of this matrix; a sealed record there vouches for the image")
    arguments.add_matrix(ap, ws, help="matrix.yaml the results are judged against")
    arguments.add_trust_keys(ap)
    a = ap.parse_args(list(argv))
    if a.name is not None:
        from ..publish.oci_export import safe_name

        safe_name(a.name)  # a bad name is said before the engine is asked anything
    return Options(ws=ws, env=env, image=a.image, out=a.out, name=a.name, force=a.force, results=tuple(a.results),
                   matrix=a.matrix, trust_keys=tuple(a.trust_key))


def run(options: Options) -> int:
    from .. import engine
    from ..matrix import load
    from ..matrix.schema import LABEL_PREFIX
    from ..matrix.spellings import flavour_version
    from ..publish import trusted
    from ..publish.oci_export import (
        Archive,
        archive_name,
        attested,
        export,
        record_labels,
        resolve,
        safe_name,
        verified_by_signature,
        vouched_runs,
        vouching,
    )
    from ..trust import keys

    trusted_keys = keys.trusted(options.ws.root, options.env, options.trust_keys)
    # Saved records vouch where there are any: in a checkout (its matrix.yaml) or in the files --results names.
    # Installed without a checkout, the registry's signed verdicts of the image are what vouch for it.
    local = options.matrix.is_file() or bool(options.results)
    vouched = (trusted.earned(vouched_runs(options.results, options.ws), load(options.matrix), trusted_keys)
               if local else [])
    client = engine.connect()
    image = resolve(client, options.image, vouched)
    record = vouching(str(image.id), vouched)
    labels = record_labels(dict(image.labels or {}), record)
    tested = attested(image, trusted_keys, options.env, platform=engine.platform(client))
    signed = tested is not None and verified_by_signature(tested, trusted_keys, options.env)
    why_not = None if record or signed else (
        "no sealed results record of a matrix cell and no signed verdict a trusted key made says it was verified "
        "on a GPU (labels on an image are never evidence)")
    if why_not and not options.force:
        msg = f"{options.image}: {why_not}"
        raise ConfigError(msg, hint="export a good tag whose signed verdicts are attached in its registry (`check` "
                                    "says), pass --trust-key with its verifier's public key, or pass --force to "
                                    "export it marked as unverified")
    name = safe_name(options.name) if options.name else archive_name(image, options.image)
    cuda = flavour_version(labels.get(f"{LABEL_PREFIX}.cuda", ""))
    with log.working(f"exporting {tested.source if tested else image.id} to {options.out}"):
        done = export(client, image, options.out,
                      Archive(name=name, forced=why_not, cuda=cuda, labels=labels, tested=tested), options.env)
    if why_not:
        log.warn(f"exported although {why_not}; the archive's annotations say so")
    log.info(f"{done.archive} ({done.size_bytes / 1e9:.2f} GB from a {done.image_size_bytes / 1e9:.2f} GB image, "
             f"{done.seconds:.0f} s), sha256 {done.sha256}; commands: {done.note}")
    return 0
