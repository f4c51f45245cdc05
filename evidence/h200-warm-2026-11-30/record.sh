#!/bin/bash
# phase cold|warm. Runs on an H200 test machine with SGLang 0.5.16 staged at /tmp/gs/site (PYTHONPATH) on the
# machine's Python 3.12 and torch 2.11.0+cu130; `warm` ran with nvcc hidden (bin/ and nvvm/ of the CUDA 13.0
# toolkit renamed, CUDA_HOME unset, PATH cleaned). The probe is this repository's buildscripts/probe.
set -u
O=/tmp/warmout; mkdir -p $O; R=$(cd "$(dirname "$0")" && pwd); SITE=/tmp/gs/site; C=/tmp/warmc
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ARGS='["--attention-backend","triton","--sampling-backend","pytorch","--disable-cuda-graph","--max-total-tokens","65536","--context-length","4096","--max-running-requests","16"]'
caches() {  # root
  export TVM_FFI_CACHE_DIR=$1/tvm-ffi SGLANG_CACHE_DIR=$1/sglang TRITON_CACHE_DIR=$1/triton \
    FLASHINFER_WORKSPACE_BASE=$1/fi TORCHINDUCTOR_CACHE_DIR=$1/inductor SGLANG_DG_CACHE_DIR=$1/deep_gemm \
    CUDA_CACHE_PATH=$1/nv TORCH_EXTENSIONS_DIR=$1/torch_ext; mkdir -p $1; }
imp() {  # label n
  for i in $(seq $2); do python3 -c 'import time; t=time.time(); import sglang; a=time.time()-t; import sglang.srt.entrypoints.http_server; print("IMPORT '$1' sglang %.2f http_server %.2f" % (a, time.time()-t))'; done; }
probe() {  # name
  local t0=$(date +%s.%N)
  (cd $R && python3 -m probe --mode host --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,server,first-generation \
     --workdir /tmp/wp-$1 --server-args "$ARGS" --out $O/$1.json) > /tmp/wp-$1.out 2>&1
  grep -o '"name": "[a-z-]*", "status": "[a-z]*"' $O/$1.json | tr '\n' ' '; echo
  python3 - $O/$1.json <<'PY'
import json,sys
for r in json.load(open(sys.argv[1])):
    e=r.get("evidence",{}); print("RESULT", r["name"], r["status"], r.get("duration_s"), r.get("reason",""), {k:e.get(k) for k in ("http_up_s","ready_s","waited_s","jit_log_lines") if k in e}, (e.get("reference") or {}).get("verdict",""))
PY
  cp /tmp/wp-$1/server-*.log $O/$1-server.log 2>/dev/null
}
case $1 in
cold)
  echo "pyc files in site: $(find $SITE -name '*.pyc' | wc -l)"; nvcc --version | tail -1
  export PYTHONDONTWRITEBYTECODE=1; imp nopyc 2
  rm -rf $C; caches $C
  PYTHONPATH=$R/recorder:$PYTHONPATH WARM_RECORD=$O/jit-calls.jsonl probe cold
  (cd $C && find . -maxdepth 3 | sort; du -sh * ) > $O/cold-caches.txt 2>&1
  unset PYTHONDONTWRITEBYTECODE
  t0=$(date +%s); python3 -m compileall -q -j0 --invalidation-mode unchecked-hash $SITE >/dev/null 2>&1
  echo "compileall: $(( $(date +%s) - t0 )) s, pyc now $(find $SITE -name '*.pyc' | wc -l)"
  export PYTHONDONTWRITEBYTECODE=1; imp pyc 3 ;;
warm)
  export PYTHONDONTWRITEBYTECODE=1
  echo "nvcc: $(command -v nvcc || echo none) CUDA_HOME=${CUDA_HOME:-unset}"
  caches $C; probe warm-all-nonvcc
  rm -rf /tmp/warmt; mkdir -p /tmp/warmt; cp -a $C/tvm-ffi /tmp/warmt/; caches /tmp/warmt
  probe warm-tvm-only-nonvcc
  (cd /tmp/warmt && find . -maxdepth 2 | sort) > $O/warm-tvm-only-caches.txt
  tar -C $C -czf $O/tvm-cache-gpu.tgz tvm-ffi ;;
esac
