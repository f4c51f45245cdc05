#!/bin/bash
# Unprivileged LXC containers with the GPU on an H200 test machine: the recipe of docs/lxc-gpu.md
# ("Unprivileged containers"), its two failure cases, and what the preflight and the verifier say about each.
# There: LXC 5.0.2 as root, no network, SGLang 0.5.16 and the packages it imports staged in /tmp/gs/site, the
# project's Python dependencies importable by `python3 -m buildscripts`, the machine's torch venv at
# $(python3 -c 'import sys; print(sys.prefix)'). Run from the repository root:
#   bash evidence/h200-lxc-unprivileged/run.sh create NAME VARIANT
#       VARIANT good        idmap u/g 0 100000 65536, its own network namespace with loopback up
#                           (lxc.net.0.flags = up), the host's /dev/nvidia* bound in (the driver keeps them 0666)
#               lo-down     the same without lxc.net.0.flags = up: the container's loopback stays down
#               nodes-0660  the same as good, but the GPU's nodes bound in are copies of mode 0660 owned by
#                           root:root (mknod with the host nodes' numbers, in /tmp/lxc-NAME/nodes): nobody's
#                           inside, so the container's root cannot open them. The host's nodes are untouched.
#   bash evidence/h200-lxc-unprivileged/run.sh preflight NAME   `preflight --lxc-name NAME --cuda 13.0`
#   bash evidence/h200-lxc-unprivileged/run.sh verify NAME      `verify --lxc-name NAME` -> $OUT/NAME.json
#   bash evidence/h200-lxc-unprivileged/run.sh destroy NAME
# Everything it writes for the record goes under $OUT (default /tmp/evidence-out): the configs as written,
# the preflight's words, the verifier's results and console. PY (default python3) runs the project's commands,
# VENV (default python3's prefix) is the Python the container shares (it must not lie under a 0700 /root).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/evidence-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PY:-python3}                                                   # runs the project's commands
venv=${VENV:-$(python3 -c 'import sys; print(sys.prefix)')}        # the container's Python (torch's venv)
site=/tmp/gs/site
mapped=100000   # the host uid and gid of the container's root, as LXC and Proxmox map it

config() {  # config NAME ROOTFS VARIANT
  local name=$1 rootfs=$2 variant=$3 uvm rule n src
  uvm=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
  echo "lxc.uts.name = $name"
  echo "lxc.rootfs.path = dir:$rootfs"
  echo "lxc.idmap = u 0 $mapped 65536"
  echo "lxc.idmap = g 0 $mapped 65536"
  echo "lxc.net.0.type = empty"                # its own namespace: in the host's, sysfs cannot be mounted
  [ "$variant" = lo-down ] || echo "lxc.net.0.flags = up"
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
  echo "lxc.cgroup2.devices.deny = a"
  for rule in 1:3 1:5 1:7 1:8 1:9 5:0 5:1 5:2 "136:*" "195:*" "$uvm:*"; do
    echo "lxc.cgroup2.devices.allow = c $rule rwm"
  done
  for n in nvidia0 nvidiactl nvidia-uvm nvidia-uvm-tools; do
    src=/dev/$n; [ "$variant" = nodes-0660 ] && src=/tmp/lxc-$name/nodes/$n
    echo "lxc.mount.entry = $src dev/$n none bind,optional,create=file"
  done
  echo "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0"
}

case "${1:-}" in
create)
  name=$2 variant=$3 rootfs=/tmp/lxc-$2/rootfs
  case $variant in good|lo-down|nodes-0660) ;; *) echo "unknown variant $variant"; exit 2 ;; esac
  rm -rf "/tmp/lxc-$name"; mkdir -p "$rootfs"/{usr,opt,etc,tmp,root,dev,proc,sys,run,var/tmp,home} "$site"
  for l in bin sbin lib lib64 lib32 libx32; do
    if [ -L "/$l" ]; then ln -s "$(readlink "/$l")" "$rootfs/$l"; elif [ -d "/$l" ]; then mkdir -p "$rootfs/$l"; fi
  done
  cp -a /etc/. "$rootfs/etc/" 2>/dev/null
  echo "export PATH=/usr/local/cuda/bin:$venv/bin:\$PATH PYTHONPATH=$site CUDA_HOME=/usr/local/cuda HF_HUB_OFFLINE=1 \
NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1" > "$rootfs/etc/profile.d/zz-sglang.sh"
  # What the container writes is its root's, as Proxmox makes an unprivileged container's root folder.
  chown "$mapped:$mapped" "$rootfs"; chown -R "$mapped:$mapped" "$rootfs"/{etc,tmp,root,run,var,home}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"; chmod 0700 "$rootfs/root"
  if [ "$variant" = nodes-0660 ]; then
    mkdir -p "/tmp/lxc-$name/nodes"
    for n in nvidia0 nvidiactl nvidia-uvm nvidia-uvm-tools; do
      mknod -m 0660 "/tmp/lxc-$name/nodes/$n" c "$((16#$(stat -c %t "/dev/$n")))" "$((16#$(stat -c %T "/dev/$n")))"
    done
  fi
  mkdir -p "/var/lib/lxc/$name"
  config "$name" "$rootfs" "$variant" > "/var/lib/lxc/$name/config"
  cp "/var/lib/lxc/$name/config" "$out/$name.config"
  lxc-start -n "$name" -l DEBUG -o "/tmp/lxc-$name/lxc.log" -d && lxc-wait -n "$name" -s RUNNING -t 30
  sleep 1; echo "== $name ($variant): $(lxc-info -n "$name" -s -H)"
  { ls -ln /dev/nvidia*; lxc-attach -n "$name" -- sh -c 'id; cat /proc/self/uid_map; ls -ln /dev/nvidia*; \
      cat /sys/class/net/lo/flags; nvidia-smi -L 2>&1 | head -n 3'; } 2>&1 | tee "$out/inside-$name.txt" ;;
preflight)
  name=$2
  (cd "$root" && "$py" -m buildscripts preflight --lxc-name "$name" --cuda 13.0) 2>&1 | tee "$out/preflight-$name.txt"
  echo "== preflight $name: exit ${PIPESTATUS[0]}" | tee -a "$out/preflight-$name.txt" ;;
verify)
  name=$2; shift 2; t0=$(date +%s)
  (cd "$root" && "$py" -m buildscripts verify --lxc-name "$name" --python "$venv/bin/python3" --run-id "$name" \
     --out "$out/$name.json" "$@") 2>&1 | tee "$out/verify-$name.txt" | cut -c1-400
  echo "== verify $name: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 ))s" | tee -a "$out/verify-$name.txt" ;;
destroy) lxc-stop -k -n "$2" >/dev/null 2>&1; lxc-destroy -n "$2" >/dev/null 2>&1; rm -rf "/tmp/lxc-$2"; true ;;
*) sed -n 2,20p "$0"; exit 2 ;;
esac
