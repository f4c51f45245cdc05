#!/bin/sh
# Finish an install layer in the RUN that installed it (a file removed or rewritten in a later layer
# still ships in the one below):  finish-layer.sh LAYER
#   1. remove what no cell can load (recipe.txt, lines for the lane's CUDA flavour $LANE_CUDA);
#   2. remove GPU machine code no target arch ($TARGET_ARCHS) can run (prune_fatbins.py), with a
#      report in /etc/sglang-images/fatbins/LAYER.json that the verifier reads;
#   3. compile the bytecode of the modules a server start imports from it (bytecode.py, with the
#      layer's line of imports.txt).
set -eu
layer=$1
here=$(dirname "$0")
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
sh "$here/lean.sh" "$LANE_CUDA" "$here/recipe.txt"
python3 "$here/prune_fatbins.py" "$site" --archs "$TARGET_ARCHS" --report "/etc/sglang-images/fatbins/$layer.json"
modules=$(sed -n "s/^$layer:[[:space:]]*//p" "$here/imports.txt")
if [ -n "$modules" ]; then
  # shellcheck disable=SC2086  # one argument per module
  python3 "$here/bytecode.py" "$site" $modules
fi
