#!/bin/bash
# Per-GPU mode on a machine with several GPUs: one probe (and one SGLang server) per GPU, side by
# side, pinned with CUDA_VISIBLE_DEVICES, sharing one kernel cache folder as servers on one host do.
#   bash pergpu.sh GPUS PROFILE STAGES CACHE_KEY [STAGE_TIMEOUT]      e.g. bash pergpu.sh 0,1 flashinfer ...
set -u
gpus=$1 profile=$2 stages=$3 key=$4 limit=${5:-400}
out=${OUT:-/tmp/probe-out}; mkdir -p "$out/pergpu"
c=/tmp/probe-cache/$key
export PYTHONUNBUFFERED=1 SGLANG_CACHE_DIR=$c/sglang TVM_FFI_CACHE_DIR=$c/tvm-ffi TRITON_CACHE_DIR=$c/triton \
  FLASHINFER_WORKSPACE_BASE=$c/flashinfer SGLANG_DG_CACHE_DIR=$c/deep_gemm TORCH_EXTENSIONS_DIR=$c/torch_ext \
  TORCHINDUCTOR_CACHE_DIR=$c/inductor CUDA_CACHE_PATH=$c/nv
args=$(python3 -c 'import json, sys, yaml
print(json.dumps(yaml.safe_load(open("matrix.yaml"))["profiles"][sys.argv[1]]["args"]))' "$profile")
nvidia-smi -L
t0=$(date +%s)
python3 -m buildscripts.probe.pergpu --gpus "$gpus" --out-dir "$out/pergpu" --workdir /tmp/probe-pergpu -- \
  --mode host --archs sm_90a --lane-cuda 13.0 --stages "$stages" --stage-timeout "$limit" --server-args "$args"
echo "== per-GPU ($gpus): exit $? after $(( $(date +%s) - t0 ))s"
