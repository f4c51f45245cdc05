#!/bin/sh
# Remove from site-packages what a cell can never load (images/lean/recipe.txt), in the layer that
# installed it. Prints what each line removed, so the build log shows the recipe at work.
set -eu
recipe=$1
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cd "$site"
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$recipe" | while read -r pattern; do
  # Unquoted on purpose: the glob expands here; a pattern that matches nothing stays literal.
  for path in $pattern; do
    [ -e "$path" ] || continue
    kb=$(du -sk "$path" | cut -f1)
    rm -rf "$path"
    echo "lean: removed $path (${kb} KiB)"
  done
done
