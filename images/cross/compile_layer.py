#!/usr/bin/env python3
"""Compile the bytecode of one layer's modules on the build machine's CPU, for another CPU's image.

    python3 compile_layer.py SITE_PACKAGES PYTHON_VERSION

Run by install-layer.sh in a native stage of Dockerfile.cross, where SITE_PACKAGES holds that layer's files
alone: every .py there without a .pyc gets a checked-hash one (reproducible: a hash of the source, not its
mtime; Python still checks it at import, as images/bytecode.py's for amd64). Bytecode depends on the CPython
minor version, never on the CPU, so the build machine's python3 writes the .pyc the target's interpreter reads,
provided it is the same minor: the script refuses to run under another one (its .pyc would be ignored, and every
import under emulation would compile its modules again, minutes per `import torch`).
Why every module and not only those a server start imports (images/bytecode.py): finding those imports the layer,
which needs the target's CPU; under QEMU a module compiled at import costs ~10x its native time, in every
verification stage again (the image sets PYTHONDONTWRITEBYTECODE), so every module gets its .pyc.
A file that does not compile (Python 2 leftovers in some wheels' examples) is listed and left alone: it cannot be
imported either way.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor


def sources(site: str) -> list[str]:
    """Every .py under `site` without its optimisation-level-0 .pyc, in a stable order."""
    found = []
    for folder, dirs, files in os.walk(site):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return [f for f in found if not os.path.exists(importlib.util.cache_from_source(f))]


def compile_one(path: str) -> str | None:
    """None when `path` compiled, else why not."""
    warnings.simplefilter("ignore")  # SyntaxWarnings of third-party code are not ours to fix
    try:
        py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (py_compile.PyCompileError, OSError, ValueError) as exc:
        return str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not os.path.isdir(argv[0]):
        sys.stderr.write("usage: compile_layer.py SITE_PACKAGES PYTHON_VERSION (an existing folder)\n")
        return 2
    site, wanted = argv
    mine = "{}.{}".format(*sys.version_info[:2])
    if mine != wanted:
        sys.stderr.write(f"compile_layer: this python3 is {mine}, the image's is {wanted}: bytecode of {mine} would "
                         "be ignored there (recompiled at every import, under emulation). Give the build machine's "
                         f"base (matrix.yaml `bases:`) Python {wanted}.\n")
        return 1
    todo = sources(site)
    with ProcessPoolExecutor() as pool:
        failed = {path: why for path, why in zip(todo, pool.map(compile_one, todo, chunksize=64), strict=True) if why}
    for path, why in sorted(failed.items()):
        print(f"compile_layer: {os.path.relpath(path, site)} does not compile ({why}); it cannot be imported either")
    print(f"compile_layer: {len(todo) - len(failed)} modules compiled for Python {wanted} in {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
