#!/usr/bin/env python3
"""Compile the bytecode of the Python files this layer added, reproducibly.

    python3 bytecode.py SITE_PACKAGES

Why not `uv pip install --compile-bytecode` or `compileall`: both recompile every file of
site-packages, the packages of the layers below too, and on an overlay file system every rewritten
.pyc is copied up into the new layer (the torch layer's bytecode would be stored again in the SGLang
layer). This compiles only files that have no .pyc yet.
Why checked-hash pycs: a timestamp pyc embeds the source's mtime, which is the install time, so two
builds of the same lock would differ; a checked-hash pyc holds a hash of the source instead (the same
as `SOURCE_DATE_EPOCH` makes py_compile choose). Python still checks the hash at import, so a source
changed later is recompiled in memory rather than run stale.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor


def importable(parent: str, name: str, root: str) -> bool:
    """A folder import statements can reach: a top-level one (maybe a namespace package), or a package.

    Folders of data, examples and test suites (flashinfer's CUTLASS examples, `tests/`) are not
    imported by a server; their bytecode would only weigh on the image.
    """
    if name in ("__pycache__", "tests"):
        return False
    return parent == root or os.path.isfile(os.path.join(parent, name, "__init__.py"))


def missing(root: str) -> list[str]:
    """Importable sources under `root` without their optimisation-level-0 .pyc, in a stable order."""
    todo = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if importable(top, d, root))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(top, name)
                if not os.path.exists(importlib.util.cache_from_source(path)):
                    todo.append(path)
    return todo


def compile_one(path: str) -> bool:
    warnings.simplefilter("ignore")  # SyntaxWarnings of third-party code are not ours to fix
    try:
        py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (py_compile.PyCompileError, OSError, ValueError):
        return False  # test data or templates that are not valid Python: imported never, skipped
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        sys.stderr.write("usage: bytecode.py SITE_PACKAGES (an existing folder)\n")
        return 2
    todo = missing(argv[0])
    with ProcessPoolExecutor() as pool:
        done = list(pool.map(compile_one, todo, chunksize=64))
    print(f"bytecode: {sum(done)} files compiled, {len(done) - sum(done)} not Python, under {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
