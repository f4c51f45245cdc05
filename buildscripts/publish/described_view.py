"""What `check` shows of an image's SBOM and provenance (trust/described.py): provenance always, whether present
and verified, with the cell and the locks it was built from; with `--sbom`, the SBOM's counts per kind and its key
packages. Read from the signed predicate, which a trusted key signed but which is still read defensively: a field
of another shape is shown as missing, never trusted to be a string."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..trust.described import Found

KIND = "sglang-images:kind"
KINDS = ("os", "deb", "python", "cuda-toolkit", "kernel-cache")
# The packages a reader of an SGLang image asks about first; several names where the project renamed its wheel.
KEY_PACKAGES = (("torch",), ("sglang",), ("sgl-kernel", "sglang-kernel"), ("flashinfer-python",),
                ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu13"), ("libstdc++6",))


def _props(component: Mapping[str, Any]) -> dict[str, str]:
    found = component.get("properties")
    return {str(p.get("name")): str(p.get("value")) for p in found if isinstance(p, dict)} \
        if isinstance(found, list) else {}


def components(predicate: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    listed = predicate.get("components")
    return [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []


def counts(predicate: Mapping[str, Any]) -> dict[str, int]:
    """Components per kind (`sglang-images:kind`), every kind named even when none is listed."""
    found = Counter(_props(c).get(KIND, "other") for c in components(predicate))
    return {kind: found.get(kind, 0) for kind in (*KINDS, *sorted(set(found) - set(KINDS)))}


def key_packages(predicate: Mapping[str, Any]) -> list[dict[str, str]]:
    """name, version, kind, lock and sha256 count of each key package the SBOM lists ("—" where it lists none)."""
    listed = components(predicate)
    rows = []
    for names in KEY_PACKAGES:
        hit = next((c for c in listed if c.get("name") in names), None)
        if hit is None:
            rows.append({"name": names[0], "version": "—", "kind": "—", "lock": "not listed"})
            continue
        props, hashes = _props(hit), hit.get("hashes")
        lock = props.get("sglang-images:lock")
        said = (f"{lock} ({len(hashes) if isinstance(hashes, list) else 0} sha256)" if lock and
                props.get("sglang-images:lock-match") == "true" else
                f"{lock}: locked {props.get('sglang-images:lock-version')}" if lock else "—")
        rows.append({"name": str(hit.get("name")), "version": str(hit.get("version", "—")),
                     "kind": props.get(KIND, "—"), "lock": said})
    return rows


def _map(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    found = parent.get(key)
    return found if isinstance(found, dict) else {}


def provenance_facts(predicate: Mapping[str, Any]) -> dict[str, Any]:
    """The cell, its definition's digest, the locks' digests and the builder, as the provenance says them."""
    build = _map(predicate, "buildDefinition")
    params = _map(build, "externalParameters")
    definition = _map(params, "definition")
    listed = build.get("resolvedDependencies")
    deps = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    builder = _map(_map(predicate, "runDetails"), "builder")
    return {"cell": params.get("cell"), "definition": definition.get("sha256"), "builder": builder.get("id"),
            "locks": {str(d.get("name")): (d.get("digest") or {}).get("sha256") for d in deps
                      if str(d.get("name", "")).startswith("lockfiles/") and isinstance(d.get("digest"), dict)}}


def _signer(found: Found) -> str:
    used = found.used
    return f"{used.signer.keyid[:16]} ({Path(used.signer.name).name})" if used else ""


def show_provenance(console: Console, found: Found) -> None:
    if found.used is None:
        why = found.refused[0] if found.refused else "none is attached"
        console.print(f"[yellow]provenance:[/] ✕ not verified: {escape(why)}")
        return
    facts = provenance_facts(found.used.predicate)
    console.print(f"provenance: [green]✓ verified[/], signed by {escape(_signer(found))}: cell "
                  f"{escape(str(facts['cell']))}, definition sha256:{escape(str(facts['definition'])[:16])}…, "
                  f"built by {escape(str(facts['builder']))}")
    for name, sha in facts["locks"].items():
        console.print(f"  {escape(name)}  sha256:{escape(str(sha))}")


def show_sbom(console: Console, found: Found | None) -> None:
    if found is None or found.used is None:
        return
    predicate = found.used.predicate
    console.print(f"SBOM: [green]✓ verified[/], signed by {escape(_signer(found))}: "
                  + ", ".join(f"{n} {k}" for k, n in counts(predicate).items()))
    table = Table("package", "version", "kind", "lock")
    for row in key_packages(predicate):
        table.add_row(*(escape(row[k]) for k in ("name", "version", "kind", "lock")))
    console.print(table)


def as_json(provenance: Found, sbom: Found | None) -> dict[str, Any]:
    out: dict[str, Any] = {"provenance": {"verified": provenance.used is not None, "refused": list(provenance.refused),
                                          **(provenance_facts(provenance.used.predicate) if provenance.used else {})}}
    if sbom is not None:
        out["sbom"] = {"verified": sbom.used is not None, "refused": list(sbom.refused),
                       **({"counts": counts(sbom.used.predicate), "key_packages": key_packages(sbom.used.predicate)}
                          if sbom.used else {})}
    return out


def sbom_problem(found: Sequence[tuple[str, Found | None]]) -> str | None:
    """Why `check --sbom` fails: the first image of those asked whose SBOM is missing or refused."""
    for digest, sbom in found:
        if sbom is None or sbom.used is None:
            why = sbom.refused[0] if sbom and sbom.refused else "no SBOM is attached"
            return f"no verified SBOM for {digest}: {why}"
    return None
