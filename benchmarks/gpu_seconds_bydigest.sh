#!/bin/bash
# GPU seconds per verification on a GPU test machine (issue 50), second round: the warm start judged again with the
# warm check that keeps the probe's own compiles apart (commit bacc768 against the commit before it, 5482ee4; ran
# 2026-12-06, evidence/h100-warm-2026-12-06), an image by digest in a container (ran 2026-12-06 with the GPU stages
# alone, evidence/h100-bydigest-2026-12-06), and the kernel-smoke hole's input with its control. By digest, its
# CPU stages carried from a record of that digest, so that only the GPU stages run; WARM=1, a warm image by digest
# (ran 2026-12-06: evidence/h100-bydigest-warm-2026-12-06, baked under the machine's environment, and
# evidence/h200-bydigest-warm-2026-12-06, under the image's, as `bake` now does). Runs there, from the repository
# root, as root, in phases that follow each other at once (files survive between calls only while the machine stays
# warm); what each phase needs comes under .gpu/ (ignored; a call carries at most 64 MiB with the tree):
#   carry [.gpu/sgA .gpu/extra2]; setup warm|bake [.gpu/sgB .gpu/wheels .gpu/wheels0]; push [.gpu/engine .gpu/extra]; gpu
# .gpu/sgA and sgB: SGLang 0.5.16 and the packages it imports that the machine lacks, unpacked into one site folder
# (xz), split at 40 MiB, sgB with the whole's sha256; .gpu/wheels: the project's wheel (pip wheel --no-deps .) and its `build` extra's wheels for CPython 3.12
# manylinux x86_64 (pip download); .gpu/wheels0: the wheel of the commit to compare with; .gpu/engine: Debian trixie's
# Docker 26 (dockerd, containerd, runc) and engine.sh, which starts it with CDI and makes an image of the root; .gpu/extra: Debian bookworm's docker-registry and zstd debs.
# Its results go to an evidence folder of the day it ran, with a summary.md, and into benchmarks/gpu-seconds.md.
#   carry   with .gpu/sgA: the first 40 MiB of SGLang 0.5.16's site (xz; a call carries at most 64 MiB), and
#           .gpu/extra2: Debian bookworm's skopeo with its libraries (libgpgme11, libassuan0, libdevmapper1.02.1) and
#           containers-common's policy, which `verify --pull` reads the registry with
#   setup   with .gpu/sgB (the rest and the whole's sha256) and .gpu/wheels (bacc768's wheel and its dependencies):
#           the site checked and unpacked, the wheel installed into a fresh environment (/opt/cv)
#   warm    with .gpu/wheels0 (5482ee4's wheel) and .gpu/wheels: that wheel into another fresh environment, the
#           default profile baked for sm_90a with the GPU hidden (images/warm/bake.py, as an image's warm stage
#           does), then the GPU stages in host mode over those caches: first with 5482ee4's verifier, then bacc768's
#   bake    the default profile baked for sm_90a with the GPU hidden into /var/cache/sgw (what `warm` bakes)
#   push    with .gpu/engine and .gpu/extra (Debian's docker-registry and zstd, unpacked under /tmp, never into /):
#           a registry on 127.0.0.1:5000, an image made from this machine's root with the site on PYTHONPATH pushed
#           to it as one zstd layer (evidence/h200-2026-12-04/push_root.py: NOT the cell's build), the engine with
#           CDI and an ldconfig start hook (as nvidia-ctk's update-ldcache hook); then `verify --pull REF` of the
#           CPU stages only: the record a build runner would hand the GPU job, sealed by this machine's key.
#           WARM=1 (on every phase from here): the image carries bake's caches and names them in its config, as a
#           warm cell's image does (its bake report by SGLANG_IMAGES_WARM_REPORT, not at /etc/sglang-images)
#   gpu     `verify --pull REF --cpu-record THAT --trust-key ITS_KEY`, every stage asked (as the CI's GPU job): the
#           CPU stages carried from that record, the GPU stages run; timed from outside
#   gpu-pulled  the same after the image was removed from the engine: the pull counted in
#   smoke   the kernel-smoke hole's test input (evidence/h200-smoke/make-pruned-site.sh): gpu-visible,kernel-smoke on
#           the site whose sgl_kernel was pruned to sm_100a,sm_120a (must fail, kernel-image-missing), then the control
#   host    the GPU stages in host mode, beside, cold (the staged site, no baked caches)
# Results under $OUT: console.txt, the verifiers' output, RUN.tar.gz of each run folder.
set -u
R=$(pwd); O=${OUT:-/tmp/out}; H=/tmp/h; mkdir -p "$O" "$H"
exec > >(tee -a "$O/console.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
T0=$(date +%s); CALL_S=${CALL_S:-590}; left() { echo $(( T0 + CALL_S - $(date +%s) )); }
say() { echo "== $* (+$(( $(date +%s) - T0 ))s)"; }
need() { [ -e "$1" ] || { say "MISSING $1: $2"; exit 3; }; }
PY=/opt/torch/.venv/bin/python3
GPU_STAGES=gpu-visible,kernel-smoke,nccl-allreduce,server,first-generation
CPU_STAGES=facts,import,flavour,arch-audit,toolchain,jit-compile
CELL=sglang0.5.16-torch2.11.0-cu130-pip-bookworm
G=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\+' | tr H h); G=${G:-gpu}
wall() { /usr/bin/python3 -c "import time; print(round(time.time() - $1, 1))"; }
engine_path() { export PATH=/tmp/engine/usr/bin:/tmp/engine/usr/sbin:$H/bin:$PATH; }   # the engine, skopeo, zstd
IMAGE_PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
IMAGE_ENV="PATH=$IMAGE_PATH CUDA_HOME=/usr/local/cuda PYTHONPATH=/tmp/gs/site"   # the pushed image's config, push_root.py's
W=; [ "${WARM:-0}" = 1 ] && W=-warm   # WARM=1: the image by digest carries the baked caches (phase bake first)
B=/var/cache/sgw   # the baked caches: the same folder at run time, in host mode and in the image (FlashInfer's ninja files name it)
warm_env() { echo "TVM_FFI_CACHE_DIR=$B/tvm-ffi SGLANG_CACHE_DIR=$B FLASHINFER_WORKSPACE_BASE=$B/flashinfer TRITON_CACHE_DIR=$B/triton TORCHINDUCTOR_CACHE_DIR=$B/inductor SGLANG_IMAGES_WARM_REPORT=$B/warm.json"; }
keep() { [ -d "$1/$2" ] && { rm -rf "$1/$2"/*/work; tar -C "$1" -czf "$O/$2.tar.gz" "$2"; }; true; }

carry() {
  need .gpu/sgA/site.tar.xz.p-00 "carry .gpu/sgA"; mkdir -p $H/parts && cp .gpu/sgA/* $H/parts/
  [ -d .gpu/extra2 ] && mkdir -p $H/extra2 && cp .gpu/extra2/*.deb $H/extra2/   # skopeo and its libraries, for push
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader; uname -srm; nproc
  say "carry done"; }

stage() {
  need $H/parts/site.tar.xz.p-00 "phase carry first"; need .gpu/sgB/site.tar.xz.sha256 "carry .gpu/sgB"
  if [ ! -f /tmp/gs/site/.ok ]; then
    local got; got=$(cat $H/parts/site.tar.xz.p-00 .gpu/sgB/site.tar.xz.p-01 | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat .gpu/sgB/site.tar.xz.sha256)" ] || { say "SGLang parts: checksum mismatch"; exit 4; }
    mkdir -p /tmp/gs && cat $H/parts/site.tar.xz.p-00 .gpu/sgB/site.tar.xz.p-01 | /usr/bin/python3 -c "
import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/gs')" && touch /tmp/gs/site/.ok
  fi
  printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' $PY > /tmp/gs/python3
  chmod 755 /tmp/gs/python3; chmod -R o+rX /tmp/gs; say "staged: $(du -sh /tmp/gs/site | cut -f1) SGLang site"; }

install() {  # install VENV WHEEL: the user's way, a fresh environment, nothing of this checkout on its path
  rm -rf "$1"; $PY -m venv --without-pip "$1" && $PY -m pip --python "$1/bin/python3" install -q --no-index \
    --find-links "$R/.gpu/wheels" "$2[build]" 2>&1 | tail -3
  chmod -R o+rX "$1"; say "installed $1 from $2"; }

verify_host() {  # verify_host VENV RUN WRAPPER: the GPU stages in host mode, timed from outside
  mkdir -p /var/tmp/vg && cd /var/tmp/vg || exit 5; local t0; t0=$(date +%s.%N)
  timeout 290 "$1/bin/sglang-images" verify --host --python "$3" --archs "${ARCHS:-sm_90a,sm_100a,sm_120a}" --lane-cuda 13.0 \
    --stages "${STAGES:-$GPU_STAGES}" --stage-timeout 240 --run-id "$2" 2>&1 | tee "$O/verify-$2.txt" | cut -c1-300
  say "verify $2: exit ${PIPESTATUS[0]}, wall $(wall $t0) s"; keep runs "$2"; cd "$R" || exit 5; }

setup() { stage; install /opt/cv "$(ls "$R"/.gpu/wheels/sglang_images-*.whl)"; }

bake() {  # the default profile baked for sm_90a with the GPU hidden (images/warm/bake.py, as an image's warm stage does)
  need /tmp/gs/site/.ok "phase setup first"
  local t0; rm -rf $B; mkdir -p $B; t0=$(date +%s)
  # under the image's own environment, as an image's warm stage bakes under its ENV: FlashInfer rebuilds a module
  # whose ninja command differs (evidence/h100-bydigest-warm-2026-12-06: baked under this machine's environment,
  # the image's start rebuilt norm)
  env -i HOME=/root $IMAGE_ENV $(warm_env) CUDA_VISIBLE_DEVICES= $PY images/warm/bake.py images/warm/sglang-0.5.16.json \
    --archs sm_90a --profiles default --report $B/warm.json 2>&1 | tail -3
  say "baked sm_90a (default profile) with the GPU hidden in $(( $(date +%s) - t0 )) s"
  mkdir -p $B/triton $B/inductor; chmod -R a+rwX $B   # as the image's user finds them: the sandboxed identity reads (and locks) them
  printf '#!/bin/sh\nexport %s\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$(warm_env)" $PY > /tmp/gs/warm-python3
  chmod 755 /tmp/gs/warm-python3; cp $B/warm.json "$O/bake-report.json"; }

warm() {  # OLD=0: bacc768's verifier only (a short device budget)
  need /opt/cv/bin/sglang-images "phase setup first"
  [ "${OLD:-1}" = 1 ] && { need .gpu/wheels0 "carry .gpu/wheels0"; install /opt/cv0 "$(ls "$R"/.gpu/wheels0/sglang_images-*.whl)"; }
  bake
  [ "${OLD:-1}" = 1 ] && verify_host /opt/cv0 $G-warm-5482ee4 /tmp/gs/warm-python3
  verify_host /opt/cv $G-warm-bacc768 /tmp/gs/warm-python3; say "warm done"; }

push() {
  need .gpu/engine/engine.sh "carry .gpu/engine"; need .gpu/extra "carry .gpu/extra"; need /tmp/gs/site/.ok "phase setup first"
  need /opt/cv/bin/sglang-images "phase setup first"
  need $H/extra2/skopeo_1.9.3+ds1-1+b10_amd64.deb "phase carry with .gpu/extra2 first"
  local x=$H/extra lib f; mkdir -p $x $H/bin; for f in .gpu/extra/*.deb $H/extra2/*.deb; do dpkg -x "$f" $x; done   # never into /
  lib=$x/usr/lib/x86_64-linux-gnu:$x/lib/x86_64-linux-gnu
  for f in zstd skopeo; do printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/%s "$@"\n' "$lib" $x $f > $H/bin/$f; done
  chmod 755 $H/bin/zstd $H/bin/skopeo; mkdir -p /etc/containers
  [ -f /etc/containers/policy.json ] || cp $x/etc/containers/policy.json /etc/containers/
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s/registry-data\nhttp:\n  addr: 127.0.0.1:5000\n' $H > $H/registry.yml
  (setsid $x/usr/bin/docker-registry serve $H/registry.yml > $O/registry.log 2>&1 &)
  for _ in $(seq 1 20); do python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:5000/v2/", timeout=2)' 2>/dev/null && break; sleep 0.5; done
  local t0 warm=() v; t0=$(date +%s.%N)
  if [ "${WARM:-0}" = 1 ]; then   # the baked caches go into the image (they lie under /var/cache), named in its config
    need $B/warm.json "phase bake first"; for v in $(warm_env); do warm+=(--env "$v"); done; fi
  timeout 300 /usr/bin/python3 evidence/h200-2026-12-04/push_root.py 127.0.0.1:5000 sglang-staging $G$W \
    --extra /tmp/gs/site --path $IMAGE_PATH "${warm[@]}" --zstd $H/bin/zstd --out $H/ref 2> "$O/push.log"; say "push: exit $?, $(wall $t0) s -> $(cat $H/ref 2>/dev/null)"; tail -1 "$O/push.log"
  bash .gpu/engine/engine.sh start 2>&1 | tee "$O/engine.txt"
  /usr/bin/python3 - <<'PYHOOK'
import json
p = '/etc/cdi/nvidia.json'; s = json.load(open(p))
# what nvidia-ctk's update-ldcache hook does: refresh the container's ld cache once the driver's libraries are mounted
s['containerEdits']['hooks'] = [{'hookName': 'startContainer', 'path': '/sbin/ldconfig', 'args': ['ldconfig']}]
json.dump(s, open(p, 'w'), indent=1)
PYHOOK
  cp /etc/cdi/nvidia.json "$O/cdi-nvidia.json"; sleep 2
  engine_path
  [ -n "$W" ] && explain "$(cat $H/ref)"
  /opt/cv/bin/python3 -c "import os; from buildscripts.trust import keys; print(keys.signing_key(os.environ).public.pem.decode(), end='')" > $H/verifier.pub
  cp $H/verifier.pub "$O/verifier.pub"
  t0=$(date +%s.%N)
  timeout $(( $(left) - 10 )) /opt/cv/bin/sglang-images verify --pull "$(cat $H/ref)" --cell-id $CELL --stages $CPU_STAGES \
    --run-id $G-bydigest$W-cpu 2>&1 | tee "$O/verify-$G-bydigest$W-cpu.txt" | cut -c1-300
  say "verify $G-bydigest$W-cpu (the CPU stages, pull included): exit ${PIPESTATUS[0]}, wall $(wall $t0) s"; keep runs $G-bydigest$W-cpu
  say "push done"; }

explain() {  # explain REF: does FlashInfer's ninja find work in the image's baked norm module, before and after its JIT
  # writes build.ninja again (as a start does), in the image with the GPU, and here? ($O/ninja-explain.txt)
  local d=$B/flashinfer/.cache/flashinfer/0.6.14/90a/cached_ops/norm
  local script="cd $d && ls -la --time-style=full-iso . && cp build.ninja /tmp/before.ninja && env | sort | grep -v -i -e key -e token
    command -v gcc c++ nvcc ninja; ninja -n -d explain -f build.ninja 2>&1 | head -20
    python3 -c 'from flashinfer.jit.norm import gen_norm_module as g; s = g(); s.write_ninja(); print(s.ninja_path)'
    diff /tmp/before.ninja build.ninja && echo 'build.ninja: the same'; ninja -n -d explain -f build.ninja 2>&1 | head -20"
  { echo "== in the image"; timeout 120 docker run --rm --device nvidia.com/gpu=all "$1" sh -c "$script"
    echo "== here, under the image's environment"; env -i HOME=/root $IMAGE_ENV $(warm_env) sh -c "$script"; } > "$O/ninja-explain.txt" 2>&1
  say "ninja explain: $(grep -c 'ninja explain' "$O/ninja-explain.txt") explain lines"; }

gpu_run() {  # gpu_run RUN: the GPU stages by digest, the CPU stages carried
  need $H/ref "phase push first"; engine_path
  local t0; t0=$(date +%s.%N)
  timeout $(( $(left) - 10 )) /opt/cv/bin/sglang-images verify --pull "$(cat $H/ref)" --cell-id $CELL \
    --cpu-record runs/$G-bydigest$W-cpu/results.json --trust-key $H/verifier.pub --run-id $1 2>&1 | tee "$O/verify-$1.txt" | cut -c1-300
  say "verify $1: exit ${PIPESTATUS[0]}, wall $(wall $t0) s"; keep runs "$1"; }

gpu() { gpu_run $G-bydigest$W-gpu; }
gpu-pulled() {
  engine_path
  docker image rm -f "$(cat $H/ref)" > /dev/null 2>&1; docker image ls --digests | head -5
  gpu_run $G-bydigest$W-gpu-pulled; }

smoke() {  # the kernel-smoke hole's test input (evidence/h200-smoke): sgl_kernel pruned to sm_100a,sm_120a, and the control
  need /opt/cv/bin/sglang-images "phase setup first"
  OUT=$O/smoke bash evidence/h200-smoke/make-pruned-site.sh > "$O/make-pruned-site.txt" 2>&1; say "pruned: exit $?"
  tail -2 "$O/make-pruned-site.txt"
  ARCHS=sm_90a STAGES=gpu-visible,kernel-smoke verify_host /opt/cv $G-smoke-pruned /tmp/gs/pruned-python3
  ARCHS=sm_90a STAGES=gpu-visible,kernel-smoke verify_host /opt/cv $G-smoke-site /tmp/gs/site-python3; }

host() { verify_host /opt/cv $G-host-cold /tmp/gs/python3; }   # beside, cold: no baked caches

for phase in "$@"; do
  case $phase in carry|setup|bake|warm|push|gpu|gpu-pulled|smoke|host) $phase ;; *) sed -n "2,$(( $(grep -n '^set -u' "$0" | cut -d: -f1) - 1 ))p" "$0"; exit 2 ;; esac
done
say "end"
