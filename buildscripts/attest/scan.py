"""What an image's file system lists of itself: Debian packages, Python distributions, the baked kernel caches.

Standard library only, and no import of anything in the image: it runs inside the image as
`python3 -I -S -c SOURCE /` (isolated, no `site`, so no `.pth` file or `sitecustomize` of the image runs before
it), with no network, and prints one JSON document. The same `scan` reads an unpacked tree on the host (tests).
It reads files only: names, versions and the warm report, each bounded, never a file's code. What it prints is
the image's word about itself; the host reads it strictly (inventory.py) and says so (docs/trust.md).
"""

from __future__ import annotations

import glob
import json
import os
import sys

DPKG_STATUS = "var/lib/dpkg/status"
WARM_REPORT = "etc/sglang-images/warm.json"
TOOLKIT_LOCK = "opt/locks/toolkit.txt"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
# Where a Python distribution of these images can be: the venv, Debian's Python, a local prefix.
SITE_GLOBS = ("opt/venv/lib/python3*/site-packages", "usr/lib/python3/dist-packages",
              "usr/lib/python3*/site-packages", "usr/local/lib/python3*/site-packages",
              "usr/local/lib/python3*/dist-packages")
MOST_BYTES = 64 << 20     # no file of these is larger; a larger one is not read
METADATA_HEAD = 64 << 10  # Name and Version are in the first lines of METADATA


def _read(path: str, most: int = MOST_BYTES) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(most).decode("utf-8", "replace")
    except OSError:
        return None


def debian_packages(root: str) -> list[dict[str, str]]:
    """Every package dpkg lists as installed: name, version, arch."""
    text = _read(os.path.join(root, DPKG_STATUS)) or ""
    found = []
    for paragraph in text.split("\n\n"):
        fields = {}
        for line in paragraph.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            found.append({"name": fields["Package"], "version": fields.get("Version", ""),
                          "arch": fields.get("Architecture", "")})
    return found


def python_distributions(root: str) -> list[dict[str, str]]:
    """Every `*.dist-info` of the site folders: its METADATA's Name and Version, and the folder it is in."""
    found = []
    for pattern in SITE_GLOBS:
        for site in sorted(glob.glob(os.path.join(root, pattern))):
            for info in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
                fields = {}
                for line in (_read(os.path.join(info, "METADATA"), METADATA_HEAD) or "").splitlines():
                    if not line.strip():
                        break   # the headers end at the first empty line
                    key, _, value = line.partition(":")
                    if key in ("Name", "Version") and key not in fields:
                        fields[key] = value.strip()
                if fields.get("Name") and fields.get("Version"):
                    found.append({"name": fields["Name"], "version": fields["Version"],
                                  "site": "/" + os.path.relpath(site, root)})
    return found


def warm_report(root: str) -> object:
    text = _read(os.path.join(root, WARM_REPORT))
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def os_release(root: str) -> dict[str, str]:
    for name in OS_RELEASE:
        text = _read(os.path.join(root, name))
        if text:
            pairs = (line.partition("=") for line in text.splitlines() if "=" in line)
            return {k.strip(): v.strip().strip('"') for k, _, v in pairs if k.strip() in ("ID", "VERSION_ID",
                                                                                          "VERSION_CODENAME")}
    return {}


def scan(root: str) -> dict[str, object]:
    return {"debian": debian_packages(root), "python": python_distributions(root), "warm": warm_report(root),
            "os": os_release(root), "toolkit_lock": os.path.exists(os.path.join(root, TOOLKIT_LOCK))}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(scan(sys.argv[1] if len(sys.argv) > 1 else "/")) + "\n")
