#!/bin/bash
# GPU seconds per verification on a GPU test machine (issue 50): only the GPU stages run there (the CPU stages are the
# build runner's), SGLang 0.5.16's staged site, the verifier installed from its wheel into a clean environment.
#   carry   with .gpu/sgA, .gpu/np, .gpu/lxc: the first part of the staged site, numpy's wheel, the LXC debs (/tmp/h)
#   host    with .gpu/sgB, .gpu/wheels (this commit's wheel, its dependencies, numpy's and safetensors'), .gpu/wheels0 (the wheel of the
#           commit before, whose GPU stages run one after the other): host mode, cold, the earlier code then this
#   warm    the default profile's kernels baked for sm_90a without a GPU (images/warm/bake.py, as an image's warm
#           stage does), then host mode with those caches and their bake report: a warm start
#   ct      an unprivileged LXC container (recipe `good` of evidence/h200-lxc-unprivileged/run.sh), `verify --here`
#           of the GPU stages inside; then the same container with /usr/local/cuda* hidden and no CUDA_HOME (the
#           seed incident): the GPU stages must fail where they failed, with the same class
#   host-warm  host, then warm, in one call; ct-fresh: on a machine that went cold after carry, the staging, the
#           install and ct in one call
# Files there survive only while the machine stays warm, so the calls follow each other at once.
set -u
R=$(pwd); O=${OUT:-/tmp/out}; H=/tmp/h; mkdir -p "$O" "$H"
exec > >(tee -a "$O/console.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
T0=$(date +%s); say() { echo "== $* (+$(( $(date +%s) - T0 ))s)"; }
PY=/opt/torch/.venv/bin/python3; CT=ugpu
G=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\+' | tr H h); G=${G:-gpu}
GPU_STAGES=gpu-visible,kernel-smoke,nccl-allreduce,server,first-generation
need() { [ -e "$1" ] || { say "MISSING $1: $2"; exit 3; }; }

carry() {
  need .gpu/sgA/site.tar.xz.part-00 "carry .gpu/sgA"; need .gpu/lxc/lxc-gpu.sh "carry .gpu/lxc"; need .gpu/np "carry .gpu/np"
  mkdir -p $H/parts $H/lxc $H/np && cp .gpu/sgA/* $H/parts/ && cp .gpu/lxc/* $H/lxc/ && cp .gpu/np/* $H/np/
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader; uname -srm; nproc
  say "carry done"; }

stage() {
  need $H/parts/site.tar.xz.part-00 "phase carry first"; need .gpu/sgB/site.tar.xz.sha256 "carry .gpu/sgB"
  if [ ! -f /tmp/gs/site/.ok ]; then
    got=$(cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat .gpu/sgB/site.tar.xz.sha256)" ] || { say "SGLang parts: checksum mismatch"; exit 4; }
    mkdir -p /tmp/gs && cat $H/parts/site.tar.xz.part-00 .gpu/sgB/site.tar.xz.part-01 | /usr/bin/python3 -c "
import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/gs')" && touch /tmp/gs/site/.ok
  fi
  printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' $PY > /tmp/gs/python3
  chmod 755 /tmp/gs/python3; chmod -R o+rX /tmp/gs
  say "staged: $(du -sh /tmp/gs/site | cut -f1) SGLang site"; }

install() {  # install VENV WHEEL: the user's way, a fresh environment, nothing of this checkout on its path
  rm -rf "$1"; $PY -m venv --without-pip "$1" && $PY -m pip --python "$1/bin/python3" install -q --no-index \
    --find-links "$R/.gpu/wheels" --find-links $H/np "$2" numpy safetensors 2>&1 | tail -3
  chmod -R o+rX "$1"; say "installed $1 from $2"; }

verify_host() {  # verify_host VENV RUN [WRAPPER]: the GPU stages in host mode, timed from outside
  mkdir -p /var/tmp/vg && cd /var/tmp/vg || exit 5; local t0; t0=$(date +%s.%N)
  timeout 290 "$1/bin/sglang-images" verify --host --python "${3:-/tmp/gs/python3}" --archs sm_90a,sm_100a,sm_120a \
    --lane-cuda 13.0 --stages $GPU_STAGES --stage-timeout 240 --run-id "$2" 2>&1 | tee "$O/verify-$2.txt" | cut -c1-300
  local rc=${PIPESTATUS[0]}
  say "verify $2: exit $rc, wall $(/usr/bin/python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  rm -rf runs/$2/host/work; tar -C runs -czf "$O/$2.tar.gz" $2; cd "$R" || exit 5; }

host() {
  stage; install /opt/cv0 "$R"/.gpu/wheels0/sglang_images-*.whl; install /opt/cv "$R"/.gpu/wheels/sglang_images-*.whl
  verify_host /opt/cv0 $G-one-by-one-cold
  verify_host /opt/cv $G-beside-cold; say "host done"; }

warm() {
  need /opt/cv/bin/sglang-images "phase host first"; local B=/var/cache/sgw t0
  rm -rf $B; mkdir -p $B; t0=$(date +%s)
  ( export TVM_FFI_CACHE_DIR=$B/tvm-ffi SGLANG_CACHE_DIR=$B FLASHINFER_WORKSPACE_BASE=$B/flashinfer \
      TRITON_CACHE_DIR=$B/triton TORCHINDUCTOR_CACHE_DIR=$B/inductor CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH
    CUDA_VISIBLE_DEVICES= PYTHONPATH=/tmp/gs/site $PY images/warm/bake.py images/warm/sglang-0.5.16.json \
      --archs sm_90a --profiles default --report $B/warm.json 2>&1 | tail -3 )
  say "baked sm_90a (default profile) with the GPU hidden in $(( $(date +%s) - t0 )) s"
  chmod -R a+rwX $B   # the caches as the image's user finds them: the sandboxed identity reads (and locks) them
  printf '#!/bin/sh\nexport TVM_FFI_CACHE_DIR=%s/tvm-ffi SGLANG_CACHE_DIR=%s FLASHINFER_WORKSPACE_BASE=%s/flashinfer SGLANG_IMAGES_WARM_REPORT=%s/warm.json\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' $B $B $B $B $PY > /tmp/gs/warm-python3
  chmod 755 /tmp/gs/warm-python3; cp $B/warm.json "$O/bake-report.json"
  verify_host /opt/cv $G-beside-warm /tmp/gs/warm-python3; say "warm done"; }

in_ct() { lxc-attach -n $CT -- /bin/sh -lc "cd /tmp && unset PYTHONPATH && HOME=/root $*"; }

verify_ct() {  # verify_ct RUN [ENV]: the GPU stages in place, inside the container
  local t0; t0=$(date +%s.%N)
  in_ct "${2:-} mkdir -p /tmp/vh && cd /tmp/vh && timeout 280 /opt/cv/bin/sglang-images verify --here --python /tmp/envut/python3 \
    --archs sm_90a,sm_100a,sm_120a --lane-cuda 13.0 --stages $GPU_STAGES --stage-timeout 240 --run-id $1" \
    2>&1 | tee "$O/verify-$1.txt" | cut -c1-300
  say "verify $1: exit ${PIPESTATUS[0]}, wall $(/usr/bin/python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  local vh=/tmp/lxc-$CT/rootfs/tmp/vh; rm -rf $vh/runs/$1/*/work; [ -d $vh/runs/$1 ] && tar -C $vh/runs -czf "$O/$1.tar.gz" $1; }

ct() {
  need /opt/cv/bin/sglang-images "phase host first"
  command -v lxc-start >/dev/null || bash $H/lxc/lxc-gpu.sh install > "$O/lxc-install.txt" 2>&1
  VENV=$PY OUT=$O bash evidence/h200-lxc-unprivileged/run.sh destroy $CT
  VENV=/opt/torch/.venv OUT=$O bash evidence/h200-lxc-unprivileged/run.sh create $CT good | tail -2
  local envut=/tmp/lxc-$CT/rootfs/tmp/envut; mkdir -p $envut
  printf '#!/bin/sh\nPYTHONPATH=/tmp/gs/site${PYTHONPATH:+:$PYTHONPATH} exec /opt/torch/.venv/bin/python3 "$@"\n' > $envut/python3
  chmod 755 $envut/python3; chown -R 100000:100000 $envut
  verify_ct $G-ct-beside-cold
  # The seed incident: /usr/local/cuda* hidden (a tmpfs over /usr/local, every other entry bound back), no CUDA_HOME.
  lxc-stop -k -n $CT; local cfg=/var/lib/lxc/$CT/config e
  echo "lxc.mount.entry = tmpfs usr/local tmpfs rw,size=1m,mode=0755 0 0" >> $cfg
  for e in /usr/local/*; do case ${e##*/} in cuda*) ;; *)
    echo "lxc.mount.entry = $e usr/local/${e##*/} none rbind,ro,create=$([ -d "$e" ] && echo dir || echo file) 0 0" >> $cfg ;;
  esac; done
  cp $cfg "$O/$CT-no-toolkit.config"
  lxc-start -n $CT -d && lxc-wait -n $CT -s RUNNING -t 30; sleep 1
  in_ct "ls /usr/local; command -v nvcc || echo no nvcc" 2>&1 | tail -3
  verify_ct $G-ct-seed "unset CUDA_HOME; export PATH=\$(echo \$PATH | tr : '\n' | grep -v cuda | paste -sd:);"
  VENV=$PY OUT=$O bash evidence/h200-lxc-unprivileged/run.sh destroy $CT; say "ct done"; }

case "${1:-}" in
carry) carry ;;
host) host ;;
warm) warm ;;
ct) ct ;;
warm-ct) warm; ct ;;
host-warm) host; warm ;;
ct-fresh) stage; install /opt/cv "$R"/.gpu/wheels/sglang_images-*.whl; ct ;;
*) sed -n 2,14p "$0"; exit 2 ;;
esac
