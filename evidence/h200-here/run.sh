#!/bin/bash
# Not yet run: `sglang-images here` and `verify --here` on an H200 test machine, from the wheel in a clean venv, on the
# host and inside an unprivileged LXC container (recipe `good` of evidence/h200-lxc-unprivileged/run.sh).
# Prepare here, from the repository root (the machine there has no network):
#   python -m build --wheel --outdir .gpu/wheels . && pip download --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .gpu/wheels .gpu/wheels/sglang_images-*.whl
#   and the LXC 5.0.2 debs with lxc-gpu.sh under .gpu/lxc (as evidence/h200-2026-12-04/run.sh describes).
# Then there, from the repository root, with .gpu/wheels and .gpu/lxc carried: bash evidence/h200-here/run.sh
set -u
R=$(pwd); O=${OUT:-/tmp/out}; mkdir -p $O
exec > >(tee $O/console.txt) 2>&1
PY=/opt/torch/.venv/bin/python3
echo "== machine"; nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader; uname -m; $PY --version
echo "== install the wheel into a clean venv /opt/cv"
t0=$(date +%s.%N)
$PY -m venv /opt/cv 2>&1 | tail -2 || true
if [ ! -x /opt/cv/bin/pip ]; then rm -rf /opt/cv; $PY -m venv --without-pip /opt/cv; PIP="$PY -m pip --python /opt/cv/bin/python3"; else PIP=/opt/cv/bin/pip; fi
$PIP install -q --no-index --find-links $R/.gpu/wheels sglang-images 2>&1 | tail -3
t1=$(date +%s.%N); echo "install s: $(echo "$t1 - $t0" | bc)"
/opt/cv/bin/python3 -c "import buildscripts,sys; print(buildscripts.__file__)"
/opt/cv/bin/pip list 2>/dev/null | wc -l
cp $R/evidence/h200-2026-12-04/runs/h200-bydigest-2026-12-04/results.json /opt/cv/report.json; chmod -R o+rX /opt/cv
mkdir -p /tmp/empty && cd /tmp/empty
echo "== here, no source (host)"; /usr/bin/time -f "wall %e s" /opt/cv/bin/sglang-images here; echo "exit $?"
echo "== here --report (host)"; /usr/bin/time -f "wall %e s" /opt/cv/bin/sglang-images here --report /opt/cv/report.json --json > $O/here-host.json; echo "exit $?"
for i in 1 2 3; do /usr/bin/time -f "wall %e s" /opt/cv/bin/sglang-images here --report /opt/cv/report.json > /dev/null 2>/tmp/t.txt; tail -1 /tmp/t.txt; done
/opt/cv/bin/sglang-images here --report /opt/cv/report.json; echo "exit $?"
echo "== verify --here argument mapping (host; no ladder: --stages facts)"
cd $R
echo "== unprivileged LXC"
mkdir -p /tmp/gs/site
bash .gpu/lxc/lxc-gpu.sh install > $O/lxc-install.txt 2>&1; lxc-start --version
VENV=/opt/torch/.venv OUT=$O/lxc bash evidence/h200-lxc-unprivileged/run.sh create uhere good 2>&1 | tail -5
sleep 2; lxc-info -n uhere | head -3
lxc-attach -n uhere -- /bin/sh -c 'cd /tmp && cat /proc/self/uid_map && ls -l /dev/nvidia* && df -h /dev/shm | tail -1'
echo "== here inside the CT"
lxc-attach -n uhere -- /bin/sh -c 'cd /tmp && HOME=/root /usr/bin/time -f "wall %e s" /opt/cv/bin/sglang-images here --report /opt/cv/report.json; echo "exit $?"'
lxc-attach -n uhere -- /bin/sh -c 'cd /tmp && HOME=/root /opt/cv/bin/sglang-images here --report /opt/cv/report.json --json' > $O/here-ct.json; echo "exit $?"
echo "== verify --here inside the CT (facts stage only: no SGLang staged here)"
lxc-attach -n uhere -- /bin/sh -c 'cd /tmp && HOME=/root /opt/cv/bin/sglang-images verify --here --python /opt/torch/.venv/bin/python3 --stages facts --out /tmp/vh.json 2>&1 | tail -8; echo "exit $?"'
OUT=$O/lxc bash evidence/h200-lxc-unprivileged/run.sh destroy uhere > /dev/null 2>&1
echo done
