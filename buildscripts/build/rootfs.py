"""A base's root file system as a tar that comes out the same byte for byte: mmdebstrap, then a fixed-order pack.

Two builds from the same mirror state give the same tar, on this machine and on another:
- the clock is the mirror's: SOURCE_DATE_EPOCH is the Date of the suite's Release file (`release_epoch`), set for
  the whole bootstrap, so that what the packages' own scripts stamp (shadow's last-change day) and every file
  written at install time carry that date, not the build's;
- mmdebstrap removes what it knows to vary (dpkg's and apt's logs, ldconfig's aux-cache, machine-id); the host's
  /etc/resolv.conf and /etc/hostname, which it copies in as debootstrap does, are emptied (the engine and LXC
  write their own into a running container);
- the tar is packed as mmdebstrap packs its own: names sorted, mtimes clamped to the epoch, numeric owners,
  pax headers without atime and ctime.
Why the Release file's Date rather than the newest file of the installed packages: it is known before anything
is installed (the packages' scripts must see the epoch while they run), it names the very mirror state the
packages come from, and a stable suite's Release changes only when its packages do (a point release). The
Date is read once before the bootstrap and checked against the Release mmdebstrap fetched and verified: a
mirror that moved in between stops the build instead of stamping one state's date on another's packages.
"""

from __future__ import annotations

import email.utils
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import BaseBuildError

# What every base leaves out and every later install keeps out (dpkg's own filter): documentation, manuals and
# translations no server reads, as Debian's and Ubuntu's minimal container images do. Copyright files stay: the
# licences travel with the image.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/locale/*/LC_MESSAGES/*.mo",
)
DPKG_EXCLUDES_FILE = "etc/dpkg/dpkg.cfg.d/sglang-images-excludes"
INSTALL_HINT = "apt-get install mmdebstrap (`.ci/install-engine` does)"
# mmdebstrap's own tar options for its tar output (mmdebstrap 1.3, `@taropts`), with the mtime clamp to the epoch.
APT_HELPER = Path("/usr/lib/apt/apt-helper")
DATE = re.compile(r"[A-Za-z]{3}, \d{1,2} [A-Za-z]{3} \d{4} \d\d:\d\d:\d\d (?:UTC|GMT|[+-]\d{4})")
# Merged /usr the way debootstrap makes it (its symlinks, and the usr-is-merged package): without it, apt meets
# init-system-helpers' `usrmerge | usr-is-merged` and takes usrmerge, which brings perl (47 MB more, 9 packages).
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/maybe-merged-usr")
TAR_OPTIONS = ("--sort=name", "--clamp-mtime", "--numeric-owner", "--one-file-system", "--format=pax",
               "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime", "--xattrs")


@dataclass(frozen=True, kw_only=True)
class Bootstrap:
    """One root file system: Debian `suite` of `variant` with `packages` for `arch` (dpkg's name), from `mirror`."""

    suite: str
    variant: str
    packages: tuple[str, ...]
    arch: str
    mirror: str


def release_epoch(mirror: str, suite: str, *, log: Path) -> tuple[int, str]:
    """The Date of `suite`'s Release file on `mirror`, in seconds and as written: fetched with apt's own
    transport (the host's proxy and CA settings), as mmdebstrap will fetch it."""
    helper = APT_HELPER
    if not helper.is_file():
        msg = f"apt's {helper} is missing: the base's date is read from the mirror with it"
        raise BaseBuildError(msg, hint="install apt (the base is built on a Debian system)")
    with tempfile.TemporaryDirectory(prefix="sglang-release-") as tmp:
        target = Path(tmp) / "InRelease"
        done = proc.run([str(helper), "download-file", f"{mirror}/dists/{suite}/InRelease", str(target)],
                        log=log, timeout=300)
        text = target.read_text(errors="replace") if done.ok and target.is_file() else ""
    date = next((line.removeprefix("Date:").strip() for line in text.splitlines() if line.startswith("Date:")), "")
    if not date:
        msg = f"no Date in the Release file of {suite!r} on the host's mirror (apt-helper exited {done.returncode})"
        raise BaseBuildError(msg, hint=f"see {log}; check the suite's name and that apt reaches the mirror")
    # The Date goes into a shell hook (_mirror_unchanged): only an RFC 2822 date with its zone passes, nothing a
    # shell would read as more than words.
    try:
        when = email.utils.parsedate_to_datetime(date) if DATE.fullmatch(date) else None
    except (TypeError, ValueError):
        when = None
    if when is None or when.tzinfo is None:
        msg = f"the Release file of {suite!r} on the host's mirror has a Date that is not an RFC 2822 date: {date!r}"
        raise BaseBuildError(msg, hint="check the mirror the host's apt sources name")
    return int(when.timestamp()), date


