"""Every difference between two images, each with the one reason that explains it.

A path seen by a container of either image differs for the first of these that holds:
- content: it is in one image only, or its kind, bytes or link target differ (and it is not the next case);
- pyc: a .pyc whose code is the same after its header (the source's mtime or hash, PEP 552), or whose source
  (`x.py` beside it, or above its `__pycache__`) is the same in both images: bytecode of the same source;
- owner/mode: its uid, gid or permission bits differ;
- mtime: only its modification time differs.
Beyond the files: `order`, a layer whose members are the same but packed in another order (its digest differs,
nothing a container sees does), and `config`, the image config's fields other than the layers' digests (the
creation time, history, labels, environment).
"""

from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .saved import Entry, Image

ATTRIBUTES = ("kind", "size", "link", "mode", "uid", "gid", "mtime")
REASONS = ("content", "pyc", "owner/mode", "mtime", "order", "config")
SAID = {"content": "content", "pyc": ".pyc only (bytecode of the same source)", "owner/mode": "owner/mode",
        "mtime": "mtime only", "order": "member order only", "config": "image config"}


@dataclass(frozen=True)
class Difference:
    path: str                  # a file's path; `layer N` for an order; a config field's name
    reason: str                # one of REASONS
    detail: str                # what differs, as `a -> b`


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    differences: tuple[Difference, ...] = ()
    files: tuple[int, int] = (0, 0)          # how many paths each image's container sees
    layers: tuple[int, int] = (0, 0)
    groups: dict[str, list[Difference]] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not self.differences


def source_of(pyc: str) -> str:
    """The source a .pyc was compiled from: `d/__pycache__/m.cpython-311.pyc` -> `d/m.py`, `d/m.pyc` -> `d/m.py`."""
    folder, name = posixpath.split(pyc)
    if posixpath.basename(folder) == "__pycache__":
        return posixpath.join(posixpath.dirname(folder), name.split(".", 1)[0] + ".py")
    return pyc[:-1]


def _pyc_of_same_source(path: str, a: Entry, b: Entry, files_a: dict[str, Entry], files_b: dict[str, Entry]) -> bool:
    if not path.endswith(".pyc") or a.kind != "file" or b.kind != "file":
        return False
    if a.body_sha256 and a.body_sha256 == b.body_sha256:
        return True
    source_a, source_b = files_a.get(source_of(path)), files_b.get(source_of(path))
    return source_a is not None and source_b is not None and source_a.same_content(source_b)


def _shown(entry: Entry, name: str) -> str:
    return f"{entry.mode:04o}" if name == "mode" else str(getattr(entry, name))


def _file(path: str, a: Entry, b: Entry, files_a: dict[str, Entry], files_b: dict[str, Entry]) -> Difference | None:
    changed = [f"{name} {_shown(a, name)} -> {_shown(b, name)}" for name in ATTRIBUTES
               if getattr(a, name) != getattr(b, name)]
    if a.sha256 != b.sha256:
        changed.insert(0, f"sha256 {a.sha256[:12]} -> {b.sha256[:12]}")
    if not changed:
        return None
    detail = "; ".join(changed)
    if not a.same_content(b):
        reason = "pyc" if _pyc_of_same_source(path, a, b, files_a, files_b) else "content"
    elif (a.mode, a.uid, a.gid) != (b.mode, b.uid, b.gid):
        reason = "owner/mode"
    else:
        reason = "mtime"
    return Difference(path, reason, detail)


def _files(files_a: dict[str, Entry], files_b: dict[str, Entry]) -> list[Difference]:
    found = []
    for path in sorted(files_a.keys() | files_b.keys()):
        a, b = files_a.get(path), files_b.get(path)
        if a is None or b is None:
            found.append(Difference(path, "content", "only in A" if b is None else "only in B"))
        elif (difference := _file(path, a, b, files_a, files_b)) is not None:
            found.append(difference)
    return found


def _order(a: Image, b: Image) -> list[Difference]:
    """Layers of the same members packed in another order: their digests differ, no file does."""
    found = []
    for number, (one, other) in enumerate(zip(a.layers, b.layers, strict=False), 1):
        if one != other and Counter(one) == Counter(other):
            moved = next(i for i, (x, y) in enumerate(zip(one, other, strict=True)) if x != y)
            found.append(Difference(f"layer {number}", "order",
                                    f"the same {len(one)} members; from member {moved + 1} on in another order "
                                    f"({one[moved].path} -> {other[moved].path})"))
    return found


def _config(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[Difference]:
    found = []
    for key in sorted(a.keys() | b.keys()):
        name = f"{prefix}{key}"
        x, y = a.get(key), b.get(key)
        if name == "rootfs" or x == y:
            continue   # the layers' digests: what differs in them is told file by file
        if isinstance(x, dict) and isinstance(y, dict):
            found += _config(x, y, f"{name}.")
        else:
            found.append(Difference(name, "config", f"{_short(x)} -> {_short(y)}"))
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def compare(a: Image, b: Image) -> Comparison:
    """Every difference between `a` and `b`, grouped by reason (in the order of REASONS)."""
    files_a, files_b = a.files(), b.files()
    differences = [*_files(files_a, files_b), *_order(a, b), *_config(a.config, b.config)]
    if len(a.layers) != len(b.layers):
        differences.append(Difference("layers", "config", f"{len(a.layers)} -> {len(b.layers)} layers"))
    groups = {reason: [d for d in differences if d.reason == reason] for reason in REASONS}
    return Comparison(a.ref, b.ref, tuple(differences), (len(files_a), len(files_b)),
                      (len(a.layers), len(b.layers)), {k: v for k, v in groups.items() if v})
