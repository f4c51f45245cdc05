"""The biggest folders of site-packages, bytes on disk, largest first (the nvidia/* wheels one by one).

Standard library only and self-contained: the facts stage imports it inside the image, and the size
report (`report/sizes.py`) runs this very file in a container of an image (`python3 -c SOURCE TOP`).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from typing import Dict, List, Tuple


def largest_packages(top: int = 8) -> List[Tuple[str, int]]:
    site = sysconfig.get_paths()["purelib"]
    sizes: Dict[str, int] = {}
    for entry in (os.scandir(site) if os.path.isdir(site) else []):
        if not entry.is_dir(follow_symlinks=False) or entry.name.endswith((".dist-info", "__pycache__")):
            continue
        parts = [e for e in os.scandir(entry.path) if e.is_dir(follow_symlinks=False)] \
            if entry.name == "nvidia" else [entry]
        for part in parts:
            total = 0
            for root, _dirs, files in os.walk(part.path):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(root, name)).st_blocks * 512
                    except OSError:
                        continue
            sizes[os.path.relpath(part.path, site)] = total
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:top]


if __name__ == "__main__":
    print(json.dumps(largest_packages(int(sys.argv[1]) if len(sys.argv) > 1 else 8)))
