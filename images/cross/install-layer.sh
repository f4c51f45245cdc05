#!/bin/sh
# Install one layer's wheels for the target platform on the build machine's own CPU (no emulation), into a
# fresh venv at /opt/venv that holds that layer's files alone, ready to be copied into the target's image:
#   install-layer.sh LAYER LOCK [LOWER_LOCK]
# LOWER_LOCK: the lock of the layer below, whose packages are installed there already (a layer's lock repeats
# them, pinned alike: subtract.py leaves them out). Then lean.sh (images/lean/recipe.txt) as in every install
# layer. Not done here, said in docs/platforms.md: the fatbin pruner rewrites x86_64 libraries only
# (R_X86_64_RELATIVE); the layer's bytecode is compiled by compile_layer.py, a step of its own after this one.
# Needs WHEEL_PLATFORM (aarch64-manylinux_2_36), PYTHON_VERSION and LANE_CUDA; the index settings come from
# the caller's secret mount.
set -eu
layer=$1 lock=$2 lower=${3:-}
here=$(dirname "$0")
wanted=/tmp/$layer.txt
python3 "$here/subtract.py" "$lock" $lower > "$wanted"
rm -rf /opt/venv
python3 -m venv --without-pip /opt/venv
if grep -q '^[a-zA-Z]' "$wanted"; then
  /opt/tools/bin/uv pip install --python /opt/venv/bin/python --python-platform "$WHEEL_PLATFORM" \
    --python-version "$PYTHON_VERSION" --require-hashes --no-deps --no-build -r "$wanted"
  LEAN_SITE=/opt/venv/lib/python$PYTHON_VERSION/site-packages sh "$here/lean.sh" "$LANE_CUDA" "$here/recipe.txt"
fi
# What the target's venv has already (its interpreter links, activation scripts, configuration) stays out.
rm -rf /opt/venv/pyvenv.cfg /opt/venv/lib64 /opt/venv/include /opt/venv/bin/python* /opt/venv/bin/activate* \
  /opt/venv/bin/Activate.ps1
