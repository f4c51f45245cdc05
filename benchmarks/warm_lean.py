"""Lean images and start-up: a built cell image measured against the image the project built before.

    python benchmarks/warm_lean.py [IMAGE] [--before benchmarks/image-sizes-before.json]
                                   [--out benchmarks/warm-lean-results.json (the default)]

IMAGE defaults to the newest image of the 0.5.16 `pip` cell (built first, without verification, when
there is none). Side by side in one run:
  - size: the image, its layers and largest packages (`report/sizes.py`) against the image of the same
    cell before bytecode, the lean recipe, the fatbin pruner and the bake (measured then, kept in
    image-sizes-before.json);
  - what the build did, from the image's own reports: per layer the bytes the fatbin pruner removed,
    the bytecode compiled, the kernel caches baked (archs, modules, bake time);
  - `import sglang`, three times each, alternating: with the image's bytecode, and with it ignored
    (PYTHONPYCACHEPREFIX points elsewhere: every module compiled in memory, as the image did before).
Server start times need a GPU: they come from the H200 evidence folders, not from here.
Prints JSON and writes it to --out.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from buildscripts.report import sizes  # noqa: E402

CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"

SCRIPT = r"""
set -u
for i in 1 2 3; do
  for mode in ignored bytecode; do
    if [ $mode = ignored ]; then prefix=/tmp/no-pyc; else prefix=; fi
    PYTHONPYCACHEPREFIX=$prefix python3 -c 'import time; t = time.time(); import sglang
print("IMPORT '$mode'", round(time.time() - t, 2))' 2>/dev/null
  done
done
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "PYC $(find "$site" -name '*.pyc' -printf '%s\n' | awk '{n+=1; s+=$1} END {print n, s}')"
for f in /etc/sglang-images/fatbins/*.json /etc/sglang-images/warm.json; do
  [ -f "$f" ] && echo "REPORT $f $(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$f")"
done
"""


def newest_image(client: docker.DockerClient, cell: str) -> str:
    found = client.images.list(filters={"label": f"io.sglang-images.cell={cell}"})
    if not found:
        subprocess.run([sys.executable, "-m", "buildscripts", "build", "--only", cell, "--no-verify"],
                       cwd=ROOT, check=True)
        found = client.images.list(filters={"label": f"io.sglang-images.cell={cell}"})
    newest = max(found, key=lambda i: i.attrs["Created"])
    return str(newest.tags[0])


def measure_inside(client: docker.DockerClient, image: str) -> dict[str, Any]:
    raw = client.containers.run(image, ["sh", "-c", SCRIPT], entrypoint=[], remove=True, network_mode="none",
                                environment={"PYTHONDONTWRITEBYTECODE": "1"}, stdout=True, stderr=True)
    output = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    found: dict[str, Any] = {"import_s": {"ignored": [], "bytecode": []}, "pruned": {}, "warm": None}
    for line in output.splitlines():
        if m := re.match(r"IMPORT (ignored|bytecode) ([\d.]+)", line):
            found["import_s"][m[1]].append(float(m[2]))
        elif m := re.match(r"PYC (\d+) (\d+)", line):
            found["bytecode"] = {"files": int(m[1]), "bytes": int(m[2])}
        elif line.startswith("REPORT "):
            _tag, path, text = line.split(" ", 2)
            report = json.loads(text)
            if path.endswith("warm.json"):
                # a stamped build's report holds no seconds (images/warm/bake.py): None there
                found["warm"] = {"archs": report["archs"], "seconds": report.get("seconds"),
                                 "modules": [(r["arch"], b["module"].rsplit("/", 1)[-1], b.get("seconds"))
                                             for r in report["baked"] for b in r["built"]]}
            else:
                layer = Path(path).stem
                found["pruned"][layer] = {
                    "saved_bytes": sum(i["saved_bytes"] for i in report["pruned"].values()),
                    "libraries": {k: v["saved_bytes"] for k, v in report["pruned"].items()},
                    "kept": report["kept"]}
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("image", nargs="?")
    ap.add_argument("--before", default=str(ROOT / "benchmarks" / "image-sizes-before.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "warm-lean-results.json"))
    a = ap.parse_args()
    client = docker.from_env()
    image = a.image or newest_image(client, CELL)
    before = sizes.ImageSizes.from_json(json.loads(Path(a.before).read_text())[0])
    after = sizes.measure(client, image)
    result = {
        "image": image,
        "size": {"before": before.to_json(), "after": after.to_json(),
                 "ratio": round(after.size_bytes / before.size_bytes, 3)},
        **measure_inside(client, image),
    }
    text = json.dumps(result, indent=1) + "\n"
    Path(a.out).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
