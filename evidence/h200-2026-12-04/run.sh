#!/bin/bash
# Verify again on an H200 test machine with one frozen commit of the project: host mode, an unprivileged LXC
# container in place, and an image by digest through a Docker engine with CDI. Runs there, from the repository
# root, as root, in phases; each step brings what its phases need under .gpu/ (ignored by git; how it was made:
# summary.md), since that machine has no network and takes at most 64 MiB at a time:
#   bash evidence/h200-2026-12-04/run.sh PHASE...
#     carry1    keep the first part of the staged SGLang (.gpu/sgA) and the LXC debs (.gpu/lxc); record the machine
#     stage     the rest of SGLang (.gpu/sgB): checked, unpacked into /tmp/gs/site; the project's wheels
#               (.gpu/vwheels) unpacked into /tmp/vsite, the verifier's own environment; .gpu/extra2 kept
#     host      `verify --host`, run id h200-host-2026-12-04
#     lxc       LXC 5.0.2 installed; unprivileged container u-good made by evidence/h200-lxc-unprivileged/run.sh
#               (its `good` recipe); preflight; `verify --lxc-name u-good`, run id u-good-2026-12-04
#     push      a registry on 127.0.0.1:5000 (.gpu/extra2: Debian's docker-registry and zstd; .gpu/extra: skopeo and
#               its libraries; unpacked into /tmp/h200/extra, never into /), an image made from this
#               machine's root (push_root.py: NOT the cell's build) pushed once; the engine started (.gpu/engine)
#     ldcache-hook  the CDI spec engine.sh wrote gets a startContainer hook running the image's /sbin/ldconfig
#               (what the update-ldcache hook of `nvidia-ctk cdi generate` does; without it Triton finds no
#               libcuda.so.1 and the server dies: logs/bydigest-first-try/)
#     bydigest  `verify --pull 127.0.0.1:5000/sglang-staging@sha256:…` under the pip cell's id,
#               run id h200-bydigest-2026-12-04
# As run: carry1 [.gpu/sgA .gpu/lxc]; stage host [.gpu/sgB .gpu/vwheels .gpu/project .gpu/extra2]; lxc
# [.gpu/project]; then on a fresh machine carry1; stage; push ldcache-hook bydigest [.gpu/engine .gpu/extra
# .gpu/project]. .gpu/project must come with every step: an ignored folder not brought along was gone there.
# The verifier runs from the frozen copy .gpu/project (git archive of one commit), on the system Python with the
# unpacked wheels, never from the environment under test (the machine's torch venv with SGLang staged).
# Results under $OUT: logs.tar.gz (every short log so far) and RUN_ID.tar.gz (the run folder as the verifier
# wrote it: results.json and the probe's logs) for each run made in this call.
set -u
REPO=$(pwd); P=$REPO/.gpu/project; H=/tmp/h200; LOGS=$H/logs; HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/evidence-out}; mkdir -p "$OUT" "$LOGS"
T0=$(date +%s); CALL_S=${CALL_S:-590}   # the call's limit: no phase starts what cannot end inside it
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1
unset PYTHONPATH
VENV=/opt/torch/.venv
REF_FILE=$H/bydigest.ref
CELL_POOL=sglang0.5.16-torch2.11.0-cu130-pip-bookworm
MADE=()
left() { echo $(( T0 + CALL_S - $(date +%s) )); }
say() { echo "== $* (+$(( $(date +%s) - T0 ))s)" | tee -a "$LOGS/calls.log"; }

