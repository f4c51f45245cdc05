#!/bin/bash
# The fatbin pruner on an H200 test machine (host mode), as run for this evidence folder:
#   bash .gpu/sglang/tools/device_run.sh exec -- bash evidence/h200-lean-2026-11-30/run.sh prune
#   bash .gpu/sglang/tools/device_run.sh exec -- bash evidence/h200-lean-2026-11-30/run.sh ladder
# (two calls on a warm machine: /tmp/pruned survives between them)
# 1. copies the machine's torch and NVIDIA libraries (the same torch 2.11.0+cu130 wheels an image
#    installs) and the staged sgl_kernel to /tmp/pruned, and prunes them for the matrix's archs;
# 2. the driver check of the verifier's kernel-smoke stage on the original and on the pruned libraries
#    (every fatbin with code for this GPU must load);
# 3. the verifier's ladder in host mode with the pruned copies first on PYTHONPATH: imports,
#    arch-audit (the loader check), kernel-smoke (the driver check), server, first generation.
# Writes $OUT/*.json and $OUT/run.log.
set -u
out=${OUT:-/tmp/lean-out}; mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
staged=${PYTHONPATH%%:*}
archs=$(python3 -c 'import yaml; print(",".join(yaml.safe_load(open("matrix.yaml"))["archs"]))')
echo "== site $site, staged SGLang $staged, archs $archs, GPU $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader)"
if [ "${1:-}" = prune ]; then
rm -rf /tmp/pruned /tmp/fatbins && mkdir -p /tmp/pruned /tmp/fatbins
t0=$(date +%s.%N)
cp -a "$site/torch" "$site/nvidia" "$staged/sgl_kernel" /tmp/pruned/
echo "== copy: $(python3 -c "import time; print(round(time.time() - $t0, 1))") s; $(du -sm /tmp/pruned | cut -f1) MB"
t0=$(date +%s.%N)
python3 images/lean/prune_fatbins.py /tmp/pruned --archs "$archs" --report /tmp/fatbins/h200.json
echo "== prune: $(python3 -c "import time; print(round(time.time() - $t0, 1))") s; $(du -sm /tmp/pruned | cut -f1) MB after"
cp /tmp/fatbins/h200.json "$out/prune-report.json"

# The driver check on the same libraries before and after: the same fatbins must load.
[ -n "${SKIP_DRIVER_CHECK:-}" ] && exit 0   # the fa3 run needs only the pruned copies
SGLANG_IMAGES_FATBIN_REPORTS=/tmp/fatbins python3 - "$site" "$staged" "$out" <<'PY'
import json, os, subprocess, sys, time
sys.path.insert(0, os.getcwd())
from buildscripts.probe import pruned
site, staged, out = sys.argv[1:]
rewritten = sorted(pruned.libraries())
assert rewritten, "no pruned library found in the report"
original = [p.replace("/tmp/pruned/sgl_kernel", os.path.join(staged, "sgl_kernel")).replace("/tmp/pruned", site)
            for p in rewritten]
result = {}
for name, paths in (("original", original), ("pruned", rewritten)):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", pruned.driver_snippet(paths)], capture_output=True, text=True,
                          env={**os.environ, **pruned.DRIVER_ENV})
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("@@json ")), None)
    result[name] = json.loads(line[7:]) if line else {"exit": done.returncode, "log": (done.stdout + done.stderr)[-2000:]}
    result[name]["seconds"] = round(time.monotonic() - started, 1)
    counts = {os.path.basename(p): c for p, c in result[name].get("libraries", {}).items()}
    print(f"== driver check, {name}: ok={result[name].get('ok')} in {result[name]['seconds']} s: {counts}")
same = {os.path.basename(p): (result["original"]["libraries"].get(o), result["pruned"]["libraries"].get(p))
        for o, p in zip(original, rewritten)}
result["same_counts"] = all(a == b for a, b in same.values())
print(f"== same fatbins load before and after: {result['same_counts']}")
json.dump(result, open(os.path.join(out, "driver-check.json"), "w"), indent=1)
PY

exit 0
fi

if [ "${1:-}" = fa3 ]; then
# sgl_kernel's FA3 library as a built image's pruner left it (sm_90a code only; sent xz-compressed in
# parts, reassembled in /tmp/fa/fa.xz): the driver check, FA3 against torch's attention, and the
# ladder's server with FA3 attention.
xz -dc /tmp/fa/fa.xz > /tmp/pruned/sgl_kernel/flash_ops.abi3.so
echo "== flash_ops.abi3.so: $(stat -c %s /tmp/pruned/sgl_kernel/flash_ops.abi3.so) bytes, sha256 $(sha256sum /tmp/pruned/sgl_kernel/flash_ops.abi3.so | cut -c1-64)"
export PYTHONPATH=/tmp/pruned:$PYTHONPATH PYTHONUNBUFFERED=1
python3 - "$out" <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, os.getcwd())
from buildscripts.probe import pruned
path = "/tmp/pruned/sgl_kernel/flash_ops.abi3.so"
done = subprocess.run([sys.executable, "-c", pruned.driver_snippet([path])], capture_output=True, text=True,
                      env={**os.environ, **pruned.DRIVER_ENV})
