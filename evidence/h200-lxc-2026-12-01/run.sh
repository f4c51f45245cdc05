#!/bin/bash
# The verifier in place in a real LXC container with the GPU, on an H200 test machine, as run for this
# evidence folder. There: Debian bookworm's lxc 5.0.2 (unpacked beside the machine's root, never into it),
# SGLang 0.5.16 and the packages it imports staged in /tmp/gs/site, the project's Python dependencies on
# PYTHONPATH, no network (HF_HUB_OFFLINE=1) and NVLink multicast off (NCCL_NVLS_ENABLE=0).
#   bash run.sh create NAME VARIANT   a privileged container with the GPU; VARIANT:
#       good           the machine's /usr (CUDA 13.0 toolkit in /usr/local/cuda), /opt (its venv with torch)
#                      and lib folders shared read-only, its own /etc and /root; CUDA_HOME, the venv's and
#                      the toolkit's bin/ and the staged SGLang set in /etc/profile.d, as a user sets them
#       no-toolkit     the same, /usr/local/cuda* hidden inside the container and no CUDA_HOME: the seed
#                      incident's container (torch and CUDA wheels only)
#       no-std-devices the same as good, but the device allow list names the GPU's nodes only (`deny = a`
#                      without LXC's standard rules for null, zero, full, random, urandom, tty, ptmx, pts)
#   bash run.sh diagnose NAME          the probe's old login environment against an attach shell: env, and
#                                      deep_gemm's first JIT under DG_JIT_DEBUG, with and without HOME
#   bash run.sh old-login NAME         the probe's GPU stages in the old login environment (no HOME), to
#                                      show what a JIT failure keeps of the compiler's words
#   bash run.sh verify NAME [ARGS]     `python -m buildscripts verify --lxc-name NAME` -> $OUT/NAME.json
#   bash run.sh preflight [NAME]       `python -m buildscripts preflight [--lxc-name NAME] --cuda 13.0`
#   bash run.sh destroy NAME
# Writes under $OUT (default /tmp/evidence-out).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
venv=$(python3 -c 'import sys; print(sys.prefix)')
site=/tmp/gs/site
std_rules="1:3 1:5 1:7 1:8 1:9 5:0 5:1 5:2 136:*"   # null zero full random urandom tty console ptmx pts

config() {  # config NAME ROOTFS VARIANT: the container's LXC config, the recipe docs/lxc-gpu.md gives
  local name=$1 rootfs=$2 variant=$3 uvm rule n entry
  uvm=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
  echo "lxc.uts.name = $name"
  echo "lxc.rootfs.path = dir:$rootfs"
  echo "lxc.net.0.type = none"                 # the machine's network: it has no bridge
  echo "lxc.apparmor.profile = unconfined"
  echo "lxc.mount.auto = proc:rw sys:rw cgroup:rw"
  echo "lxc.autodev = 1"
  echo "lxc.init.cmd = /bin/sleep infinity"
  echo "lxc.mount.entry = /usr usr none rbind,ro 0 0"
  echo "lxc.mount.entry = /opt opt none rbind,ro 0 0"
  for l in lib lib64 lib32 libx32; do
    [ -d "/$l" ] && [ ! -L "/$l" ] && echo "lxc.mount.entry = /$l $l none rbind,ro 0 0"
  done
  case $venv in /usr*|/opt*) ;; *) echo "lxc.mount.entry = $venv ${venv#/} none rbind,ro,create=dir 0 0" ;; esac
  echo "lxc.mount.entry = $site ${site#/} none bind,ro,create=dir 0 0"
  if [ "$variant" = no-toolkit ]; then         # /usr/local without cuda*, everything else bound back
    echo "lxc.mount.entry = tmpfs usr/local tmpfs rw,size=1m,mode=0755 0 0"
    for entry in /usr/local/*; do
      case ${entry##*/} in cuda|cuda-*) continue ;; esac
      if [ -d "$entry" ]; then echo "lxc.mount.entry = $entry ${entry#/} none rbind,ro,create=dir 0 0"
      else echo "lxc.mount.entry = $entry ${entry#/} none bind,ro,create=file 0 0"; fi
    done
  fi
  echo "lxc.cgroup2.devices.deny = a"
  if [ "$variant" != no-std-devices ]; then
    for rule in $std_rules; do echo "lxc.cgroup2.devices.allow = c $rule rwm"; done
  fi
  echo "lxc.cgroup2.devices.allow = c 195:* rwm"
  echo "lxc.cgroup2.devices.allow = c $uvm:* rwm"
  for n in nvidia0 nvidiactl nvidia-uvm nvidia-uvm-tools; do
    echo "lxc.mount.entry = /dev/$n dev/$n none bind,optional,create=file"
  done
  echo "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0"
}

cell_json() {  # the labels every image of this project carries, with this container's real coordinates
  python3 - "$1" <<'PY'
import json, platform, sys
fields = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
base = fields["ID"].strip('"') + fields["VERSION_ID"].strip('"')
toolkit = "none" if sys.argv[1] == "no-toolkit" else "system13.0"
axes = {"base": base, "python": ".".join(platform.python_version_tuple()[:2]), "torch": "2.11.0", "cuda": "cu130",
        "lane": "torch2.11.0-cu130", "sglang": "0.5.16", "toolkit": toolkit, "archs": "sm_90a"}
axes["cell"] = f"sglang{axes['sglang']}-{axes['lane']}-{toolkit}-{base}"
labels = {f"io.sglang-images.{k}": v for k, v in axes.items()}
labels["io.sglang-images.note"] = "an LXC container on an H200 test machine, sharing its /usr and /opt"
print(json.dumps(labels, indent=1, sort_keys=True))
PY
}

