"""`python -m buildscripts report` (what `nox -s report` runs): every format under `reports/` and the console
summary, from the stored results of every run and runner, weighed as the gate weighs them (report/__init__.py);
the README's compatibility table only when asked (`--update-readme`), and then from the committed evidence unless
--results names the files."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments, log
from ..errors import ConfigError, ResultsError
from ..workspace import Workspace

ABOUT = "render console/Markdown/HTML/JUnit reports from saved results"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    out: Path                               # every report format goes there (default: reports/)
    results: tuple[str, ...] = ()           # globs (default: runs/ and the evidence; the evidence alone for the README)
    readme: Path | None = None              # the README whose table is rewritten; None leaves it alone
    matrix: Path | None = None              # the matrix.yaml records are weighed against (default: the project's)
    trust_keys: tuple[Path, ...] = ()
    verbose: bool = False


def _parser(ws: Workspace) -> argparse.ArgumentParser:
    from ..report import EVIDENCE_RESULTS

    parser = argparse.ArgumentParser(prog="report", description="render reports from saved results")
    arguments.add_results(parser, default="runs/*/results.json and " + " and ".join(EVIDENCE_RESULTS)
                                          + ", merged; with --update-readme: the evidence only")
    parser.add_argument("--out", type=arguments.path_argument, default=ws.root / "reports",
                        help="output folder (default: reports/)")
    parser.add_argument("--update-readme", action="store_true",
                        help="also rewrite the README's compatibility table (from the committed evidence "
                             "unless --results is given)")
    parser.add_argument("--readme", type=arguments.path_argument, default=None, metavar="PATH",
                        help="the README --update-readme rewrites (default: README.md); naming one implies "
                             "--update-readme")
    parser.add_argument("--no-readme", action="store_true",
                        help="leave the README alone (the default; refused with --update-readme or --readme)")
    arguments.add_matrix(parser, None, help="the matrix.yaml the results must come from (default: matrix.yaml)")
    parser.add_argument("--trust-key", action="append", default=[], type=arguments.path_argument, metavar="PUB",
                        help="also trust records sealed by this public key (keys/*.pub, this machine's verifier key "
                             "and evidence/keys/*.pub are trusted always)")
    parser.add_argument("--verbose", action="store_true", help="print every reason and warning in full")
    return parser


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    parser = _parser(ws)
    args = parser.parse_args(list(argv))
    update_readme = args.update_readme or args.readme is not None
    if update_readme and args.no_readme:
        parser.error("--no-readme contradicts --update-readme / --readme: pass one or the other")
    return Options(ws=ws, env=env, out=args.out, results=tuple(args.results),
                   readme=(args.readme or ws.root / "README.md") if update_readme else None, matrix=args.matrix,
                   trust_keys=tuple(args.trust_key), verbose=args.verbose)


def run(options: Options) -> int:
    from ..report import (
        check_destinations,
        console,
        default_results,
        found,
        github,
        readme_results,
        render_all,
        weigh,
        weighed_from,
        write_readme,
    )

    ws, env, readme = options.ws, options.env, options.readme
    defaults = readme_results(ws) if readme else default_results(ws)
    check_destinations(options.out, readme)
    github.check(env)
    paths, skipped = ((arguments.results_files(options.results), []) if options.results
                      else found.results(defaults))
    for line in skipped:
        log.warn(line)
    if not paths:
        msg = "no results files found (looked for " + ", ".join(defaults) + ")"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results GLOB")
    matrix_path: Path | None = options.matrix or ws.matrix
    if options.matrix is None and not ws.matrix.is_file():
        log.warn(f"no {ws.matrix}: every record is shown as stale, none as verified (pass --matrix PATH)")
        matrix_path = None
    # The README's table from the evidence trusts only committed keys: it renders the same on every machine
    keys = (weigh.committed_keys(ws.root, options.trust_keys) if readme and not options.results
            else weigh.report_keys(ws.root, env, options.trust_keys))
    weighed = weighed_from(paths, matrix_path, keys)
    try:
        written = render_all(weighed, options.out, env)
    except OSError as exc:  # e.g. a parent of --out is a file, or not writable
        msg = f"cannot write the reports into {options.out}: {exc.strerror} ({exc.filename})"
        raise ConfigError(msg, hint="pass --out DIR of a folder you can write") from None
    if readme is not None:
        written |= write_readme(readme, weighed)
    console.summary(weighed, build=False, verbose=options.verbose)
    for kind, path in written.items():
        log.info(f"{kind}: {path}")
    return 0
