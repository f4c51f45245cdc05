#!/usr/bin/env python3
"""Remove, from the shared libraries a layer installed, the GPU machine code no target arch can run.

    python3 prune_fatbins.py SITE_PACKAGES --archs sm_90a,sm_100a,sm_120a [--report FILE]

A CUDA library carries one cubin (SASS) per GPU arch it was built for in its `.nv_fatbin` section:
flash_ops of sgl_kernel 1.0 GB of which 0.54 GB is for sm_80/sm_86, libtorch_cuda 0.3 GB of which
0.13 GB is for sm_75-sm_86, and so on. In an image whose cells target sm_90a/sm_100a/sm_120a a cubin for
sm_80 or sm_103 can never load. fatbin_rewrite.py rewrites each library without those entries (keeping
every virtual address; how is told there), or says why its layout is left as it is; this script walks
the site folder, puts the rewrites in place and writes the report.

The pruner never makes a loadable library unloadable: the dynamic loader loads every library it is about
to replace before and after (the verifier's own load check, probe/pruned.py, with this Python), and a
library that loaded before and fails after fails the layer; so does one that fails otherwise after than
before, and one whose check could not run at all. One that did not load before either (an
extension built against another torch, say) is no fault of the rewrite: the report records its error,
and the verifier judges it (probe/extensions.py). Standard library only: it runs inside the image build.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

# The probe's fatbin reader and load check, and this script's rewriter: copied beside this file into
# /opt/images in the image; in the project the first two live in buildscripts/probe.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, "..", "..", "buildscripts", "probe")]
import fatbin  # noqa: E402
import pruned  # noqa: E402
from fatbin_rewrite import Unsupported, check, plan  # noqa: E402


def prepare(path: str, targets: list[str]) -> tuple[str, dict[str, int], int] | None:
    """Write the rewrite of one library beside it (PATH.pruning): (that file, bytes dropped per arch, bytes
    saved), or None when nothing changes. The original stays in place until `main` has loaded it."""
    with open(path, "rb") as fh:
        data = fh.read()
    result = plan(data, targets)
    if result is None:
        return None
    check(result, targets)
    tmp = path + ".pruning"
    with open(tmp, "wb") as fh:
        fh.write(result.data)
    os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    return tmp, dict(sorted(result.dropped.items())), result.saved


def load_failures(paths: list[str]) -> dict[str, str]:
    """Path -> the loader's error, for each of `paths` that does not load (in a fresh process that imported
    torch first, as a server does). A dependency absent from the image, or the GPU driver, is no failure:
    the loader names those only after it has mapped the library itself. When the process dies (a broken
    file can crash the loader), each library is loaded in a process of its own, so the one is named."""
    if not paths:
        return {}
    done = _load(paths)
    if isinstance(done, dict):
        return done
    if len(paths) == 1:
        return {paths[0]: DIED + done}
    return {path: why for one in paths for path, why in load_failures([one]).items()}


DIED = "the load check died: "   # the prefix of a library's entry when its own check process died


def _load(paths: list[str]) -> dict[str, str] | str:
    """The failures of one load check, or why the check process died (a crash, a hang, garbled output)."""
    try:
        done = subprocess.run([sys.executable, "-c", pruned.dlopen_snippet(paths)], capture_output=True,
                              text=True, check=False, timeout=1800)
    except subprocess.TimeoutExpired:
        return "no answer within 1800 s"
    for line in done.stdout.splitlines():
        if line.startswith("@@pruned-load "):
            try:
                failed: dict[str, str] = json.loads(line[len("@@pruned-load "):])["failed"]
            except (ValueError, KeyError, TypeError):
                break
            return failed
    return f"exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}".rstrip(": \n")


def unvouched(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Path -> why, for each rewrite nothing can vouch for: a library that loaded before and does not now, one
    that failed before and fails otherwise now (the rewrite damaged it further), and one whose check could not
    run before (nobody could load it, so nobody can say the rewrite left it whole)."""
    broken = {path: why for path, why in after.items() if before.get(path) != why}
    broken |= {path: why for path, why in before.items() if why.startswith(DIED)}
    return broken


