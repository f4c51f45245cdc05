#!/bin/bash
# The kernel-smoke hole (issue 50), as a test input: a copy of a staged SGLang site whose sgl_kernel carries no
# code an H200 (sm_90) can run, made with the project's own pruner (images/lean/prune_fatbins.py, its cubins cut to
# sm_100a and sm_120a). The kernel-smoke stage must fail on it at sgl_kernel, naming the op, the arch and the
# driver's words; before issue 50 every GPU stage passed on such a site.
#
# On an H200 test machine, from the repository root, as root, with SGLang 0.5.16's site staged at /tmp/gs/site and
# the verifier's own Python dependencies importable by python3 (evidence/h200-2026-12-04/run.sh, phase `stage`,
# unpacks them into /tmp/vsite; its `verifier_t` runs the verifier that way):
#   bash evidence/h200-smoke/make-pruned-site.sh
#       -> /tmp/gs/pruned-site (SITE hard-linked, its sgl_kernel a real copy, pruned), the wrappers
#          /tmp/gs/pruned-python3 (the torch venv's Python with the pruned site first on its path) and
#          /tmp/gs/site-python3 (the same with the staged site, the control), and $OUT/prune-report.json
#   python3 -m buildscripts verify --host --python /tmp/gs/pruned-python3 --archs sm_90a --lane-cuda 13.0 \
#       --stages gpu-visible,kernel-smoke --run-id h200-smoke-pruned
#       expected: gpu-visible passed; kernel-smoke FAILED, class kernel-image-missing, its reason beginning
#       "sgl_kernel: sgl_kernel op silu_and_mul failed on sm_90 (NVIDIA H200) at its launch or the wait right after
#       it: AcceleratorError: CUDA error: no kernel image is available for execution on the device"; the hint names
#       sgl_kernel, silu_and_mul and sm_90; the other parts (torch-extension, flashinfer, deep_gemm, triton) pass.
#   python3 -m buildscripts verify --host --python /tmp/gs/site-python3 --archs sm_90a --lane-cuda 13.0 \
#       --stages gpu-visible,kernel-smoke --run-id h200-smoke-site
#       expected: kernel-smoke passed, the sgl_kernel part with ops_library .../sgl_kernel/sm90/common_ops.abi3.so.
# Checked beforehand on an H100 test machine (sm_90) with sglang-kernel 0.4.5: summary.md, h100-check-2026-12-05/.
#
#   bash evidence/h200-smoke/make-pruned-site.sh [SITE [PRUNED]]   (defaults /tmp/gs/site, /tmp/gs/pruned-site)
# VENV (default /opt/torch/.venv) is the environment whose Python runs the site; OUT (default /tmp/evidence-out)
# gets the pruner's report.
set -eu
SITE=${1:-/tmp/gs/site}; PRUNED=${2:-/tmp/gs/pruned-site}; VENV=${VENV:-/opt/torch/.venv}
OUT=${OUT:-/tmp/evidence-out}; REPO=$(cd "$(dirname "$0")/../.." && pwd)
TARGETS=sm_100a,sm_120a   # not sm_90: an H200 runs none of what is left
say() { echo "== $*"; }
[ -d "$SITE/sgl_kernel" ] || { echo "no sgl_kernel under $SITE: stage SGLang's site first" >&2; exit 2; }
[ -x "$VENV/bin/python3" ] || { echo "no Python at $VENV/bin/python3: set VENV to the torch environment" >&2; exit 2; }
mkdir -p "$OUT"

wrapper() {  # PATH SITE: the venv's Python with SITE first on its path (what `verify --python` is given)
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s/bin/python3 "$@"\n' "$2" "$VENV" > "$1"
  chmod 755 "$1"; }

say "copy $SITE -> $PRUNED (hard links; sgl_kernel copied, so the rewrite cannot reach the staged site)"
rm -rf "$PRUNED"; mkdir -p "$(dirname "$PRUNED")"
cp -al "$SITE" "$PRUNED"
rm -rf "$PRUNED/sgl_kernel"
cp -a "$SITE/sgl_kernel" "$PRUNED/sgl_kernel"
wrapper "$(dirname "$PRUNED")/pruned-python3" "$PRUNED"
wrapper "$(dirname "$PRUNED")/site-python3" "$SITE"

say "prune $PRUNED/sgl_kernel to $TARGETS"
# The pruner's load check imports torch with the Python that runs it: the environment under test's.
"$(dirname "$PRUNED")/pruned-python3" "$REPO/images/lean/prune_fatbins.py" "$PRUNED/sgl_kernel" --archs "$TARGETS" \
  --report "$OUT/prune-report.json"

say "check: no library of the pruned sgl_kernel has code sm_90 runs, and the staged one still has"
python3 - "$REPO/buildscripts/probe" "$SITE/sgl_kernel" "$PRUNED/sgl_kernel" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import fatbin  # the probe's own fatbin reader
def entries(path):
    try:
        return fatbin.read_file(path)
    except (fatbin.NotElf, OSError):
        return []
def runs_sm90(root):
    return sorted(p for p in fatbin.shared_objects(root) if any(fatbin.runs_on(e, "sm_90") for e in entries(p)))
before, after = runs_sm90(sys.argv[2]), runs_sm90(sys.argv[3])
print(f"sm_90 code: {len(before)} libraries of the staged sgl_kernel, {len(after)} of the pruned one")
if not before or after:
    sys.exit(f"not the test input wanted: staged {before}, pruned still {after}")
EOF
say "ready: verify with --python $(dirname "$PRUNED")/pruned-python3 (and the control, $(dirname "$PRUNED")/site-python3)"