# The verifier: the system Python, the unpacked wheels first on its path, the frozen project as the package.
V="import site, sys, runpy
site.addsitedir('/tmp/vsite'); sys.path.remove('/tmp/vsite'); sys.path.insert(0, '/tmp/vsite')
sys.argv[0] = 'buildscripts'; runpy.run_module('buildscripts', run_name='__main__', alter_sys=True)"
verifier_t() { local t=$1; shift; (cd "$P" && timeout "$t" /usr/bin/python3 -c "$V" "$@"); }   # SECONDS ARGS...
pubkey() {  # the public half of this machine's verifier key (made on first use in root's folder)
  (cd "$P" && /usr/bin/python3 -c "import site, sys; site.addsitedir('/tmp/vsite'); sys.path.insert(0, '/tmp/vsite')
import os; from buildscripts.trust import keys
print(keys.signing_key(os.environ).public.pem.decode(), end='')") > "$LOGS/verifier-$1.pub" 2>&1
  sha256sum "$LOGS/verifier-$1.pub" | tee -a "$LOGS/calls.log"; }
pack() {
  tar -C "$H" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
  local r; for r in "${MADE[@]}"; do [ -d "$P/runs/$r" ] && tar -C "$P/runs" -czf "$OUT/$r.tar.gz" "$r"; done; true; }
trap pack EXIT
need() { [ -e "$1" ] || { say "MISSING $1: $2 (a fresh machine? run the earlier phases again)"; exit 3; }; }

carry1() {
  need .gpu/sgA/site.tar.xz.part-00 "carry .gpu/sgA"; need .gpu/lxc/lxc-gpu.sh "carry .gpu/lxc"
  mkdir -p $H/parts $H/lxcdebs && cp .gpu/sgA/* $H/parts/ && cp .gpu/lxc/* $H/lxcdebs/
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader > "$LOGS/gpu.txt"
  { nvidia-smi; ls -l /dev/nvidia*; id; echo "PATH=$PATH"; echo "CUDA_HOME=${CUDA_HOME:-}"; uname -r
    grep PRETTY /etc/os-release; nproc; free -g | head -2; df -h / /tmp | uniq
    /usr/bin/python3 --version; command -v python3; python3 -c 'import torch; print("torch", torch.__version__)'
    nvcc --version | tail -2; command -v zstd xz skopeo docker lxc-start; } > "$LOGS/env.txt" 2>&1
  cat "$LOGS/gpu.txt"; say "carry1 done"; }

stage() {
  need $H/parts/site.tar.xz.part-00 "phase carry1 first"; need .gpu/sgB/site.tar.xz.part-01 "carry .gpu/sgB"
  need "$P/buildscripts/__main__.py" "carry .gpu/project"; need .gpu/vwheels "carry .gpu/vwheels"
  if [ ! -f /tmp/gs/site/.ok ]; then
    got=$(cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat .gpu/sgB/site.tar.xz.sha256)" ] || { say "SGLang parts: checksum mismatch"; exit 4; }
    mkdir -p /tmp/gs && cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | /usr/bin/python3 -c "
import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/gs')" && touch /tmp/gs/site/.ok
  fi
  [ -d .gpu/extra2 ] && mkdir -p $H/extradebs && cp .gpu/extra2/*.deb $H/extradebs/   # for phase push
  rm -rf /tmp/vsite && mkdir -p /tmp/vsite && for w in .gpu/vwheels/*.whl; do /usr/bin/python3 -m zipfile -e "$w" /tmp/vsite; done
  ls .gpu/vwheels > "$LOGS/vwheels.txt"; cat "$P/.commit" 2>/dev/null | tee "$LOGS/commit.txt"
  mkdir -p /tmp/envut && chmod 755 /tmp/envut   # the environment under test: the torch venv + staged SGLang
  printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec %s/bin/python3 "$@"\n' "$VENV" > /tmp/envut/python3
  chmod 755 /tmp/envut/python3; say "stage done: $(du -sh /tmp/gs/site | cut -f1) SGLang, $(ls .gpu/vwheels | wc -l) wheels"; }

host() {
  need /tmp/gs/site/.ok "phase stage first"; local run=h200-host-2026-12-04; MADE+=("$run")
  say "host: verify --host"
  verifier_t $(( $(left) - 15 )) verify --host --python /tmp/envut/python3 --archs sm_90a,sm_100a,sm_120a --lane-cuda 13.0 --stage-timeout 300 \
    --run-id $run --cell-id host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit 2>&1 | tee "$LOGS/host-verify.log" | cut -c1-300
  say "host: verify exit ${PIPESTATUS[0]}"
  ps -eo uid,args | awk '$1 >= 61184 && $1 < 65520' > "$LOGS/host-left-behind.txt"   # the identity's range: empty
  pubkey host; }

lxc() {
  need /tmp/gs/site/.ok "phase stage first"; need $H/lxcdebs/lxc-gpu.sh "phase carry1 first"
  local run=u-good-2026-12-04 recipe=$P/evidence/h200-lxc-unprivileged/run.sh; MADE+=("$run")
  [ -f "$recipe" ] || recipe=$REPO/evidence/h200-lxc-unprivileged/run.sh
  command -v lxc-start >/dev/null || bash $H/lxcdebs/lxc-gpu.sh install > "$LOGS/lxc-install.txt" 2>&1
  say "lxc: $(lxc-start --version) from $recipe"
  VENV=$VENV OUT=$LOGS bash "$recipe" destroy u-good; VENV=$VENV OUT=$LOGS bash "$recipe" create u-good good | tail -3
  verifier_t 120 preflight --lxc-name u-good --cuda 13.0 > "$LOGS/preflight-u-good.txt" 2>&1
  say "lxc: preflight exit $?"
  verifier_t $(( $(left) - 15 )) verify --lxc-name u-good --python $VENV/bin/python3 --run-id $run --lane-cuda 13.0 2>&1 \
    | tee "$LOGS/verify-u-good.txt" | cut -c1-300
  say "lxc: verify exit ${PIPESTATUS[0]}"
  VENV=$VENV OUT=$LOGS bash "$recipe" destroy u-good; pubkey lxc; }

push() {
  need .gpu/extra/skopeo_1.9.3+ds1-1+b10_amd64.deb "carry .gpu/extra"; need .gpu/engine/engine.sh "carry .gpu/engine"
  need /tmp/gs/site/.ok "phase stage first"
  [ "$(left)" -gt 150 ] || { say "push: SKIPPED, $(left) s left in this call"; return; }
  need $H/extradebs "phase stage with .gpu/extra2 carried first"
  local x=$H/extra lib; mkdir -p $x $H/bin; for f in .gpu/extra/*.deb $H/extradebs/*.deb; do dpkg -x "$f" $x; done   # never into /
  lib=$x/usr/lib/x86_64-linux-gnu:$x/lib/x86_64-linux-gnu
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/skopeo "$@"\n' "$lib" $x > /usr/local/bin/skopeo
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/zstd "$@"\n' "$lib" $x > $H/bin/zstd
  chmod 755 /usr/local/bin/skopeo $H/bin/zstd; mkdir -p /etc/containers
  [ -f /etc/containers/policy.json ] || cp $x/etc/containers/policy.json /etc/containers/
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s/registry-data\nhttp:\n  addr: 127.0.0.1:5000\n' $H > $H/registry.yml
  (setsid $x/usr/bin/docker-registry serve $H/registry.yml > $LOGS/registry.log 2>&1 &)
  for _ in $(seq 1 20); do python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:5000/v2/", timeout=2)' 2>/dev/null && break; sleep 0.5; done
  say "push: registry $($x/usr/bin/docker-registry --version 2>&1 | head -1), skopeo $(skopeo --version)"
  df -h / /tmp | uniq >> "$LOGS/push.log"
  timeout $(( $(left) - 40 )) /usr/bin/python3 "$HERE/push_root.py" 127.0.0.1:5000 sglang-staging h200 --extra /tmp/gs/site \
    --zstd $H/bin/zstd --out "$REF_FILE" 2>> "$LOGS/push.log"
  say "push: exit $? -> $(cat "$REF_FILE" 2>/dev/null)"; tail -1 "$LOGS/push.log"
  skopeo inspect --raw --tls-verify=false "docker://$(cat "$REF_FILE")" > "$LOGS/bydigest-manifest.json" 2>&1
  bash .gpu/engine/engine.sh start 2>&1 | tee "$LOGS/engine.txt"; cp /etc/cdi/nvidia.json "$LOGS/cdi-nvidia.json" 2>/dev/null
  say "push done"; }

ldcache-hook() {
  need /etc/cdi/nvidia.json "phase push first"
  /usr/bin/python3 - <<'EOF2'
import json
p='/etc/cdi/nvidia.json'; s=json.load(open(p))
# what nvidia-ctk's update-ldcache hook does: refresh the container's ld cache once the driver's libraries are mounted
s['containerEdits']['hooks']=[{'hookName':'startContainer','path':'/sbin/ldconfig','args':['ldconfig']}]
json.dump(s,open(p,'w'),indent=1); print('hooks', s['containerEdits']['hooks'])
EOF2
  cp /etc/cdi/nvidia.json "$LOGS/cdi-nvidia-with-hook.json"; sleep 2; }

bydigest() {
  need "$REF_FILE" "phase push first"; local run=h200-bydigest-2026-12-04; MADE+=("$run")
  export PATH=/tmp/engine/usr/bin:/tmp/engine/usr/sbin:$PATH
  docker info --format 'engine {{.ServerVersion}}, {{.Driver}}, CDI {{.CDISpecDirs}}' | tee -a "$LOGS/calls.log" || exit 5
  docker image ls --digests >> "$LOGS/calls.log" 2>&1   # nothing yet: the verification pulls for real
  say "bydigest: verify --pull $(cat "$REF_FILE")"
  verifier_t $(( $(left) - 15 )) verify --pull "$(cat "$REF_FILE")" --cell-id $CELL_POOL --run-id $run 2>&1 \
    | tee "$LOGS/bydigest-verify.log" | cut -c1-300
  say "bydigest: verify exit ${PIPESTATUS[0]}"
  docker image ls --digests >> "$LOGS/calls.log" 2>&1; pubkey bydigest; }

for phase in "$@"; do
  case $phase in carry1|stage|host|lxc|push|ldcache-hook|bydigest) $phase ;; *) echo "unknown phase $phase"; exit 2 ;; esac
done
say "end"
