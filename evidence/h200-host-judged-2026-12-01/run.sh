#!/bin/bash
# `verify --host` on an H200 test machine, the host judging the GPU stages, as run for this evidence folder.
# There: the machine's Python 3.12 with torch 2.11.0+cu130 and the CUDA 13.0 toolkit; SGLang 0.5.16 and the
# packages it imports staged in SITE; the project's Python dependencies that machine lacks (docker,
# testcontainers, python-dotenv, pydantic and theirs) as wheels in WHEELS; no network (HF_HUB_OFFLINE=1),
# NVLink multicast off (NCCL_NVLS_ENABLE=0).
#   bash run.sh SITE WHEELS            from the project root; results in $OUT (default /tmp/evidence-out)
set -u
site=$1 wheels=$2
out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/deps "$wheels"/*.whl || exit 1
export PYTHONPATH=$site:/tmp/deps
nvidia-smi --query-gpu=index,name,uuid,compute_cap,driver_version --format=csv,noheader
t0=$(date +%s)
python3 -m buildscripts verify --host --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,server,first-generation \
  --stage-timeout 240 --run-id h200-host --cell-id h200-host --out "$out/host.json"
echo "== exit $? after $(( $(date +%s) - t0 ))s"