def _mirror_unchanged(suite: str, date: str) -> str:
    """A customize hook that fails unless the Release mmdebstrap fetched (and verified) has the Date read before."""
    release = f'"$1"/var/lib/apt/lists/*_dists_{suite}_InRelease'
    return (f'grep -qxF "Date: {date}" {release} || {{ echo "the mirror moved during the build: its {suite} '
            f'Release is no longer of {date}; build again" >&2; exit 1; }}')


def build(what: Bootstrap, tarball: Path, *, log: Path) -> int:
    """`what` as the tar `tarball`, the same bytes from the same mirror state; returns the epoch its dates are."""
    mmdebstrap = proc.which("mmdebstrap", hint=INSTALL_HINT)
    if not MERGED_USR_HOOK.is_dir():
        msg = f"mmdebstrap's hook {MERGED_USR_HOOK} is missing: the base would get another package set"
        raise BaseBuildError(msg, hint="install Debian's mmdebstrap package (1.3 or later), which ships it")
    epoch, date = release_epoch(what.mirror, what.suite, log=log)
    root = tarball.parent / "rootfs"
    env = {"SOURCE_DATE_EPOCH": str(epoch)}
    done = proc.run(
        [mmdebstrap, "--mode=root", "--format=directory", f"--variant={what.variant}", f"--arch={what.arch}",
         f"--include={','.join(what.packages)}", f"--hook-dir={MERGED_USR_HOOK}",
         f"--customize-hook={_mirror_unchanged(what.suite, date)}",
         '--customize-hook=: > "$1"/etc/resolv.conf; : > "$1"/etc/hostname',
         what.suite, str(root), what.mirror],
        log=log, timeout=1800, env=env)
    if not done.ok:
        msg = f"mmdebstrap of {what.suite}/{what.variant} for {what.arch} failed (exit {done.returncode})"
        raise BaseBuildError(msg, hint=f"see {log}\n{done.tail(15)}")
    trim(root)
    packed = proc.run(["tar", "-C", str(root), f"--mtime=@{epoch}", *TAR_OPTIONS, "-cf", str(tarball), "."],
                      log=log, timeout=600)
    shutil.rmtree(root, ignore_errors=True)
    if not packed.ok:
        msg = f"packing the base's root file system failed: {packed.tail(5)}"
        raise BaseBuildError(msg)
    return epoch


def trim(root: Path) -> None:
    """Drop what only the bootstrap needed (apt's downloaded packages and lists) and what dpkg's excludes
    (DPKG_EXCLUDES) will keep out of every later install."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        target = root / sub
        if target.is_dir():
            for entry in target.iterdir():
                if entry.is_file() and entry.name not in ("lock",):
                    entry.unlink()
                elif entry.is_dir() and entry.name != "partial":
                    shutil.rmtree(entry)
    excludes = root / DPKG_EXCLUDES_FILE
    excludes.parent.mkdir(parents=True, exist_ok=True)
    excludes.write_text("# sglang-images: no documentation in the image (copyright files stay)\n"
                        + "\n".join(DPKG_EXCLUDES) + "\n")
    for folder in ("usr/share/man", "usr/share/info", "usr/share/groff", "usr/share/lintian"):
        for entry in (root / folder).glob("*"):
            _remove(entry)
    for translation in (root / "usr/share/locale").glob("*/LC_MESSAGES/*.mo"):
        translation.unlink()
    for entry in (root / "usr/share/doc").glob("*/*"):
        if entry.name != "copyright":
            _remove(entry)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
