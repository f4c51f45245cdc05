#!/bin/bash
# `sglang-images here` and `verify --here` on an H200 test machine, from the wheel in a clean environment (no
# checkout on its path): on the host, and inside an unprivileged LXC container (recipe `good` of
# evidence/h200-lxc-unprivileged/run.sh), where `verify --here` runs the whole GPU ladder in place.
# That machine has no network and takes at most 64 MiB a call, so it runs in two calls, the second at once (files
# there survive only while the machine stays warm), from the repository root:
#   bash evidence/h100-here-2026-12-05/run.sh carry    with .gpu/sgA, .gpu/np and .gpu/lxc: the first part of SGLang 0.5.16's
#                                           staged site, numpy's wheel and the LXC 5.0.2 debs, kept under /tmp/h
#   bash evidence/h100-here-2026-12-05/run.sh run      with .gpu/sgB and .gpu/wheels: the rest of the site (checked against
#                                           its sha256); the wheel of this commit with its dependencies and its
#                                           `build` extra's (`python -m build --wheel`, then `pip download
#                                           --only-binary=:all: --python-version 3.12 --platform
#                                           manylinux_2_28_x86_64 ... -d .gpu/wheels 'WHEEL[build]'`; numpy moved
#                                           to .gpu/np for the first call: both do not fit in one)
# What it writes for the record goes under $OUT: console.txt, here-*.json, the container's config and what it saw,
# the run folder of `verify --here` (uhere-2026-12-05.tar.gz) and the public half of the key that sealed it.
set -u
R=$(pwd); O=${OUT:-/tmp/out}; H=/tmp/h; mkdir -p "$O" "$H"
exec > >(tee -a "$O/console.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
T0=$(date +%s); say() { echo "== $* (+$(( $(date +%s) - T0 ))s)"; }
PY=/opt/torch/.venv/bin/python3; CV=/opt/cv; CT=uhere; RUN=uhere-2026-12-05
need() { [ -e "$1" ] || { say "MISSING $1: $2"; exit 3; }; }

carry() {
  need .gpu/sgA/site.tar.xz.part-00 "carry .gpu/sgA"; need .gpu/lxc/lxc-gpu.sh "carry .gpu/lxc"; need .gpu/np "carry .gpu/np"
  mkdir -p $H/parts $H/lxc $H/np && cp .gpu/sgA/* $H/parts/ && cp .gpu/lxc/* $H/lxc/ && cp .gpu/np/* $H/np/
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader; uname -srm
  $PY --version; say "carry done"; }

stage() {
  need $H/parts/site.tar.xz.part-00 "phase carry first"; need .gpu/sgB/site.tar.xz.sha256 "carry .gpu/sgB"
  if [ ! -f /tmp/gs/site/.ok ]; then
    got=$(cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat .gpu/sgB/site.tar.xz.sha256)" ] || { say "SGLang parts: checksum mismatch"; exit 4; }
    mkdir -p /tmp/gs && cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | /usr/bin/python3 -c "
import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/gs')" && touch /tmp/gs/site/.ok
  fi
  say "staged: $(du -sh /tmp/gs/site | cut -f1) SGLang site"; }

install() {  # the user's way: a fresh environment, the wheel and its dependencies, nothing of this checkout
  rm -rf $CV; local t0; t0=$(date +%s)
  $PY -m venv --without-pip $CV && $PY -m pip --python $CV/bin/python3 install -q --no-index \
    --find-links "$R/.gpu/wheels" --find-links $H/np sglang-images numpy safetensors 2>&1 | tail -3
  say "installed in $(( $(date +%s) - t0 )) s: $($PY -m pip --python $CV/bin/python3 list 2>/dev/null | tail -n +3 | wc -l) distributions"
  (cd / && $CV/bin/python3 -c "import buildscripts; print('imports from', buildscripts.__file__)")
  cp "$R/evidence/h200-2026-12-04/runs/h200-bydigest-2026-12-04/results.json" $CV/report.json
  cp "$R/evidence/keys/h200-bydigest-2026-12-04.pub" $CV/report.pub; chmod -R o+rX $CV; }

here_host() {
  mkdir -p /tmp/empty && cd /tmp/empty || exit 5
  say "here, no source (host)"; $CV/bin/sglang-images here; echo "exit $?"
  say "here --report (host)"
  /usr/bin/time -f "wall %e s" $CV/bin/sglang-images here --report $CV/report.json --trust-key $CV/report.pub; echo "exit $?"
  $CV/bin/sglang-images here --report $CV/report.json --trust-key $CV/report.pub --json > "$O/here-host.json" 2>/dev/null
  echo "exit $?"; cd "$R" || exit 5; }

# A login shell inside (its profile puts the staged site on PYTHONPATH for SGLang), minus that path for our tool.
in_ct() { lxc-attach -n $CT -- /bin/sh -lc "cd /tmp && unset PYTHONPATH && HOME=/root $*"; }

ct() {
  command -v lxc-start >/dev/null || bash $H/lxc/lxc-gpu.sh install > "$O/lxc-install.txt" 2>&1
  say "LXC $(lxc-start --version)"
  VENV=/opt/torch/.venv OUT=$O bash evidence/h200-lxc-unprivileged/run.sh destroy $CT
  VENV=/opt/torch/.venv OUT=$O bash evidence/h200-lxc-unprivileged/run.sh create $CT good | tail -4
  # The environment under test inside: the machine's torch venv with the staged SGLang on its path.
  local envut=/tmp/lxc-$CT/rootfs/tmp/envut; mkdir -p $envut
  printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec /opt/torch/.venv/bin/python3 "$@"\n' > $envut/python3
  chmod 755 $envut/python3; chown -R 100000:100000 $envut
  say "here inside the container"
  in_ct "/usr/bin/time -f 'wall %e s' $CV/bin/sglang-images here --report $CV/report.json --trust-key $CV/report.pub"
  echo "exit $?"
  in_ct "$CV/bin/sglang-images here --report $CV/report.json --trust-key $CV/report.pub --json 2>/dev/null" > "$O/here-ct.json"
  echo "exit $?"
  say "verify --here inside the container: the whole ladder in place"
  in_ct "mkdir -p /tmp/vh && cd /tmp/vh && timeout 470 $CV/bin/sglang-images verify --here --python /tmp/envut/python3 \
    --archs sm_90a,sm_100a,sm_120a --lane-cuda 13.0 --stage-timeout 300 --run-id $RUN --out /tmp/vh/runs/$RUN/results.json" \
    2>&1 | tee "$O/verify-here.txt" | cut -c1-300
  say "verify --here: exit ${PIPESTATUS[0]}"
  local vh=/tmp/lxc-$CT/rootfs/tmp/vh
  [ -d $vh/runs/$RUN ] && tar -C $vh/runs -czf "$O/$RUN.tar.gz" $RUN
  # The public half of the key the container's verifier made on first use (in its root's folder).
  $CV/bin/python3 -c "import sys; from cryptography.hazmat.primitives import serialization as s
k = s.load_pem_private_key(open(sys.argv[1], 'rb').read(), None)
sys.stdout.write(k.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo).decode())" \
    /tmp/lxc-$CT/rootfs/root/.config/sglang-images/verifier-key.pem > "$O/$RUN.pub" && cp "$O/$RUN.pub" $vh/key.pub
  chmod o+r $vh/key.pub
  say "here on the record verify --here just wrote, inside the container, trusting that key"
  in_ct "$CV/bin/sglang-images here --report /tmp/vh/runs/$RUN/results.json --trust-key /tmp/vh/key.pub"; echo "exit $?"
  VENV=/opt/torch/.venv OUT=$O bash evidence/h200-lxc-unprivileged/run.sh destroy $CT; }

smoke() {  # issue 50's test input: sgl_kernel pruned to sm_100a,sm_120a must fail kernel-smoke on sm_90 by name
  OUT=$O/smoke bash evidence/h200-smoke/make-pruned-site.sh > "$O/make-pruned-site.txt" 2>&1; say "pruned: exit $?"
  tail -3 "$O/make-pruned-site.txt"
  mkdir -p /var/tmp/vs && cd /var/tmp/vs || exit 5
  timeout 240 $CV/bin/sglang-images verify --host --python /tmp/gs/pruned-python3 --archs sm_90a --lane-cuda 13.0 \
    --stages gpu-visible,kernel-smoke --stage-timeout 200 --run-id h100-smoke-pruned 2>&1 | tee "$O/verify-pruned.txt" | cut -c1-400
  say "verify pruned: exit ${PIPESTATUS[0]}"
  rm -rf runs/h100-smoke-pruned/host/work; tar -C runs -czf "$O/h100-smoke-pruned.tar.gz" h100-smoke-pruned
  cd "$R" || exit 5; }

case "${1:-}" in
carry) carry ;;
run) stage; install; here_host; ct; say done ;;
smoke) stage; install; smoke; say done ;;
*) sed -n 2,16p "$0"; exit 2 ;;
esac