line = next((ln for ln in done.stdout.splitlines() if ln.startswith("@@json ")), None)
result = json.loads(line[7:]) if line else {"exit": done.returncode, "log": (done.stdout + done.stderr)[-2000:]}
print("== driver check, flash_ops:", result.get("ok"), result.get("libraries"), result.get("failures"))
json.dump(result, open(os.path.join(sys.argv[1], "driver-check-flash-ops.json"), "w"), indent=1)
PY
python3 - <<'PY'
import torch
from sgl_kernel.flash_attn import flash_attn_varlen_func
torch.manual_seed(0)
lens = [37, 128, 300]
q = torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.bfloat16)
k, v = torch.randn_like(q), torch.randn_like(q)
cu = torch.tensor([0, 37, 165, 465], device="cuda", dtype=torch.int32)
out = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
out = out[0] if isinstance(out, tuple) else out
worst = 0.0
for i, n in enumerate(lens):
    s = slice(int(cu[i]), int(cu[i + 1]))
    ref = torch.nn.functional.scaled_dot_product_attention(q[s].transpose(0, 1).float(), k[s].transpose(0, 1).float(),
                                                           v[s].transpose(0, 1).float(), is_causal=True).transpose(0, 1)
    worst = max(worst, (out[s].float() - ref).abs().max().item())
print(f"== FA3 (pruned flash_ops) vs torch SDPA, causal varlen bf16: max abs error {worst:.4f}", "OK" if worst < 0.05 else "WRONG")
PY
args=$(python3 -c 'import json, yaml; a = yaml.safe_load(open("matrix.yaml"))["profiles"]["default"]["args"]
print(json.dumps([("fa3" if x == "triton" else x) for x in a]))')
python3 -m buildscripts.probe --mode host --archs "$archs" --lane-cuda 13.0 --stages gpu-visible,server,first-generation \
  --workdir /tmp/fa3-probe --stage-timeout 400 --server-args "$args" --out "$out/ladder-fa3.json" | cut -c1-300
python3 -c 'import json, sys
for r in json.load(open(sys.argv[1])):
    print("RESULT", r["name"], r["status"], r.get("duration_s"), r.get("reason", "")[:200],
          (r.get("evidence", {}).get("reference") or {}).get("verdict", ""))' "$out/ladder-fa3.json"
grep -m3 -i "attention_backend\|fa3" /tmp/fa3-probe/server-*.log | cut -c1-300
exit 0
fi

# The ladder with the pruned copies first on the path (torch finds its NVIDIA libraries beside it).
export PYTHONPATH=/tmp/pruned:$PYTHONPATH SGLANG_IMAGES_FATBIN_REPORTS=/tmp/fatbins PYTHONUNBUFFERED=1
python3 -c 'import torch, sgl_kernel; a = torch.randn(256, 256, device="cuda"); (a @ a).sum().item()
print("== torch from", torch.__file__, "; sgl_kernel from", sgl_kernel.__file__)
print("== mapped:", sorted({l.split()[-1] for l in open("/proc/self/maps") if "/tmp/pruned" in l and ".so" in l})[:12])'
args=$(python3 -c 'import json, yaml; print(json.dumps(yaml.safe_load(open("matrix.yaml"))["profiles"]["default"].get("args", [])))')
t0=$(date +%s)
python3 -m buildscripts.probe --mode host --archs "$archs" --lane-cuda 13.0 \
  --stages import,arch-audit,gpu-visible,kernel-smoke,server,first-generation \
  --workdir /tmp/lean-probe --stage-timeout 400 --server-args "$args" --out "$out/ladder-pruned.json" | cut -c1-400
echo "== ladder: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
python3 - "$out/ladder-pruned.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    e = r.get("evidence", {})
    extra = {k: e.get(k) for k in ("http_up_s", "ready_s") if k in e}
    if r["name"] == "kernel-smoke":
        extra = {k: (v.get("ok"), v.get("error", "")) for k, v in e.items() if isinstance(v, dict)}
    if r["name"] == "arch-audit":
        extra = (e.get("pruned") or {}).get("load")
    print("RESULT", r["name"], r["status"], r.get("duration_s"), r.get("reason", "")[:200], extra)
PY
cp /tmp/lean-probe/server-*.log "$out/" 2>/dev/null; true
