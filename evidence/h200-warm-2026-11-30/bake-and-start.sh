#!/bin/bash
# phase cold|bake|warm|control. Same machine and staging as record.sh; `warm` ran with nvcc hidden.
# The control run used an earlier form of this script that copied the baked caches to /tmp/b3 first.
set -u
O=/tmp/warmout2; mkdir -p $O; R=$(cd "$(dirname "$0")" && pwd); SITE=/tmp/gs/site; B=/tmp/baked
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
ARGS='["--attention-backend","triton","--sampling-backend","pytorch","--disable-cuda-graph","--max-total-tokens","65536","--context-length","4096","--max-running-requests","16"]'
caches() {  # root
  export TVM_FFI_CACHE_DIR=$1/tvm-ffi SGLANG_CACHE_DIR=$1/sglang TRITON_CACHE_DIR=$1/triton \
    FLASHINFER_WORKSPACE_BASE=$1/fi TORCHINDUCTOR_CACHE_DIR=$1/inductor SGLANG_DG_CACHE_DIR=$1/sglang/deep_gemm \
    CUDA_CACHE_PATH=$1/nv TORCH_EXTENSIONS_DIR=$1/torch_ext; mkdir -p $1; }
probe() {  # name
  (cd $R && python3 -m probe --mode host --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,server,first-generation \
     --workdir /tmp/wp-$1 --server-args "$ARGS" --out $O/$1.json) > $O/$1.out 2>&1
  python3 - $O/$1.json <<'PY'
import json,sys
for r in json.load(open(sys.argv[1])):
    e=r.get("evidence",{}); w=e.get("warm") or {}
    print("RESULT", r["name"], r["status"], r.get("duration_s"), r.get("reason",""), {k:e.get(k) for k in ("http_up_s","ready_s","waited_s") if k in e}, {k:w.get(k) for k in ("baked_files","compiled_count","compiler_processes")} if w else "", (e.get("reference") or {}).get("verdict",""))
PY
  cp /tmp/wp-$1/server-*.log $O/$1-server.log 2>/dev/null
}
case $1 in
bake)
  t0=$(date +%s); python3 -m compileall -q -j0 --invalidation-mode unchecked-hash $SITE >/dev/null 2>&1
  echo "compileall: $(( $(date +%s) - t0 )) s"
  rm -rf $B; caches $B
  t0=$(date +%s)
  CUDA_VISIBLE_DEVICES= python3 $R/warm/bake.py $R/warm/sglang-0.5.16.json --archs sm_90a --report $B/warm.json 2>&1 | tail -5
  echo "bake sm_90a with the GPU hidden: $(( $(date +%s) - t0 )) s"; python3 -c "import json; r=json.load(open('$B/warm.json')); print([ (b['module'][-60:], b['ok'], b['seconds']) for x in r['baked'] for b in x['built']])"
  (cd $B && find . -maxdepth 3 | sort) > $O/baked-tree.txt ;;
cold)
  echo "pyc files: $(find $SITE -name '*.pyc' | wc -l)"; rm -rf /tmp/cold; caches /tmp/cold; probe cold-reference ;;
warm)
  echo "nvcc: $(command -v nvcc || echo none) CUDA_HOME=${CUDA_HOME:-unset}"
  caches $B; export SGLANG_IMAGES_WARM_REPORT=$B/warm.json
  probe baked-nonvcc
  rm -rf $B/triton; probe baked-nonvcc-2 ;;
control)
  rm -rf /tmp/b3; cp -a $B /tmp/b3; rm -rf /tmp/b3/tvm-ffi/sgl_kernel_jit_clamp_position*; caches /tmp/b3
  sed -i "s#/tmp/b2#/tmp/b3#g" $B/warm.json; export SGLANG_IMAGES_WARM_REPORT=$B/warm.json
  probe control-one-module-removed ;;
esac
