#!/bin/sh
# Assemble a CUDA home at $1 from the CUDA wheels pip installed under site-packages/nvidia:
# CUDA 13 wheels share nvidia/cu13/{bin,include,lib,nvvm}; CUDA 12 wheels have one folder per
# component (nvidia/cuda_nvcc, nvidia/cuda_runtime, ...). Both become one symlink tree, plus what
# JIT links need and pip does not ship (see docs/pip-toolkit.md):
#   - unversioned link names (libcudart.so -> libcudart.so.13): `ld -lcudart` looks for them;
#   - a stub libcuda.so (soname libcuda.so.1) for linking without a driver; at run time the
#     driver's own libcuda.so.1 is loaded. Only LIBRARY_PATH (link time) points at the stub.
set -eu
home=$1
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nvidia=$site/nvidia
[ -d "$nvidia" ] || { echo "no CUDA wheels under $nvidia" >&2; exit 1; }
mkdir -p "$home/lib64/stubs"
for pkg in "$nvidia"/*/; do
  for part in bin include lib nvvm; do
    [ -d "$pkg$part" ] || continue
    dest=$home/$part; [ "$part" = lib ] && dest=$home/lib64
    mkdir -p "$dest"
    cp -rs --remove-destination "$pkg$part/." "$dest/"
  done
done
[ -x "$home/bin/nvcc" ] || { echo "no nvcc among the CUDA wheels: is the toolkit lock installed?" >&2; exit 1; }
cd "$home/lib64"
for lib in libcudart libnvrtc libcublas libcublasLt; do
  real=$(ls $lib.so.[0-9]* 2>/dev/null | sort | head -n1 || true)
  [ -n "$real" ] && [ ! -e "$lib.so" ] && ln -s "$real" "$lib.so"
done
printf 'void cuInit(void) {}\n' > /tmp/libcuda-stub.c
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$home/lib64/stubs/libcuda.so" /tmp/libcuda-stub.c
rm -f /tmp/libcuda-stub.c
"$home/bin/nvcc" --version | tail -n 2
