#!/bin/bash
# The verifier's host mode on an H200 test machine, as run for this evidence folder.
#   bash run.sh NAME PROFILE STAGES CACHE_KEY [STAGE_TIMEOUT]
# Runs `python3 -m buildscripts.probe --mode host` in the current Python environment (SGLang 0.5.16
# importable), with the server flags of matrix.yaml's profile PROFILE, and writes $OUT/NAME.json.
# Every kernel cache (SGLang, tvm-ffi, Triton, FlashInfer, DeepGEMM, torch extensions, inductor)
# lives under /tmp/probe-cache/CACHE_KEY: a new key starts cold, a reused key starts warm.
set -u
name=$1 profile=$2 stages=$3 key=$4 limit=${5:-400}
out=${OUT:-/tmp/probe-out}; mkdir -p "$out"
c=/tmp/probe-cache/$key
export PYTHONUNBUFFERED=1 SGLANG_CACHE_DIR=$c/sglang TVM_FFI_CACHE_DIR=$c/tvm-ffi TRITON_CACHE_DIR=$c/triton \
  FLASHINFER_WORKSPACE_BASE=$c/flashinfer SGLANG_DG_CACHE_DIR=$c/deep_gemm TORCH_EXTENSIONS_DIR=$c/torch_ext \
  TORCHINDUCTOR_CACHE_DIR=$c/inductor CUDA_CACHE_PATH=$c/nv
profile_json() { python3 -c 'import json, sys, yaml
p = yaml.safe_load(open("matrix.yaml"))["profiles"][sys.argv[1]]
print(json.dumps(p.get(sys.argv[2], {} if sys.argv[2] == "env" else [])))' "$profile" "$1"; }
echo "== $name: profile $profile, stages $stages, caches $c ($(du -sh "$c" 2>/dev/null | cut -f1 || echo empty))"
t0=$(date +%s)
python3 -m buildscripts.probe --mode host --archs sm_90a --lane-cuda 13.0 --stages "$stages" \
  --workdir "/tmp/probe-$name" --stage-timeout "$limit" --server-args "$(profile_json args)" \
  --server-env "$(profile_json env)" --out "$out/$name.json" | cut -c1-600; rc=${PIPESTATUS[0]}
echo "== $name: exit $rc after $(( $(date +%s) - t0 ))s"
# keep the server logs (not the model or build trees) for the evidence
tar -C /tmp -czf "$out/$name-logs.tar.gz" --exclude='tiny-llama' --exclude='torch_ext' --exclude='*.so' --exclude='*.o' --exclude='*.cubin' "probe-$name" 2>/dev/null
