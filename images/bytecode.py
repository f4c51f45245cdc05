#!/usr/bin/env python3
"""Compile the bytecode of the modules a server start imports from this layer, reproducibly.

    python3 bytecode.py SITE_PACKAGES MODULE [MODULE ...]

Imports the MODULEs (a layer's start-up entry points, images/lean/imports.txt) in a child
interpreter, then compiles every module it loaded from SITE_PACKAGES that has no .pyc yet. A server
start imports about 6,000 modules (125 MB of bytecode); compiling every importable file of the venv
would add 22,000 (350 MB), most of them never imported by a server. A module outside the start
path is still compiled at its first import, in memory.
Why not `uv pip install --compile-bytecode` or `compileall`: both recompile every file of
site-packages, the packages of the layers below too, and on an overlay file system every rewritten
.pyc is copied up into the new layer (the torch layer's bytecode would be stored again in the SGLang
layer). This compiles only files that have no .pyc yet; a module of a lower layer first imported by
this layer's entry points gets its .pyc here, as a new file.
Why checked-hash pycs: a timestamp pyc embeds the source's mtime, which is the install time, so two
builds of the same lock would differ; a checked-hash pyc holds a hash of the source instead (the same
as `SOURCE_DATE_EPOCH` makes py_compile choose). Python still checks the hash at import, so a source
changed later is recompiled in memory rather than run stale.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor

# Runs in the child: import each module (a failure is reported, not fatal) and list the sources loaded.
IMPORTER = """
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"[:300]
files = sorted({m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").endswith(".py")})
print("@@imported " + json.dumps({"files": files, "failed": failed}))
"""


def imported(site: str, modules: list[str]) -> tuple[list[str], dict[str, str]]:
    """The .py files under `site` that importing `modules` loads, and the modules that failed."""
    # A throw-away home: what the imports cache (Triton, FlashInfer, Hugging Face) must not land in the layer.
    home = tempfile.mkdtemp(prefix="bytecode-home-")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CUDA_VISIBLE_DEVICES": "", "HOME": home,
           "XDG_CACHE_HOME": os.path.join(home, ".cache")}
    try:
        done = subprocess.run([sys.executable, "-c", IMPORTER, *modules], stdout=subprocess.PIPE, text=True,
                              env=env, cwd=home, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("@@imported ")), None)
    if line is None:
        return [], {name: f"the importing interpreter exited with {done.returncode}" for name in modules}
    found = json.loads(line[len("@@imported "):])
    root = os.path.realpath(site) + os.sep
    files = [f for f in found["files"] if os.path.realpath(f).startswith(root)]
    return files, found["failed"]


def missing(files: list[str]) -> list[str]:
    """Those of `files` without their optimisation-level-0 .pyc, in a stable order."""
    return sorted(f for f in files if not os.path.exists(importlib.util.cache_from_source(f)))


def compile_one(path: str) -> bool:
    warnings.simplefilter("ignore")  # SyntaxWarnings of third-party code are not ours to fix
    try:
        py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (py_compile.PyCompileError, OSError, ValueError):
        return False
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not os.path.isdir(argv[0]):
        sys.stderr.write("usage: bytecode.py SITE_PACKAGES MODULE [MODULE ...] (an existing folder)\n")
        return 2
    site, modules = argv[0], argv[1:]
    files, failed = imported(site, modules)
    for name, why in sorted(failed.items()):
        print(f"bytecode: importing {name} failed ({why}); its modules compile at first import instead")
    todo = missing(files)
    with ProcessPoolExecutor() as pool:
        done = list(pool.map(compile_one, todo, chunksize=64))
    print(f"bytecode: {sum(done)} modules compiled ({len(files)} imported from {site} by {' '.join(modules)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
