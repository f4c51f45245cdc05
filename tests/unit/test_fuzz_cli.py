"""Property: any argument list for the commands that need no engine (`matrix`, `lock --check`, `report`) and
for the argument checks of `verify`, `tag` and `export` ends in a result, one of the project's errors, or an
argparse usage message -- never a traceback, never a run over 5 s, nothing written outside the temporary
workspace. Where a command would reach Docker or start a process, the test stops it there ("outside")."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildscripts import results
from buildscripts.cli import Command
from buildscripts.commands import export, lock, matrix, report, tag, verify
from buildscripts.workspace import Workspace
from tests.results_factory import make_run
from tests.unit.fuzzing import FUZZ, HOSTILE, TEXT, confined, examples, make_workspace, run

EXAMPLES_PER_COMMAND = examples(100)  # six commands: 600 argument lists (all of them)

# Files the arguments may name, made in the workspace (all relative: the workspace is the working directory).
FILES = ["matrix.yaml", "lockfiles", "lockfiles/index.json", "README.md", "results.json", "binary.json",
         "deep.json", "fifo", "missing.yaml", "/dev/null", "runs/*/results.json", "**/results.json", "nul\x00.yaml"]
PATHS = st.one_of(st.sampled_from(FILES), TEXT)
# Where a command may write: always below the workspace (`..` and absolute paths would leave it).
OUTS = st.one_of(st.sampled_from(["out", "reports", "README.md", "fifo", "/dev/null", "results.json", "out/\x00"]),
                 TEXT.map(lambda t: "out/" + t.replace("..", "_").replace("\x00", "")))
GLOBS = st.one_of(st.sampled_from(["*", "sglang0.5.16-*", "[/]", "[", "*-pip-*", "nothing-*", "**"]), TEXT)
NUMBERS = st.one_of(st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e309", "9" * 5000, "0x10", " 5"]),
                    st.integers().map(str), st.floats().map(str), TEXT)
STAGES = st.one_of(st.sampled_from(["import", "import,facts", "", ",", "server,nope", "IMPORT", "import\n"]), TEXT)
ARCHS = st.one_of(st.sampled_from(["sm_90a", "sm_90a,sm_100a", "sm_999", "sm_٩٠a", "sm_90a\n", ",", ""]), TEXT)

# Per command: its options, each with the strategy of its value (None: a switch).
OPTIONS: dict[str, dict[str, st.SearchStrategy[str] | None]] = {
    "matrix": {"--matrix": PATHS, "--only": GLOBS, "--skip": GLOBS, "--all": None, "--json": None, "-h": None},
    "lock": {"--matrix": PATHS, "--only": GLOBS, "--skip": GLOBS, "--upgrade": None},
    "report": {"--results": PATHS, "--out": OUTS, "--readme": OUTS, "--update-readme": None, "--no-readme": None},
    "verify": {"--host": None, "--lxc": TEXT, "--lxc-name": TEXT, "--python": TEXT, "--archs": ARCHS,
               "--lane-cuda": st.one_of(st.sampled_from(["13.0", "12.8", "13", "x.y"]), TEXT), "--stages": STAGES,
               "--stage-timeout": NUMBERS, "--cell-id": st.one_of(st.sampled_from(HOSTILE), TEXT),
               "--run-id": st.one_of(st.sampled_from(["../../x", "ok-run", "/tmp/x", ".."]), TEXT),
               "--out": OUTS, "--profile": st.one_of(st.sampled_from(["default", "piecewise", "[/]"]), TEXT),
               "--gpu": NUMBERS},
    "tag": {"--results": PATHS, "--matrix": PATHS, "--only": GLOBS},
    "export": {"--out": OUTS, "--name": TEXT, "--force": None},
}
COMMANDS: dict[str, Command] = {"matrix": matrix, "lock": lock, "report": report, "verify": verify, "tag": tag,
                                "export": export}
ALWAYS = {"lock": ["--check"]}  # lock without --check resolves (a process, stopped anyway)


@st.composite
def argv_for(draw: st.DrawFn, command: str) -> list[str]:
    options = OPTIONS[command]
    argv = list(ALWAYS.get(command, []))
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from(sorted(options)))
        value = options[flag]
        argv += [flag] if value is None else [flag, draw(value)]
    if draw(st.integers(0, 3)) == 0:  # a stray word or flag, at a random place
        argv.insert(draw(st.integers(0, len(argv))), draw(st.one_of(TEXT, st.sampled_from(["--", "-x", "--all="]))))
    if command in ("verify", "export") and draw(st.booleans()):
        argv.insert(0, draw(st.one_of(st.sampled_from(["some-image", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]),
                                      TEXT)))
    return argv


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = make_workspace(tmp_path_factory.mktemp("fuzz-cli"))
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), ws.root / "results.json")
    results.save(make_run("run-b", "2025-01-02T00:00:00+00:00"), ws.runs / "b" / "results.json")
    (ws.root / "binary.json").write_bytes(b"\xff\xfe\x00\x01")
    (ws.root / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    os.mkfifo(ws.root / "fifo")
    return ws


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_any_argument_list_ends_cleanly(command: str, ws: Workspace) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ.__class__(FUZZ, max_examples=EXAMPLES_PER_COMMAND)
    @given(argv_for(command))
    def one(argv: list[str]) -> None:
        outcomes[run(COMMANDS[command], argv, ws)] += 1

    with confined(ws.root):
        one()
    assert sum(outcomes.values()) >= EXAMPLES_PER_COMMAND
    assert len(outcomes) >= 2, outcomes  # the lists reach past argparse (into the commands' checks)
