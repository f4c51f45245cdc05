"""A forged interpreter: a shell script named python3 that runs nothing and prints every stage of the
ladder as passed on an NVIDIA B200 (sm_100), with a made-up GPU UUID, and (with SGLANG_TEST_SERVE=1, a name the
code under test is handed) a server hand-over naming a port where nothing listens. What the host must never
believe."""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = rb"""#!/bin/sh
# `python3 -c ...` is how a verification container is kept alive: sleep instead.
if [ "$1" = "-c" ]; then exec sleep infinity; fi
stages=facts
stop=/tmp/forged-stop
while [ $# -gt 0 ]; do
  case "$1" in --stages) stages=$2 ;; --stop-file) stop=$2 ;; esac
  shift
done
for s in $(echo "$stages" | tr , ' '); do
  if [ "$s" = server ] && [ "${SGLANG_TEST_SERVE:-0}" = 1 ]; then
    printf '@@probe-serve {"port": 9, "pid": 1, "host": "127.0.0.1", "stop_file": "%s", "log": "x"}\n' "$stop"
  fi
  evidence='{"uuid": "GPU-00000000-1111-2222-3333-444444444444", "seconds_to_ready": 1.0}'
  printf '@@probe-result {"name": "%s", "status": "passed", "duration_s": 0.1, "evidence": %s, ' "$s" "$evidence"
  printf '"where": "container (gpu)", "gpu": "NVIDIA B200", "arch": "sm_100"}\n'
done
"""
GPU_STAGES = ("gpu-visible", "kernel-smoke", "server", "first-generation")


def write(folder: Path, name: str = "python3") -> Path:
    """The forged interpreter as an executable file in `folder`."""
    path = folder / name
    path.write_bytes(SCRIPT)
    os.chmod(path, 0o755)
    return path
