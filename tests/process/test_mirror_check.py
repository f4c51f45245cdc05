"""The check mmdebstrap runs before it packs a base: the mirror's Release still has the Date the base's
SOURCE_DATE_EPOCH was read from (build/rootfs.py), run by a real shell as mmdebstrap runs its hooks."""

from __future__ import annotations

import subprocess
from pathlib import Path

from buildscripts.build import rootfs


def test_the_mirror_check_passes_the_date_read_before_and_stops_another(tmp_path: Path) -> None:
    lists = tmp_path / "var/lib/apt/lists"
    lists.mkdir(parents=True)
    release = lists / "mirror.example_debian_dists_bookworm_InRelease"
    hook = rootfs._mirror_unchanged("bookworm", "Sat, 11 Jul 2026 10:16:37 UTC")
    release.write_text("Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n")
    assert subprocess.run(["sh", "-c", hook, "hook", str(tmp_path)], check=False).returncode == 0
    release.write_text("Origin: Debian\nDate: Sat, 12 Sep 2026 09:00:00 UTC\n")
    moved = subprocess.run(["sh", "-c", hook, "hook", str(tmp_path)], capture_output=True, text=True, check=False)
    assert moved.returncode == 1 and "the mirror moved during the build" in moved.stderr
