"""How big an image is and what its largest parts are: per layer (named by the Dockerfile stage that
made it) and per installed package (site-packages folders; the nvidia/* libraries one by one).

`measure` reads the image's history from the engine and runs the facts stage's package measure
(`probe/sitesize.py`) in a throwaway container of it;
`markdown` renders measured images as a table for a benchmark page; `document` renders the image size
of every built cell of a run (from its saved results) for the report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..build import imagesize
from ..probe import sitesize
from ..results import RunResults
from .common import plain
from .markdown import _cell_text, _code

if TYPE_CHECKING:  # the client is the caller's: a report that measures nothing starts without the docker SDK
    import docker

PACKAGES_LISTED = 40  # site-packages folders a measure keeps (a page shows the first few)


@dataclass(frozen=True)
class Part:
    name: str
    size_bytes: int


@dataclass(frozen=True)
class ImageSizes:
    ref: str
    size_bytes: int
    layers: tuple[Part, ...]
    packages: tuple[Part, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageSizes:
        return cls(ref=data["ref"], size_bytes=int(data["size_bytes"]),
                   layers=tuple(Part(**p) for p in data["layers"]),
                   packages=tuple(Part(**p) for p in data["packages"]))


def layers_from_history(history: Iterable[Mapping[str, Any]]) -> tuple[Part, ...]:
    """Layer bytes per stage, largest first (metadata-only steps have size 0 and are left out)."""
    return tuple(Part(n, s) for n, s in imagesize.layer_sizes(history).items())


def packages_from_json(output: str) -> tuple[Part, ...]:
    """`probe/sitesize.py`'s output ([[folder, bytes], ...]) as parts, largest first."""
    parts = [Part(str(name), int(size)) for name, size in json.loads(output.strip().splitlines()[-1])]
    return tuple(sorted(parts, key=lambda p: -p.size_bytes))


def measure(client: docker.DockerClient, ref: str) -> ImageSizes:
    image = client.images.get(ref)
    # The facts stage's own measure, run in a container of the image (the probe file is stdlib only).
    script = Path(sitesize.__file__).read_text()
    raw = client.containers.run(ref, ["python3", "-c", script, str(PACKAGES_LISTED)], entrypoint=[], remove=True,
                                network_mode="none")
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return ImageSizes(ref=ref, size_bytes=int(image.attrs.get("Size", 0)),
                      layers=layers_from_history(image.history()), packages=packages_from_json(text))


def _md(value: object, *, code: bool = False) -> str:
    """A record's text as a Markdown table cell shows it: terminal escapes dropped and other control bytes shown
    as `\\xNN` (common.plain), then no line break, pipe, HTML, backtick or link bracket left as it is (the
    compatibility table's own escaping, markdown.py); `code`: as inline code (a backtick span cannot escape a
    pipe, so any text that is not plain goes in a <code> element)."""
    text = plain(str(value))
    return _code(text) if code else _cell_text(text)


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.0f} MB"


def markdown(images: Sequence[ImageSizes], top: int = 6) -> str:
    """One row per image: its size, its largest layers and its largest packages."""
    lines = ["| image | size | largest layers | largest packages |", "| --- | --- | --- | --- |"]
    for sizes in images:
        layers = ", ".join(f"{_md(p.name)} {_gb(p.size_bytes)}" for p in sizes.layers[:top])
        packages = ", ".join(f"{_md(p.name, code=True)} {_gb(p.size_bytes)}" for p in sizes.packages[:top])
        lines.append(f"| {_md(sizes.ref, code=True)} | {_gb(sizes.size_bytes)} | {layers} | {packages} |")
    return "\n".join(lines) + "\n"


def dumps(images: Sequence[ImageSizes]) -> str:
    return json.dumps([s.to_json() for s in images], indent=1) + "\n"


def document(run: RunResults) -> str:
    """reports/sizes.md: the size of each cell's image, largest first (`benchmarks/warm_lean.py` and
    `measure` give the largest layers and packages of one image)."""
    built = sorted((c for c in run.cells if c.image.size_bytes), key=lambda c: (-(c.image.size_bytes or 0), c.cell_id))
    lines = ["# Image sizes", "",
             "| cell | image | size | largest layers | largest packages | GPU code for other archs removed "
             "| kernel caches baked | compiled at first start |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cell in built:
        facts = cell.stage("facts")
        evidence = facts.evidence if facts else {}
        layers = ", ".join(f"{_md(name)} {_gb(size)}" for name, size in list(cell.image.layers.items())[:3])
        packages = ", ".join(f"{_md(name, code=True)} {_gb(int(size))}"
                             for name, size in evidence.get("largest_packages", [])[:4])
        lines.append(f"| {_md(cell.cell_id, code=True)} | {_md(cell.image.ref, code=True)} | "
                     f"{_gb(cell.image.size_bytes or 0)} | "
                     f"{layers or 'not recorded'} | {packages or 'not recorded'} | "
                     f"{_pruned(evidence.get('pruned_fatbins'))} | {_warm(evidence.get('warm_caches'))} |")
    if not built:
        lines.append("| (no image was built in these results) | | | | | | | |")
    return "\n".join(lines) + "\n"


def _pruned(summary: Mapping[str, Any] | None) -> str:
    if not summary:
        return "not recorded"
    if not summary.get("libraries"):
        return "none"
    archs = ", ".join(_md(arch) for arch in summary.get("dropped_archs", []))
    return f"{_gb(int(summary['saved_bytes']))} from {_md(summary['libraries'])} libraries ({archs})"


def _warm(summary: Mapping[str, Any] | None) -> str:
    """Two cells: what was baked, and what a first start still compiles."""
    if not summary:
        return "no (every kernel compiles at first start) | everything"
    baked = f"{_md(summary.get('modules', 0))} modules for {', '.join(_md(a) for a in summary.get('archs', []))}"
    first = "; ".join(_md(x) for x in summary.get("first_start", [])) or "nothing listed"
    return f"{baked} | {first}"
