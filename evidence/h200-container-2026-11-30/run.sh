#!/bin/bash
# The verifier's container path on an H200 test machine, as run for this evidence folder.
# There: a Docker engine (Debian's 26.1) started with CDI on and a CDI spec for the GPU, as
# `nvidia-ctk cdi generate` writes on a user's runner; no bridge network (no iptables there), so the
# verifier gives its containers the host network; the project's Python dependencies on PYTHONPATH.
# The images are offline (HF_HUB_OFFLINE=1: nothing outside that machine can be reached) and keep
# NVLink multicast off (NCCL_NVLS_ENABLE=0), as that machine needs.
#   bash run.sh images SITE          BASE image from this machine's root + SITE, then make_images.py
#   bash run.sh verify NAME IMAGE PROFILE [STAGES]   `python -m buildscripts verify IMAGE` -> $OUT/NAME.json
#   bash run.sh host NAME PROFILE STAGES             the same ladder in host mode, for comparison
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
case "$1" in
images)
  site=$2; t0=$(date +%s)
  tar -C / --one-file-system -cf - --exclude=./proc --exclude=./sys --exclude=./dev --exclude=./run \
      --exclude=./tmp --exclude=./var/tmp --exclude=./root --exclude=./usr/local/nvidia --exclude=./home \
      --exclude=./work --exclude=./out . "${site#/}" 2>/dev/null \
    | docker import --change "ENV PATH=$(dirname "$(command -v python3)"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV PYTHONPATH=$site" --change "ENV HF_HUB_OFFLINE=1" --change "ENV NCCL_NVLS_ENABLE=0" \
        - h200-base >/dev/null
  echo "h200-base: $(docker image inspect -f '{{.Size}}' h200-base) bytes in $(( $(date +%s) - t0 ))s"
  python3 "$here/make_images.py" h200-base "$site" ;;
verify)
  name=$2 image=$3 profile=$4 stages=${5:-}
  t0=$(date +%s)
  python3 -m buildscripts verify "$image" --profile "$profile" --run-id "$name" --out "$out/$name.json" \
    ${stages:+--stages "$stages"} 2>&1 | cut -c1-400
  echo "== $name: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 ))s" ;;
host)
  name=$2 profile=$3 stages=$4
  t0=$(date +%s)
  python3 -m buildscripts verify --host --archs sm_90a --lane-cuda 13.0 --profile "$profile" --stages "$stages" \
    --cell-id "$name" --run-id "$name" --out "$out/$name.json" 2>&1 | cut -c1-400
  echo "== $name: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 ))s" ;;
esac