attach_login() {  # the probe's login before 2026-12-01: lxc-attach --clear-env, then `sh -lc`
  lxc-attach -n "$1" --clear-env -- /bin/sh -lc "$2"
}

case "${1:-}" in
create)
  name=$2 variant=$3 rootfs=/tmp/lxc-$2/rootfs
  rm -rf "/tmp/lxc-$name"; mkdir -p "$rootfs"/{usr,opt,etc,tmp,root,dev,proc,sys,run,var/tmp,home} "$site"
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"; chmod 0700 "$rootfs/root"
  for l in bin sbin lib lib64 lib32 libx32; do
    if [ -L "/$l" ]; then ln -s "$(readlink "/$l")" "$rootfs/$l"; elif [ -d "/$l" ]; then mkdir -p "$rootfs/$l"; fi
  done
  cp -a /etc/. "$rootfs/etc/" 2>/dev/null
  mkdir -p "$rootfs/etc/sglang-images" && cell_json "$variant" > "$rootfs/etc/sglang-images/cell.json"
  profile="export PATH=$venv/bin:\$PATH PYTHONPATH=$site HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0"
  profile="$profile TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
  [ "$variant" = no-toolkit ] || profile="$profile CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$venv/bin:\$PATH"
  echo "$profile" > "$rootfs/etc/profile.d/zz-sglang.sh"
  mkdir -p "/var/lib/lxc/$name"
  config "$name" "$rootfs" "$variant" > "/var/lib/lxc/$name/config"
  cp "/var/lib/lxc/$name/config" "$out/$name.config"
  lxc-start -n "$name" -l DEBUG -o "/tmp/lxc-$name/lxc.log" -d && lxc-wait -n "$name" -s RUNNING -t 30
  sleep 1; echo "== $name ($variant): $(lxc-info -n "$name" -s -H)" ;;
diagnose)
  name=$2; mkdir -p "/tmp/lxc-$name/rootfs/tmp/probe-copy" && cp -r "$root/buildscripts/probe" "/tmp/lxc-$name/rootfs/tmp/probe-copy/"
  dg='cd /tmp/probe-copy && python3 -c "from probe.gpu_stages import DEEP_GEMM_OP; exec(DEEP_GEMM_OP)"'
  {
    echo "== env: the probe's old login (lxc-attach --clear-env, sh -lc)"; attach_login "$name" 'env | sort'
    echo "== env: an attach shell (lxc-attach, the caller's environment kept)"; lxc-attach -n "$name" -- env | sort
    echo "== deep_gemm's first JIT in the old login, DG_JIT_DEBUG=1 DG_JIT_PRINT_COMPILER_COMMAND=1"
    timeout 300 lxc-attach -n "$name" --clear-env -- /bin/sh -lc "export DG_JIT_DEBUG=1 DG_JIT_PRINT_COMPILER_COMMAND=1; $dg" 2>&1 | tail -n 40
    echo "== the same, the old login plus HOME=/root only"
    timeout 300 lxc-attach -n "$name" --clear-env -- /bin/sh -lc "export HOME=/root; $dg" 2>&1 | tail -n 8
  } 2>&1 | tee "$out/diagnose-$name.txt" | cut -c1-400 ;;
old-login)
  name=$2; dest=/tmp/lxc-$name/rootfs/tmp/probe-copy; mkdir -p "$dest" && cp -r "$root/buildscripts/probe" "$dest/"
  timeout 500 lxc-attach -n "$name" --clear-env -- /bin/sh -lc \
    "cd /tmp/probe-copy && python3 -m probe --mode lxc --archs sm_90a --lane-cuda 13.0 --stages gpu-visible,kernel-smoke --stage-timeout 400 --workdir /tmp/probe-work --out /tmp/old-login.json" \
    > "$out/old-login-$name.log" 2>&1
  echo "== old-login: exit $?"; cp "/tmp/lxc-$name/rootfs/tmp/old-login.json" "$out/old-login-$name.json"
  python3 -c "import json,sys; [print(r['name'], r['status'], (r.get('reason') or '')[:300]) for r in json.load(open(sys.argv[1]))]" "$out/old-login-$name.json" ;;
verify)
  name=$2; shift 2; t0=$(date +%s)
  (cd "$root" && python3 -m buildscripts verify --lxc-name "$name" --python "$venv/bin/python3" --run-id "$name" \
     --out "$out/$name.json" "$@") 2>&1 | cut -c1-400
  echo "== verify $name: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 ))s" ;;
preflight)
  name=${2:-}
  (cd "$root" && python3 -m buildscripts preflight ${name:+--lxc-name "$name"} --cuda 13.0) 2>&1 \
    | tee "$out/preflight-${name:-host}.txt"
  echo "== preflight ${name:-host}: exit ${PIPESTATUS[0]}" ;;
destroy) lxc-stop -k -n "$2" >/dev/null 2>&1; lxc-destroy -n "$2" >/dev/null 2>&1; rm -rf "/tmp/lxc-$2"; true ;;
*) sed -n 2,24p "$0"; exit 2 ;;
esac
