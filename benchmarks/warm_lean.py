"""Bytecode, lean layers and the warm-cache bake, measured in one container of a built cell image.

    python benchmarks/warm_lean.py IMAGE [--archs sm_90a,sm_100a,sm_120a] [--out benchmarks/warm-lean-results.json]

In one container of IMAGE (an image built before these steps, e.g. the 0.5.16 `pip` cell) it runs, in
order: `import sglang` three times (no bytecode), the lean recipe (images/lean), the bytecode compiler
(images/bytecode.py), `import sglang` three times again, the kernel-cache bake for every arch
(images/warm/bake.py, no GPU), and the probe's CPU stages on the result. The image is not changed; the
numbers are what the layered build does (a removal in the installing layer shrinks it by what the
recipe removed; bytecode and baked caches add what they weigh). Prints JSON; --out also writes it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
set -u
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
imp() {
  for i in 1 2 3; do
    python3 -c 'import time; t = time.time(); import sglang; print("IMPORT '$1'", round(time.time() - t, 2))'
  done
}
now() { date +%s.%N; }
imp before
sh /src/images/lean/lean.sh cu130 /src/images/lean/recipe.txt
t=$(now); python3 /src/images/bytecode.py "$site"; echo "BYTECODE_S $(python3 -c "print(round($(now) - $t, 1))")"
echo "PYC_KIB $(find "$site" -name '*.pyc' -printf '%k\n' | awk '{s+=$1} END {print s}')"
imp after
export SGLANG_CACHE_DIR=/var/cache/sglang TVM_FFI_CACHE_DIR=/var/cache/sglang/tvm-ffi \
  FLASHINFER_WORKSPACE_BASE=/var/cache/sglang/flashinfer TRITON_CACHE_DIR=/var/cache/sglang/triton
t=$(now); python3 /src/images/warm/bake.py /src/images/warm/sglang-0.5.16.json --archs "$ARCHS" \
  --report /etc/sglang-images/warm.json && echo "BAKE_S $(python3 -c "print(round($(now) - $t, 1))")"
find /var/cache/sglang/tvm-ffi -name '*.o' -delete
echo "WARM_KIB $(du -sk /var/cache/sglang | cut -f1)"
python3 - <<'EOF'
import json
r = json.load(open("/etc/sglang-images/warm.json"))
print("BAKED", json.dumps([(x["arch"], b["module"].rsplit("/", 1)[-1], b["ok"], b["seconds"])
                           for x in r["baked"] for b in x["built"]]))
EOF
cd /src && python3 -m probe --archs "$ARCHS" --lane-cuda 13.0 \
  --stages facts,import,flavour,arch-audit,toolchain,jit-compile --workdir /tmp/probe \
  --out /tmp/probe.json >/dev/null 2>&1
python3 - <<'EOF'
import json
stages = json.load(open("/tmp/probe.json"))
print("STAGES", json.dumps([(r["name"], r["status"], r.get("reason", "")[:200]) for r in stages]))
EOF
"""


def parse(output: str) -> dict[str, object]:
    found: dict[str, object] = {"import_before_s": [], "import_after_s": [], "removed": []}
    for line in output.splitlines():
        if m := re.match(r"IMPORT (before|after) ([\d.]+)", line):
            found[f"import_{m[1]}_s"].append(float(m[2]))  # type: ignore[attr-defined]
        elif m := re.match(r"lean: removed (\S+) \((\d+) KiB\)", line):
            found["removed"].append({"path": m[1], "bytes": int(m[2]) * 1024})  # type: ignore[attr-defined]
        elif m := re.match(r"(BYTECODE_S|BAKE_S|PYC_KIB|WARM_KIB) ([\d.]+)", line):
            found[m[1].lower()] = float(m[2])
        elif line.startswith(("BAKED ", "STAGES ")):
            key, _, rest = line.partition(" ")
            found[key.lower()] = json.loads(rest)
        elif line.startswith("bytecode:"):
            found["bytecode"] = line
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--archs", default="sm_90a,sm_100a,sm_120a")
    ap.add_argument("--out")
    a = ap.parse_args()
    client = docker.from_env()
    mounts = [docker.types.Mount("/src/images", str(ROOT / "images"), type="bind", read_only=True),
              docker.types.Mount("/src/probe", str(ROOT / "buildscripts" / "probe"), type="bind", read_only=True)]
    raw = client.containers.run(a.image, ["sh", "-c", SCRIPT], entrypoint=[], remove=True, network_mode="none",
                                mounts=mounts, environment={"ARCHS": a.archs, "PYTHONDONTWRITEBYTECODE": "1"},
                                stdout=True, stderr=True)
    output = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    result = {"image": a.image, "archs": a.archs, **parse(output), "log_tail": output[-4000:]}
    text = json.dumps(result, indent=1) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
