"""A real LXC container from an OCI archive, as the tests need it: LXC's `oci` template unpacks the archive
(skopeo + umoci), the config gets no network (no bridge on test machines) and the image's own init (the
oci template only turns the image's command into lxc.execute.cmd), it is started, and always destroyed."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LXC_PATH = Path("/var/lib/lxc")
TEMPLATE_CACHE = Path("/var/cache/lxc")
INIT = "/usr/local/sbin/sglang-images-init"


def lxc(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def state(name: str) -> str:
    return lxc("lxc-info", "-n", name, "-s", "-H", check=False).stdout.strip()


@contextmanager
def container(archive: Path, *, ref: str = "latest", start: bool = True,
              drop_environment: bool = False) -> Iterator[str]:
    """A container named sgi-test-XXXX made from `archive`; `drop_environment` removes the image's
    lxc.environment lines, as Proxmox keeps the image's Env for the init only."""
    name = f"sgi-test-{uuid.uuid4().hex[:8]}"
    cached_before = set(TEMPLATE_CACHE.rglob("*"))
    try:
        started = time.monotonic()
        lxc("lxc-create", "-n", name, "-t", "oci", "--", "--url", f"oci-archive:{archive}:{ref}", timeout=1800)
        created = time.monotonic() - started
        _drop_new_cache(cached_before)  # the rootfs is unpacked: the template's copy of the blobs is not needed
        config = LXC_PATH / name / "config"
        lines = [ln for ln in config.read_text().splitlines()
                 if not ln.startswith("lxc.net.0.") and not (drop_environment and ln.startswith("lxc.environment"))]
        lines += ["lxc.net.0.type = empty", f"lxc.init.cmd = {INIT}"]
        config.write_text("\n".join(lines) + "\n")
        if start:
            lxc("lxc-start", "-n", name, "-d")
            lxc("lxc-wait", "-n", name, "-s", "RUNNING", "-t", "30")
            time.sleep(0.5)  # an init that dies at once still looks RUNNING for a moment
            assert state(name) == "RUNNING", f"{name} did not stay up: {lxc('lxc-info', '-n', name, check=False)}"
        print(f"{name}: created in {created:.1f}s from {archive.name}")
        yield name
    finally:
        lxc("lxc-stop", "-k", "-n", name, check=False)
        lxc("lxc-destroy", "-n", name, check=False)
        _drop_new_cache(cached_before)


def _drop_new_cache(before: set[Path]) -> None:
    """Remove what the oci template added to its blob cache in this test (and nothing else)."""
    for made in sorted(set(TEMPLATE_CACHE.rglob("*")) - before, reverse=True):
        if made.is_dir():
            shutil.rmtree(made, ignore_errors=True)
        else:
            made.unlink(missing_ok=True)


def attach(name: str, *argv: str, clear_env: bool = True) -> str:
    flags = ["--clear-env"] if clear_env else []
    return lxc("lxc-attach", "-n", name, *flags, "--", *argv).stdout
