"""A package index in a folder, from real metadata: PEP 503 pages, tiny wheels, PEP 658 `.metadata` files.

tests/data/watch/ holds the METADATA headers of real releases as PyPI served them on 2026-12-01 (sglang
0.5.23, torch 2.14.1 and 2.15.0; the long description left out). `made_up` turns one into a release that
does not exist (another version, another torch requirement); `write` lays releases out as an index that
`served` serves on the loopback with `python -m http.server` (which ignores HTTP ranges: wheels without a
`.metadata` file are then read whole, as from any such server).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import re
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "watch"
CP311 = "cp311-cp311-manylinux_2_34_x86_64"
TORCH_TAG = "cp311-cp311-manylinux_2_28_x86_64"


def real(name: str, version: str) -> bytes:
    return (DATA / f"{name}-{version}.METADATA").read_bytes()


def made_up(metadata: bytes, version: str, *, torch: str | None = "keep") -> bytes:
    """`metadata` with another Version and, unless "keep", another torch requirement (None: no torch at all)."""
    text = re.sub(r"(?m)^Version: .*$", f"Version: {version}", metadata.decode())
    if torch != "keep":
        line = "" if torch is None else f"Requires-Dist: {torch}\n"
        text = re.sub(r"(?m)^Requires-Dist: torch==[^;\n]*\n", line, text)
    return text.encode()


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    metadata: bytes
    tags: str = CP311
    yanked: str | None = None
    pep658: bool = True       # serve FILE.metadata beside the wheel (else the wheel is read)


def wheel_bytes(release: Release) -> bytes:
    dist = f"{release.name.replace('-', '_')}-{release.version}.dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(f"{release.name.replace('-', '_')}/__init__.py", "")
        wheel.writestr(f"{dist}/METADATA", release.metadata)
        wheel.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\n"
                                        f"Tag: {release.tags}\n")
        wheel.writestr(f"{dist}/RECORD", "")
    return buffer.getvalue()


def filename(release: Release) -> str:
    return f"{release.name.replace('-', '_')}-{release.version}-{release.tags}.whl"


def write(root: Path, releases: list[Release]) -> Path:
    """The index under `root` (its `simple/` folder is returned)."""
    files, simple = root / "files", root / "simple"
    files.mkdir(parents=True, exist_ok=True)
    pages: dict[str, list[str]] = {}
    for release in releases:
        name = filename(release)
        data = wheel_bytes(release)
        (files / name).write_bytes(data)
        attrs = f' data-yanked="{html.escape(release.yanked)}"' if release.yanked is not None else ""
        if release.pep658:
            (files / f"{name}.metadata").write_bytes(release.metadata)
            attrs += f' data-core-metadata="sha256={hashlib.sha256(release.metadata).hexdigest()}"'
        href = f"../../files/{name}#sha256={hashlib.sha256(data).hexdigest()}"
        pages.setdefault(release.name, []).append(f'<a href="{href}"{attrs}>{name}</a><br/>')
    for project, anchors in pages.items():
        (simple / project).mkdir(parents=True, exist_ok=True)
        (simple / project / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(anchors)
                                                     + "\n</body></html>\n")
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in pages)
    (simple / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return simple


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def served(root: Path) -> Iterator[str]:
    """`root` on http://127.0.0.1:PORT; yields the index URL (`.../simple`)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                               "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                msg = f"the local index server did not start on port {port}"
                raise RuntimeError(msg)
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/simple"
    finally:
        server.terminate()
        server.wait(timeout=10)
