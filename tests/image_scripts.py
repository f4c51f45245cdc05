"""Scripts of images/ loaded as modules: they run inside the images, so they are no package of ours."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path) -> ModuleType:
    """The script at `path` (absolute, or relative to the repository) as a module named after its file."""
    path = path if path.is_absolute() else ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    sys.path.insert(0, str(path.parent))   # its own imports find what lies beside it, as when it runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
