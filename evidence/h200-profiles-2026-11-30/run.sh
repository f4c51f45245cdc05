#!/bin/bash
# Server profiles other than `default` on an H200 test machine (host mode), as run for this folder:
#   bash .gpu/sglang/tools/device_run.sh exec -- bash evidence/h200-profiles-2026-11-30/run.sh cold flashinfer [piecewise]
#   bash .gpu/sglang/tools/device_run.sh exec -- bash evidence/h200-profiles-2026-11-30/run.sh rerecord flashinfer piecewise
#   bash .gpu/sglang/tools/device_run.sh exec -- bash evidence/h200-profiles-2026-11-30/run.sh bake-warm flashinfer piecewise
#   bash .gpu/sglang/tools/device_run.sh exec -- bash -c 'bash evidence/h200-profiles-2026-11-30/run.sh cold reasoning;
#     BAKE_PROFILES=default bash evidence/h200-profiles-2026-11-30/run.sh bake-warm reasoning'
# cold: each profile's server start with empty caches, through the verifier's own server and
#   first-generation stages, with the recorder (recorder/sitecustomize.py) logging every SGLang JIT
#   kernel and every FlashInfer module generator called; writes record-PROFILE.jsonl.
#   (The recorder has since moved to images/warm/recorder/; to run this again, put that folder where
#   $here/recorder stands below. docs/warm-manifest.md says how a start is recorded.)
# bake-warm: images/warm/bake.py builds the manifest's modules of PROFILE for sm_90a with the GPU hidden
#   (CUDA_VISIBLE_DEVICES empty), into the cache layout an image has; then nvcc is hidden (the CUDA
#   13.0 bin/ and nvvm/ renamed, CUDA_HOME unset, as in a CUDA runtime image) and the same start runs on
#   the baked caches, with the verifier's warm check (no compile of anything claimed baked).
set -u
# Everything goes to one folder, packed into one archive at exit (few files come back from a call).
out=/tmp/profiles-out/$1; rm -rf "$out"; mkdir -p "$out"
trap 'tar -C /tmp/profiles-out -czf "${OUT:-/tmp}/profiles-$phase.tgz" "$phase"' EXIT
exec > >(tee -a "$out/run.log") 2>&1
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
echo "== GPU $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader); nproc $(nproc)"
caches() {  # root: the cache variables an image sets (images/Dockerfile, warm-true)
  export SGLANG_CACHE_DIR=$1 TVM_FFI_CACHE_DIR=$1/tvm-ffi FLASHINFER_WORKSPACE_BASE=$1/flashinfer \
    TRITON_CACHE_DIR=$1/triton TORCHINDUCTOR_CACHE_DIR=$1/inductor CUDA_CACHE_PATH=$1/nv; mkdir -p "$1"; }
profile_args() { python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open("matrix.yaml"))["profiles"][sys.argv[1]]["args"]))' "$1"; }
probe() {  # name profile
  local t0; t0=$(date +%s.%N)
  python3 -m buildscripts.probe --mode host --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,server,first-generation \
    --stage-timeout 480 --workdir "/tmp/wp-$1" --server-args "$(profile_args "$2")" --out "$out/$1.json" > "$out/$1.out" 2>&1
  echo "== $1: probe $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$out/$1.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    e = r.get("evidence", {}); w = e.get("warm") or {}
    print("RESULT", r["name"], r["status"], r.get("duration_s"), (r.get("reason") or "")[:300],
          {k: e.get(k) for k in ("http_up_s", "ready_s") if k in e},
          {k: w.get(k) for k in ("baked_files", "compiled_count", "compiler_processes", "verdict") if k in w} if w else "",
          (e.get("reference") or {}).get("verdict", ""))
PY
  cp /tmp/wp-$1/server-*.log "$out/$1-server.log" 2>/dev/null; true
}
phase=$1; shift
case $phase in
rerecord)  # the same starts again on the caches `cold` filled (the machine still warm): records again
  for p in "$@"; do
    caches "/tmp/pc-$p"
    PYTHONPATH=$here/recorder:$PYTHONPATH WARM_RECORD=$out/record-$p.jsonl probe "rerecord-$p" "$p"
    echo "== $p: $(grep -c . "$out/record-$p.jsonl" 2>/dev/null) recorded calls"
  done ;;
cold)
  for p in "$@"; do
    rm -rf "/tmp/pc-$p"; caches "/tmp/pc-$p"
    PYTHONPATH=$here/recorder:$PYTHONPATH WARM_RECORD=$out/record-$p.jsonl probe "cold-$p" "$p"
    (cd "/tmp/pc-$p" && find . -maxdepth 5 -type d | sort; du -sh ./* ) > "$out/cold-caches-$p.txt" 2>&1
    echo "== $p: $(grep -c . "$out/record-$p.jsonl" 2>/dev/null) recorded calls"
  done ;;
bake-warm)  # PROFILE...: bake them all into one cache root, then start each with nvcc hidden
  b=/tmp/baked; rm -rf "$b"; caches "$b"; t0=$(date +%s)
  # BAKE_PROFILES bakes other profiles than the ones started (a start with an unbaked profile is only recorded)
  CUDA_VISIBLE_DEVICES= python3 images/warm/bake.py "$here/manifest.json" --archs sm_90a \
    --profiles "${BAKE_PROFILES:-$(echo "$@" | tr ' ' ,)}" \
    --report "$b/warm.json" 2>&1 | tail -5
  echo "== bake $* for sm_90a, GPU hidden, $(nproc) cores: $(( $(date +%s) - t0 )) s; $(du -sh "$b" | cut -f1)"
  cp "$b/warm.json" "$out/bake-report.json"; (cd "$b" && find . -maxdepth 5 -type d | sort) > "$out/baked-tree.txt"
  hidden=""
  for d in /usr/local/cuda-[0-9]*.[0-9]*/bin /usr/local/cuda-[0-9]*.[0-9]*/nvvm; do mv "$d" "$d.hidden" && hidden="$hidden $d"; done
  trap 'for d in $hidden; do mv "$d.hidden" "$d"; done; tar -C /tmp/profiles-out -czf "${OUT:-/tmp}/profiles-$phase.tgz" "$phase"' EXIT
  for p in "$@"; do
    PATH=$(echo "$PATH" | tr : '\n' | grep -v cuda | paste -sd:) env -u CUDA_HOME -u CUDA_PATH \
      bash -c "echo \"== nvcc: \$(command -v nvcc || echo none), CUDA_HOME=\${CUDA_HOME:-unset}\"
               export SGLANG_IMAGES_WARM_REPORT=$b/warm.json PYTHONPATH=$here/recorder:\$PYTHONPATH \
                 WARM_RECORD=$out/record-baked-$p.jsonl; $(declare -f probe profile_args); out=$out; probe baked-$p $p"
  done ;;
esac
