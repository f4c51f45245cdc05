#!/bin/bash
# Host mode on an H200 test machine, as run for this folder: the NCCL all-reduce stage and the tp profile at
# one GPU, then the hybrid profile (the seed's Mamba flags on the tiny NemotronH). There: Python 3.12 with
# torch 2.11.0+cu130 and the CUDA 13.0 toolkit; SGLang 0.5.16 and the packages it imports staged in SITE;
# the project's Python dependencies that machine lacks as wheels in WHEELS; no network; NVLink multicast off.
#   bash run.sh SITE WHEELS     from the project root; results in $OUT (default /tmp/evidence-out)
set -u
site=$1 wheels=$2; out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/deps "$wheels"/*.whl || exit 1
export PYTHONPATH=$site:/tmp/deps
run() { local name=$1; shift
  python3 -m buildscripts verify --host --archs sm_90a --lane-cuda 13.0 --cell-id sglang0.5.16-torch2.11.0-cu130-pip-bookworm \
    --run-id "h200-$name" --out "$out/$name.json" "$@" > "$out/$name.log" 2>&1; echo "== $name exit $?"; }
run allreduce --stages gpu-visible,nccl-allreduce
run tp1 --profile tp --stages gpu-visible,nccl-allreduce,server,first-generation --stage-timeout 300
run hybrid --profile hybrid --stages gpu-visible,server,first-generation --stage-timeout 420
run full --stage-timeout 300
