"""One strict reader for JSON that two readers could read otherwise: the documents of images (manifests, indexes,
configs), whoever serves them, and every signed payload (trust/: envelopes, verdicts, sealed records).

Readers disagree on JSON that is not plain: Go's encoding/json (skopeo, Docker, containerd, registries) fills
a struct field from a key that matches it case-insensitively and takes the last of several, Python's dict
keeps each spelling apart. An index with `"manifests": [A]` and `"Manifests": [B]` is A to Python and B to
Go: what was checked is not what runs. So a document is refused when any reader could read it otherwise:
- not UTF-8, NaN or Infinity, a key twice in one object;
- two keys of one object that are equal but for case (Go's folding: `casefold` also folds ſ and K);
- a key that differs only in case from a field name the OCI and Docker image formats define.
Maps whose keys are chosen by people (annotations, labels) are held to the first three rules only: Go keeps
their keys as they are, so a label named `OS` means no field. The field names and the free maps default to the
image formats'; a reader of other documents passes its own (trust/verdict_form.py, trust/dsse.py).
A document nested deeper than Python can read is refused too (a hostile registry's answer must not crash us).
"""

from __future__ import annotations

import json
from typing import Any

# The field names of OCI/Docker manifests, indexes, descriptors, platforms and image configs.
FIELDS = frozenset({
    "schemaVersion", "mediaType", "artifactType", "manifests", "platform", "architecture", "os", "variant",
    "os.version", "os.features", "digest", "size", "config", "layers", "annotations", "subject", "urls",
    "rootfs", "diff_ids",
})
FREE_MAPS = frozenset({"annotations", "Labels", "ExposedPorts", "Volumes"})


class Ambiguous(ValueError):
    """A document two readers could read differently: the message says where and why."""


def loads(data: bytes | str, *, fields: frozenset[str] = FIELDS, free: frozenset[str] = FREE_MAPS) -> Any:
    """`data` as JSON, or Ambiguous saying why another reader could read it otherwise. `fields`: the field names
    a key may not differ from only in case; `free`: the keys whose maps hold keys of people's own choosing."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        found = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
        _fields(found, {name.casefold(): name for name in fields}, free, inside_free=False)
    except Ambiguous:
        raise
    except RecursionError:
        msg = "nested deeper than any document of this project"
        raise Ambiguous(msg) from None
    except ValueError as exc:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        msg = f"not strict UTF-8 JSON: {exc}"
        raise Ambiguous(msg) from None
    return found


def loads_object(data: bytes | str, *, fields: frozenset[str] = FIELDS,
                 free: frozenset[str] = FREE_MAPS) -> dict[str, Any]:
    found = loads(data, fields=fields, free=free)
    if not isinstance(found, dict):
        msg = "not a JSON object"
        raise Ambiguous(msg)
    return found


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, str] = {}
    for key, _ in pairs:
        other = seen.get(key.casefold())
        if other is not None:
            msg = (f"the key {key!r} appears twice in one object" if other == key else
                   f"the keys {other!r} and {key!r} differ only in case (Go reads them as one)")
            raise Ambiguous(msg)
        seen[key.casefold()] = key
    return dict(pairs)


def _fields(value: Any, folded: dict[str, str], free: frozenset[str], *, inside_free: bool) -> None:
    """Refuse a key that differs only in case from a field name (not in maps of people's own keys)."""
    if isinstance(value, list):
        for item in value:
            _fields(item, folded, free, inside_free=False)
    elif isinstance(value, dict):
        for key, item in value.items():
            field = folded.get(key.casefold())
            if not inside_free and field is not None and field != key:
                msg = f"the key {key!r} differs only in case from the field {field!r} (Go reads it as that field)"
                raise Ambiguous(msg)
            _fields(item, folded, free, inside_free=key in free)


def _no_constant(name: str) -> Any:
    msg = f"{name} is not JSON"
    raise Ambiguous(msg)
