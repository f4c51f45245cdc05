"""What a fresh GPU runner's pull of a real cell costs with and without `unpigz`, and with zstd layers, side by side
in one run (results go to benchmarks/pull-results.md).

Docker's engines (dockerd and containerd alike) decompress a pulled gzip layer with `unpigz` when it is on their
PATH, else with Go's own gzip reader. `verify --pull REPO@sha256:…` on a GPU runner, and the second engine of
tests/e2e/test_build_once.py, pull a 3.4 GB compressed, 7.4 GB unpacked cell. Here the 0.5.16 `pip` cell is
pushed once to a loopback registry, then pulled by digest into a fresh throw-away Docker 26 engine (containerd
image store, no image, no cache) each way, the ways alternating: with unpigz found, and with the engines told
not to use it (CONTAINERD_DISABLE_PIGZ=1, MOBY_DISABLE_PIGZ=1). Per pull: wall seconds, CPU-seconds of the
whole machine (/proc/stat: run it with nothing else running), and whether an unpigz process was seen.

With `--zstd` the same image is also copied inside the registry with its layers recompressed as zstd (skopeo,
through an OCI layout), that copy's pulls join the alternation, and this machine's own engine (Docker 20.10) is
asked to pull it once: which engines can.

Usage: python benchmarks/pull_decompress.py [--repeat N] [--zstd] [--out benchmarks/pull-results.md]
Needs root, the engine-26 binaries and pigz (`.ci/install-engine`), docker-registry, skopeo, ~15 GB free (~20 with
--zstd), and the 0.5.16 `pip` cell's image in this engine (`nox -s build`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402
from suite_time import busy_seconds  # noqa: E402  # this folder's: run as `python benchmarks/NAME.py`

from buildscripts.errors import FatalError  # noqa: E402
from buildscripts.publish import oci_export  # noqa: E402
from tests.digest_records import PIP_CELL  # noqa: E402
from tests.registry_server import RegistryServer, push_as_is  # noqa: E402
from tests.second_engine import second_engine  # noqa: E402

GO = "Go's gzip"
ZSTD = "zstd layers"
WAYS = {"unpigz": {}, GO: {"CONTAINERD_DISABLE_PIGZ": "1", "MOBY_DISABLE_PIGZ": "1"}, ZSTD: {}}


@contextlib.contextmanager
def watching(name: str) -> Iterator[threading.Event]:
    """An event set once a process called `name` is seen (polled every 0.5 s)."""
    seen, done = threading.Event(), threading.Event()

    def poll() -> None:
        while not done.wait(0.5):
            if subprocess.run(["pgrep", "-x", name], capture_output=True).returncode == 0:
                seen.set()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    """os.environ with `extra` (what the second engine, and the containerd it starts, inherit)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pull(work: Path, ref: str, way: str) -> dict[str, object]:
    with environment(WAYS[way]), second_engine(work / "engine") as engine:
        engine.wipe()
        before_cpu, started = busy_seconds(), time.monotonic()
        with watching("unpigz") as seen:
            subprocess.run(["docker", "pull", "--quiet", ref], env=engine.env, check=True, capture_output=True)
        found = {"way": way, "wall_s": round(time.monotonic() - started, 1),
                 "cpu_s": round(busy_seconds() - before_cpu, 1), "unpigz_seen": seen.is_set()}
    shutil.rmtree(work / "engine", ignore_errors=True)
    return found


def layer_bytes(ref: str) -> int:
    """The compressed bytes of the layers `ref`'s manifest lists (what a pull downloads)."""
    done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"], capture_output=True,
                          text=True, check=True)
    return sum(int(layer["size"]) for layer in json.loads(done.stdout)["layers"])


def recompress(source: str, dest: str, work: Path) -> tuple[str, float, float]:
    """`source` copied to `dest` with its layers zstd: (dest's digest, wall s, CPU-seconds). Through an OCI layout:
    skopeo 1.9 copying registry to registry reuses the gzip blobs the registry holds whatever compression is asked;
    into an empty layout every layer is recompressed, and the way back keeps those bytes."""
    digest_file, layout = work / "zstd.digest", f"oci:{work / 'zstd-layout'}:bench"
    before_cpu, started = busy_seconds(), time.monotonic()
    subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-compress",
                    "--dest-compress-format", "zstd", f"docker://{source}", layout], check=True)
    subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", "--digestfile",
                    str(digest_file), layout, f"docker://{dest}"], check=True)
    shutil.rmtree(work / "zstd-layout", ignore_errors=True)
    return (digest_file.read_text().strip(), round(time.monotonic() - started, 1),
            round(busy_seconds() - before_cpu, 1))


