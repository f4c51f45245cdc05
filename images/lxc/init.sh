#!/bin/sh
# The image's init when it runs as a system container (Proxmox VE's OCI containers, `lxc-start`): it keeps
# the container up and stops on the signals LXC and Proxmox send, the server first. When
# /etc/sglang-images/server.args holds server flags (one line, read as shell words), it runs
#   python3 -m sglang.launch_server <those flags>
# in a login environment (CUDA_HOME and PATH from /etc/profile.d/sglang-images.sh), logs to
# /var/log/sglang-server.log, and starts it again 10 s after it exits. The file is looked for every 10 s.
ARGS=/etc/sglang-images/server.args
# LXC gives a container no /dev/shm of its own (systemd would mount one); PyTorch, SGLang and NCCL need it.
if ! grep -qs ' /dev/shm ' /proc/mounts; then
  mkdir -p /dev/shm && mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm 2>/dev/null || true
fi
child=""
stop() {
  if [ -n "$child" ]; then
    kill "$child" 2>/dev/null
    wait "$child"   # the server's own shutdown; LXC kills what is left when its stop timeout ends
  fi
  exit 0
}
trap stop TERM INT PWR HUP
while :; do
  if [ -s "$ARGS" ]; then
    sh -lc "exec python3 -m sglang.launch_server $(head -n 1 "$ARGS")" >>/var/log/sglang-server.log 2>&1 &
    child=$!
    wait "$child"
    child=""
  fi
  sleep 10 &
  wait $!
done
