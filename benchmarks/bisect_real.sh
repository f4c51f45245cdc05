#!/bin/sh
# The real bisection of benchmarks/bisect-real.md: the bad side made from the committed locks of one cell with ten
# real package moves (benchmarks/bisect_real_side.py, the lock step's resolver), then `bisect` over them, building
# each step for real on this machine's engine, up to the import stage. Run from the project root.
set -eu
CELL=sglang0.5.10-torch2.9.1-cu128-none-bookworm
OUT=benchmarks/bisect-real
PY=${PYTHON:-python}
rm -rf "$OUT/bad-lockfiles"
"$PY" benchmarks/bisect_real_side.py "$CELL" "$OUT/bad-lockfiles" \
    jinja2==2.11.3 tqdm==4.67.1 orjson==3.11.5 psutil==7.0.0 setproctitle==1.3.6 apache-tvm-ffi==0.1.14.post1 \
    cuda-pathfinder==1.3.0 nvidia-cudnn-frontend==1.20.0 pybase64==1.4.2
start=$(date +%s)
"$PY" -m buildscripts bisect "$CELL" --good lockfiles --bad "$OUT/bad-lockfiles" --stage import 2>&1 | tee "$OUT/run.log"
echo "wall: $(( $(date +%s) - start )) s" | tee -a "$OUT/run.log"
cp "runs/bisect-$CELL/bisect.md" "$OUT/bisect.md"