@dataclass
class Pass:
    """What one walk of the site folder did: the report's two halves, and the rewrites not yet in place."""
    site: str
    pruned: dict[str, dict[str, object]] = field(default_factory=dict)   # relative path -> what left it
    kept: dict[str, str] = field(default_factory=dict)                   # relative path -> why it was left
    rewrites: dict[str, str] = field(default_factory=dict)               # library -> its rewrite (PATH.pruning)
    total: int = 0                                                       # bytes saved in all


def walk(site: str, targets: list[str], done: Pass) -> None:
    """Write the rewrite of every shared object under `site` beside it (symbolic links are their targets'
    business), recording each in `done` as it goes, so that `main` can remove them after a failure part way."""
    for path in fatbin.shared_objects(site):
        if os.path.islink(path):
            continue
        rel = os.path.relpath(path, site)
        try:
            prepared = prepare(path, targets)
        except Unsupported as why:
            done.kept[rel] = str(why)
            print(f"fatbins: kept {rel}: {why}")
            continue
        if prepared:
            done.rewrites[path], dropped, saved = prepared
            done.pruned[rel] = {"dropped": dropped, "saved_bytes": saved}
            done.total += saved
            print(f"fatbins: {rel}: removed cubins for {', '.join(dropped)} ({saved >> 20} MiB)")


def replace_checked(done: Pass) -> tuple[dict[str, str], dict[str, str]]:
    """Put every rewrite in place, loading each library before and after: (failures before, failures after)."""
    before = load_failures(sorted(done.rewrites))
    for path, tmp in done.rewrites.items():
        os.replace(tmp, path)
    return before, load_failures(sorted(done.rewrites))


def judge(done: Pass, before: dict[str, str], after: dict[str, str]) -> bool:
    """Say which rewrites cannot be vouched for (on stderr), and record in the report each library that did not
    load before the rewrite either. Whether every rewrite can be vouched for."""
    broken = unvouched(before, after)
    for path, why in sorted(broken.items()):
        was = before.get(path)
        then = "it loaded before" if was is None else f"before: {was[-200:]}"
        print(f"fatbins: the rewrite of {os.path.relpath(path, done.site)} cannot be vouched for ({then}): {why}",
              file=sys.stderr)
    for path, why in sorted(set(before.items()) - set(broken.items())):
        rel = os.path.relpath(path, done.site)
        done.pruned[rel]["did_not_load_before"] = why[-300:]
        print(f"fatbins: {rel} did not load before the rewrite either: {why[-200:]}")
    return not broken


@dataclass(frozen=True)
class Options:
    site: str
    targets: list[str]
    report: str | None    # where the JSON report goes; none when not asked for


def options(argv: list[str] | None) -> Options:
    """The command line, checked once; an unknown arch is a usage error."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site")
    parser.add_argument("--archs", required=True, help="comma-separated target archs, e.g. sm_90a,sm_100a")
    parser.add_argument("--report", help="JSON file listing what was removed and what was kept, and why")
    args = parser.parse_args(argv)
    targets = [a.strip() for a in args.archs.split(",") if a.strip()]
    for t in targets:
        try:
            fatbin.parse_arch(t)
        except ValueError as why:
            parser.error(str(why))
    return Options(site=args.site, targets=targets, report=args.report)


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    done = Pass(opts.site)
    try:
        walk(opts.site, opts.targets, done)
        before, after = replace_checked(done)
    finally:   # a rewrite not put in place (an error on the way) leaves no PATH.pruning behind
        for tmp in done.rewrites.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
    vouched = judge(done, before, after)
    print(f"fatbins: {done.total >> 20} MiB removed in all")
    if opts.report:
        os.makedirs(os.path.dirname(opts.report) or ".", exist_ok=True)
        with open(opts.report, "w") as fh:
            json.dump({"site": os.path.abspath(opts.site), "archs": opts.targets, "pruned": done.pruned,
                       "kept": done.kept}, fh, indent=1, sort_keys=True)
    return 0 if vouched else 1


if __name__ == "__main__":
    sys.exit(main())
