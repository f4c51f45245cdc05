"""What the bake's repeatable step (images/warm/repeatable.py) adds to a build: its seconds over a folder of ELF
libraries, side by side with reading the files it reads once (the least any pass over them costs).

    python benchmarks/repeatable_cost.py FOLDER [FOLDER ...] [--rounds 5]

Each FOLDER is copied into a scratch folder first (the step rewrites in place), with a .ninja_log and a .ninja_deps
of ninja's formats beside the copies so that every kind of file the step handles is there. Prints one line per
round and the medians; the baked caches of a cell are about 13 MB (benchmarks/warm-lean-results.md), so a folder
of a few tens of MB of shared libraries (a Python environment's compiled extensions) is a generous stand-in.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EPOCH = "1783764997"

from tests.image_scripts import load  # noqa: E402 - the images' scripts as the tests load them


def ninja_records(folder: Path, outputs: list[str]) -> None:
    """A journal (v5) and a deps log (v4) naming `outputs`, as ninja writes them."""
    lines = ["# ninja log v5"] + [f"{i * 10}\t{i * 10 + 5}\t{1_796_000_000_000_000_000 + i}\t{o}\t{i:016x}"
                                  for i, o in enumerate(outputs)]
    (folder / ".ninja_log").write_text("\n".join(lines) + "\n")
    data = bytearray(b"# ninjadeps\n" + struct.pack("<I", 4))
    for i, name in enumerate(outputs):
        raw = name.encode()
        raw += b"\0" * ((4 - len(raw) % 4) % 4)
        data += struct.pack("<I", len(raw) + 4) + raw + struct.pack("<I", ~i & 0xFFFFFFFF)
    for i in range(len(outputs)):   # each output's deps: its mtime and, as input, itself (the shape is what counts)
        mtime = 1_796_000_000_000_000_000 + i
        data += struct.pack("<I", 16 | 0x80000000) + struct.pack("<iIIi", i, mtime & 0xFFFFFFFF, mtime >> 32, i)
    (folder / ".ninja_deps").write_bytes(bytes(data))


def copy(folders: list[Path], into: Path) -> tuple[int, int]:
    files = size = 0
    for n, folder in enumerate(folders):
        target = into / f"f{n}"
        shutil.copytree(folder, target, symlinks=True)
        outputs = [str(p.relative_to(target)) for p in target.rglob("*.so")]
        ninja_records(target, outputs)
        files += len(outputs)
        size += sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    return files, size


def read_all(folder: Path) -> None:
    """Each file the step reads, once: the libraries and ninja's records."""
    for path in folder.rglob("*"):
        if path.is_file() and (path.suffix in (".so", ".o") or path.name in (".ninja_log", ".ninja_deps")):
            path.read_bytes()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    repeatable = load(Path("images/warm/repeatable.py"))
    steps, reads = [], []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory() as scratch:
            files, size = copy(args.folders, Path(scratch))
            t0 = time.perf_counter()
            read_all(Path(scratch))
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            counts = repeatable.make_repeatable([scratch], EPOCH)
            steps.append(time.perf_counter() - t0)
        print(f"round {n + 1}: {files} libraries, {size / 1e6:.1f} MB: repeatable {steps[-1]:.3f} s, "
              f"read once {reads[-1]:.3f} s ({counts})")
    step, read = statistics.median(steps), statistics.median(reads)
    print(f"median: repeatable {step:.3f} s, read once {read:.3f} s ({step / read:.1f}x), "
          f"{size / 1e6 / step:.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
