#!/bin/sh
# Remove from site-packages what a cell can never load (images/lean/recipe.txt), in the layer that
# installed it:  lean.sh FLAVOUR RECIPE. Prints what each line removed, so the build log shows the
# recipe at work. LEAN_SITE names another folder than the interpreter's site-packages (tests).
set -eu
flavour=$1 recipe=$2   # flavour: the torch lane's CUDA flavour (cu128, cu130)
site=${LEAN_SITE:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')}
cd "$site"
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$recipe" | while read -r first rest; do
  case $first in
    cu*:) [ "$first" = "$flavour:" ] || continue; pattern=$rest ;;
    *) pattern=$first ;;
  esac
  # Unquoted on purpose: the glob expands here; a pattern that matches nothing stays literal.
  for path in $pattern; do
    [ -e "$path" ] || continue
    kb=$(du -sk "$path" | cut -f1)
    rm -rf "$path"
    echo "lean: removed $path (${kb} KiB)"
  done
done
