"""LXC delivery, measured side by side in one run (results go to benchmarks/lxc-results.md): for each cell,
`nox -s export` time and archive size against the image size, then the time LXC's `oci` template takes to
create a container from the archive, and to start it with the image's init.

Usage: python benchmarks/lxc_delivery.py [--only GLOB ...] [--out benchmarks/lxc-results.md]
Builds the cells first if needed (`build --no-verify`, cached when nothing changed); removes the archives
and containers it makes.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lxc_container import container  # noqa: E402  (the same container recipe the tests use)

DEFAULT = ["sglang0.5.16-torch2.11.0-cu130-none-bookworm", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, cwd=ROOT, capture_output=True, text=True)
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "lxc-results.md")
    a = ap.parse_args(argv)
    cells = a.only or DEFAULT
    run_id = time.strftime("bench-lxc-%Y%m%d-%H%M%S")
    build = [sys.executable, "-m", "buildscripts", "build", "--no-verify", "--run-id", run_id]
    timed([*build, *[x for c in cells for x in ("--only", c)]])
    records = json.loads((ROOT / "runs" / run_id / "results.json").read_text())["cells"]
    rows = []
    for cell in records:
        image, size = cell["image"]["id"], cell["image"]["size_bytes"]
        with tempfile.TemporaryDirectory(prefix="lxc-bench-") as out:
            export_s = timed([sys.executable, "-m", "buildscripts", "export", image, "--force", "--out", out])
            archive = Path(out) / f"{cell['cell_id']}.oci.tar"
            archive_size = archive.stat().st_size
            started = time.monotonic()
            with container(archive, start=False) as name:
                create_s = time.monotonic() - started
                start_s = timed(["lxc-start", "-n", name, "-d"]) + timed(
                    ["lxc-wait", "-n", name, "-s", "RUNNING", "-t", "30"])
        rows.append((cell["cell_id"], size, archive_size, export_s, create_s, start_s))
        print(rows[-1], flush=True)
    lines = [
        "# LXC delivery (`python benchmarks/lxc_delivery.py`)", "",
        f"{time.strftime('%Y-%m-%d')}, {platform.node()}: a 2-core CPU machine, skopeo {_version('skopeo')}, "
        f"LXC {_version('lxc-create')}. Export: skopeo from the Docker engine to an OCI layout with gzip layers, "
        "annotated and packed reproducibly. Create: LXC's `oci` template (skopeo + umoci) unpacking the archive.",
        "", "| cell | image | archive | archive / image | export | create from archive | start |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| `{c}` | {s / 1e9:.2f} GB | {z / 1e9:.2f} GB | {z / s:.2f} | {e:.0f} s | {cr:.0f} s | {st:.2f} s |"
              for c, s, z, e, cr, st in rows]
    a.out.write_text("\n".join(lines) + "\n")
    print(a.out.read_text())
    return 0


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.split()[-1] if done.stdout.split() else "?"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
