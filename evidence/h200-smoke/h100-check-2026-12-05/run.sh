#!/bin/bash
# kernel-smoke checked on an H100 test machine (sm_90) before the H200 run, as run there (summary.md beside it).
# That machine: torch 2.11.0+cu130, Triton 3.6.0, the CUDA 13.0 toolkit, no network, at most 64 MiB brought a call.
# Brought beside this script (folder S):
#   sgl_kernel-0.4.5.tar.xz  sglang-kernel 0.4.5 from its PyPI wheel: its Python files, dist-info and its two
#                            common_ops libraries (sgl_kernel/sm90, sgl_kernel/sm100); flash_ops (1.1 GB), which
#                            `import sgl_kernel` does not load, left out to fit
#   wheels/                  flashinfer-python 0.6.14, sgl-deep-gemm 0.1.4.post1, apache-tvm-ffi 0.1.11, cuda-tile 1.7.0,
#                            tabulate 0.10.0 (the SGLang 0.5.16 lock's pins; installed without their other dependencies)
#   repo/                    this commit's buildscripts/probe, images/lean/prune_fatbins.py, evidence/h200-smoke
# The probe runs on its own (python -m buildscripts.probe --mode host): the verifier's dependencies were not there.
set -u; export PYTHONUNBUFFERED=1; O=${OUT:-/tmp/out}; S=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$O/console.txt") 2>&1
T0=$(date +%s); say() { echo "== $* (+$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
which nvcc cc gcc ninja
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/deps $S/wheels/*.whl 2>&1 | tail -3
rm -rf /tmp/site /tmp/gs; mkdir -p /tmp/site && tar -C /tmp/site -xJf $S/sgl_kernel-0.4.5.tar.xz
say "make-pruned-site"
VENV=/opt/torch/.venv OUT=$O bash $S/repo/evidence/h200-smoke/make-pruned-site.sh /tmp/site /tmp/gs/pruned-site; echo "exit $?"
say "late error"
PYTHONPATH=/tmp/deps /tmp/gs/pruned-python3 -c '
import torch, sgl_kernel
x = torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()
out = torch.full((64, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
torch.ops.sgl_kernel.silu_and_mul.default(out, x); print("silu_and_mul returned without an error")
try:
    torch.cuda.synchronize(); print("torch.cuda.synchronize() after it: no error")
    y = x * 2; torch.cuda.synchronize(); print("a torch op after it: no error")
except Exception as exc:
    print("raised:", type(exc).__name__, str(exc).splitlines()[0])
'
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
cd $S/repo
for v in site pruned; do
  say "probe with /tmp/gs/$v-python3"
  PYTHONPATH=/tmp/deps timeout $([ $v = site ] && echo 300 || echo 200) /tmp/gs/$v-python3 -m buildscripts.probe --mode host \
    --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,kernel-smoke --workdir /tmp/w-$v --stage-timeout 600 \
    --out $O/$v.json | cut -c1-1200
done
say done