def old_engine_pull(ref: str) -> str:
    """This machine's engine asked to pull `ref`: what it says (and the image removed again if it came)."""
    done = subprocess.run(["docker", "pull", "--quiet", ref], capture_output=True, text=True, check=False)
    version = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                             text=True, check=False).stdout.strip()
    if done.returncode == 0:
        subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)
        return f"Docker {version}: pulled"
    return f"Docker {version}: refused (exit {done.returncode}): {done.stderr.strip().splitlines()[-1][:300]}"


def render(rows: list[dict[str, object]], image_bytes: int, out: Path, zstd: dict[str, object] | None) -> None:
    def mean(way: str, key: str) -> float:
        values = [float(str(r[key])) for r in rows if r["way"] == way]
        return sum(values) / len(values)

    lines = [
        "# A fresh runner's pull of a real cell, with and without unpigz",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `benchmarks/pull_decompress.py` on a "
        f"{os.cpu_count()}-core {platform.machine()} machine, nothing else running: the 0.5.16 `pip` cell "
        f"({image_bytes / 1e9:.1f} GB unpacked) pulled by digest from a loopback registry into a fresh Docker 26 "
        "engine (containerd image store), the ways alternating.",
        "",
        "| pull | way | wall | CPU-seconds | unpigz seen |",
        "| ---: | --- | ---: | ---: | --- |",
        *[f"| {i} | {r['way']} | {r['wall_s']} s | {r['cpu_s']} | {'yes' if r['unpigz_seen'] else 'no'} |"
          for i, r in enumerate(rows, 1)],
        "",
        f"Mean with unpigz against Go's gzip: wall {mean('unpigz', 'wall_s'):.0f} s against "
        f"{mean(GO, 'wall_s'):.0f} s ({mean('unpigz', 'wall_s') / mean(GO, 'wall_s'):.2f}×), "
        f"CPU {mean('unpigz', 'cpu_s'):.0f} against {mean(GO, 'cpu_s'):.0f} CPU-seconds "
        f"({mean('unpigz', 'cpu_s') / mean(GO, 'cpu_s'):.2f}×).",
        "",
    ]
    if zstd is not None:
        zbytes, gbytes = float(str(zstd["zstd_bytes"])), float(str(zstd["gzip_bytes"]))
        lines += [
            f"zstd layers against gzip with unpigz: wall {mean(ZSTD, 'wall_s'):.0f} s against "
            f"{mean('unpigz', 'wall_s'):.0f} s ({mean(ZSTD, 'wall_s') / mean('unpigz', 'wall_s'):.2f}×), CPU "
            f"{mean(ZSTD, 'cpu_s'):.0f} against {mean('unpigz', 'cpu_s'):.0f} CPU-seconds "
            f"({mean(ZSTD, 'cpu_s') / mean('unpigz', 'cpu_s'):.2f}×); downloaded {zbytes / 1e9:.2f} GB "
            f"against {gbytes / 1e9:.2f} GB ({zbytes / gbytes:.2f}×). "
            "Recompressing the pushed image (skopeo, into an OCI layout and back, zstd's default level): "
            f"{zstd['wall_s']} s wall, {zstd['cpu_s']} CPU-seconds.",
            "",
            f"The same zstd image asked of this machine's engine: {zstd['old_engine']}.",
            "",
        ]
    out.write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="pulls of each way (default 1)")
    ap.add_argument("--zstd", action="store_true", help="also a copy with zstd layers (and Docker 20.10's answer)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "pull-results.md")
    a = ap.parse_args()
    if not shutil.which("unpigz"):
        sys.exit("unpigz is not installed: `apt-get install pigz` (`.ci/install-engine` does)")
    work = Path(tempfile.mkdtemp(prefix="pull-bench-", dir="/var/tmp"))
    server = RegistryServer(work / "registry")
    server.folder.mkdir()
    try:
        server.start()
        with contextlib.closing(docker.from_env()) as client:
            try:   # the cell's newest local image, as `nox -s export CELL` finds it
                image = oci_export.resolve(client, PIP_CELL)
            except FatalError as exc:
                sys.exit(str(exc))
            digest = push_as_is(client, str(image.id), f"{server.url}/bench:bench")
        ref = f"{server.url}/bench@{digest}"
        refs = dict.fromkeys(WAYS, ref)
        zstd: dict[str, object] | None = None
        if a.zstd:
            zdigest, wall_s, cpu_s = recompress(ref, f"{server.url}/bench:zstd", work)
            refs[ZSTD] = f"{server.url}/bench@{zdigest}"
            zstd = {"wall_s": wall_s, "cpu_s": cpu_s, "gzip_bytes": layer_bytes(ref),
                    "zstd_bytes": layer_bytes(refs[ZSTD]), "old_engine": old_engine_pull(refs[ZSTD])}
            print(zstd)
        ways = [w for w in WAYS if a.zstd or w != ZSTD]
        rows = [pull(work, refs[way], way) for _ in range(a.repeat) for way in ways]
        for row in rows:
            print(row)
        render(rows, int(image.attrs.get("Size") or 0), a.out, zstd)
        print(f"wrote {a.out}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
