#!/bin/bash
# `verify --host` as root on an H200 test machine, the code under test run as an identity of its own
# (verify/identity.py), as run for this evidence folder. There: Ubuntu 24.04, root, no network; the machine's
# torch 2.11.0+cu130 venv at /opt/torch/.venv and the CUDA 13.0 toolkit at /usr/local/cuda; SGLang 0.5.16 and
# the packages it imports staged (unpacked wheels) in /tmp/gs/site; the project's own dependencies as wheels in
# WHEELS. The verifier runs from an environment of its own (the system Python and the unpacked WHEELS), never
# from the one under test: that is named with --python, a wrapper that puts the staged SGLang on the torch
# venv's path.
#   bash run.sh WHEELS            from the project root; results in $OUT (default /tmp/evidence-out)
set -u
wheels=$1 out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1
unset PYTHONPATH
mkdir -p /tmp/vsite; for w in "$wheels"/*.whl; do /usr/bin/python3 -m zipfile -e "$w" /tmp/vsite; done
mkdir -p /tmp/envut; chmod 755 /tmp/envut
printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec /opt/torch/.venv/bin/python3 "$@"\n' \
  > /tmp/envut/python3
chmod 755 /tmp/envut/python3
verifier="import site, sys, runpy; site.addsitedir('/tmp/vsite'); sys.argv[0] = 'buildscripts'
runpy.run_module('buildscripts', run_name='__main__', alter_sys=True)"
/usr/bin/python3 -c "$verifier" verify --host --python /tmp/envut/python3 --archs sm_90a,sm_100a,sm_120a \
  --lane-cuda 13.0 --stage-timeout 300 --run-id h200-host-sandbox \
  --cell-id host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit --out "$out/results.json" 2>&1 | tee "$out/verify.log"
/usr/bin/python3 -c "import site; site.addsitedir('/tmp/vsite'); import os; from buildscripts.trust import keys
print(keys.signing_key(os.environ).public.pem.decode(), end='')" > "$out/verifier.pub"
ps -eo uid,args | awk '$1 >= 61184 && $1 < 65520' > "$out/left-behind.txt"   # the identity's range: empty
