"""The CI workflow (.github/workflows/sglang-images.yml), read as GitHub would and its commands run in
process: the setup job's matrix command is the one the workflow holds, its output equals
`nox -s matrix -- --github`, every `matrix.<key>` the workflow uses is in every row, each job's
build command selects exactly its cell, and the report job merges what the jobs upload.

The `${{ }}` expressions the workflow uses are property look-ups and `a || 'b'`; `evaluate` below
reads just those, so that a new kind of expression fails here instead of being guessed at."""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from buildscripts import matrix, pipeline, report, results
from buildscripts.matrix import listing
from buildscripts.workspace import Workspace
from tests.results_factory import make_run

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "sglang-images.yml"
TEXT = WORKFLOW.read_text()
SPEC: dict[Any, Any] = yaml.safe_load(TEXT)
JOBS: dict[str, dict[str, Any]] = SPEC["jobs"]
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
GITHUB = {"run_id": "4242", "run_attempt": "1", "event_name": "workflow_dispatch"}


def evaluate(text: str, context: Mapping[str, Any]) -> str:
    """`text` with each `${{ a.b }}` or `${{ a.b || 'literal' }}` replaced from `context`."""
    def operand(source: str) -> Any:
        source = source.strip()
        if source[:1] == source[-1:] == "'":
            return source[1:-1]
        value: Any = context
        for part in source.split("."):
            value = value[part]  # a KeyError here is a reference the workflow makes to nothing
        return value

    def one(match: re.Match[str]) -> str:
        operands = [operand(o) for o in match.group(1).split("||")]
        chosen = next((o for o in operands if o), operands[-1])
        return chosen if isinstance(chosen, str) else json.dumps(chosen)
    return EXPR.sub(one, text)


def step(job: str, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [s for s in JOBS[job]["steps"] if s.get("name") == name]
    assert len(found) == 1, f"job {job} has no single step named {name!r}"
    return found[0]


def command(script: str, prefix: str, env: Mapping[str, str]) -> list[str]:
    """The arguments after `prefix --` on the script's line that runs it, shell variables expanded
    and a redirection cut off, as bash would pass them."""
    lines = [line for line in script.splitlines() if line.strip().startswith(prefix + " --")]
    assert len(lines) == 1, f"no single line runs {prefix!r} in:\n{script}"
    words = shlex.split(lines[0])
    words = words[:words.index(">")] if ">" in words else words
    # A bash array of optional flags ("${scope[@]}") is the script's business: tests/process runs those.
    words = [w for w in words if not re.fullmatch(r"\$\{\w+\[@\]\}", w)]
    return [string.Template(w).substitute(env) for w in words[len(shlex.split(prefix)) + 1:]]


def setup_argv(only_input: str) -> list[str]:
    jobs_step = step("setup", "Job matrix from matrix.yaml")
    context = {"inputs": {"only": only_input}, "github": GITHUB}
    env = {k: evaluate(v, context) for k, v in jobs_step["env"].items()} | {"RUNNER_TEMP": "/tmp"}
    return command(jobs_step["run"], "nox -s matrix", env)


def github_rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[str, list[dict[str, Any]]]:
    assert listing.main(argv) == 0
    out = capsys.readouterr().out
    rows: list[dict[str, Any]] = json.loads(out)["include"]
    return out, rows


@pytest.mark.parametrize(("only_input", "same_as"), [
    ("", ["--github"]),  # push and pull_request: no input, every buildable cell
    ("sglang0.5.16-*", ["--github", "--only", "sglang0.5.16-*"]),  # a manual run's filter
])
def test_the_setup_job_emits_what_matrix_github_prints(
        capsys: pytest.CaptureFixture[str], only_input: str, same_as: list[str]) -> None:
    from_workflow, rows = github_rows(capsys, setup_argv(only_input))
    expected, _ = github_rows(capsys, same_as)
    assert from_workflow == expected and rows
    assert "\n" not in from_workflow.rstrip("\n")  # `echo "matrix=..." >> $GITHUB_OUTPUT` takes one line
    assert JOBS["setup"]["outputs"]["matrix"] == "${{ steps.jobs.outputs.matrix }}"
    assert step("setup", "Job matrix from matrix.yaml")["id"] == "jobs"


def test_the_cell_job_runs_one_job_per_row_on_its_runners() -> None:
    cell = JOBS["cell"]
    assert cell["needs"] == "setup"
    assert cell["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.setup.outputs.matrix) }}"}
    assert cell["runs-on"] == "${{ matrix.runs-on }}"


def test_every_matrix_key_the_workflow_uses_is_in_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    used = {key for expr in EXPR.findall(TEXT) for key in re.findall(r"(?<![\w.-])matrix\.([\w-]+)", expr)}
    assert {"cell", "arch", "runs-on", "name"} <= used
    _, rows = github_rows(capsys, setup_argv(""))
    for row in rows:
        assert used <= row.keys(), f"the workflow uses matrix keys {sorted(used - row.keys())} a row lacks"


def test_each_job_builds_exactly_its_cell_into_its_own_run_and_artifact(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = matrix.load(ROOT / "matrix.yaml")
    _, rows = github_rows(capsys, setup_argv(""))
    # Two arch jobs of one cell as well, as per-arch runner labels make them.
    rows += [{**rows[0], "arch": "sm_100a"}, {**rows[0], "arch": "sm_120a"}]
    artifacts, run_ids = set(), set()
    for row in rows:
        context = {"matrix": row, "github": GITHUB, "env": {}}
        env = {k: evaluate(v, context) for k, v in JOBS["cell"]["env"].items()}
        argv = command(step("cell", "Build and verify")["run"], "nox -s build", env)
        opts = pipeline.parse(argv, Workspace.at(ROOT), env)
        assert [c.id for c in matrix.select(spec.cells, opts.only)] == [row["cell"]]
        assert opts.run_id == env["RUN_ID"]
        upload = step("cell", "Upload results and logs")
        context["env"] = env
        assert upload["if"] == "always()"
        assert evaluate(upload["with"]["path"], context) == f"runs/{opts.run_id}/"
        artifacts.add(evaluate(upload["with"]["name"], context))
        run_ids.add(opts.run_id)
    assert len(artifacts) == len(run_ids) == len(rows)  # no job overwrites another's results


def test_no_expression_is_pasted_into_a_shell_script() -> None:
    """Inputs and matrix values reach scripts through `env:` only (no script injection)."""
    for name, job in JOBS.items():
        for s in job["steps"]:
            assert "${{" not in s.get("run", ""), f"{name}: step {s.get('name')!r} pastes an expression"


def test_promotion_runs_where_the_image_is_and_skips_without_a_registry() -> None:
    promote = step("cell", "Promote what earned good tags")
    assert "github.event_name != 'pull_request'" in promote["if"]
    assert promote["env"]["REGISTRY"] == "${{ vars.SGLANG_IMAGES_REGISTRY }}"
    assert all(v.startswith("${{ secrets.") for k, v in promote["env"].items() if k.startswith("REGISTRY_"))
    script = promote["run"]
    assert script.index('if [ -z "$REGISTRY" ]') < script.index("exit 0") < script.index("nox -s promote")
    argv = command(script, "nox -s promote", {"REGISTRY": "127.0.0.1:5000", "RUN_ID": "r1"})
    assert argv == ["--registry", "127.0.0.1:5000", "--results", "runs/r1/results.json"]


def test_the_report_job_merges_what_the_cell_jobs_upload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    job = JOBS["report"]
    assert job["needs"] == ["setup", "cell"] and job["if"].startswith("always()")
    download = step("report", "Download every job's results")
    upload_name = step("cell", "Upload results and logs")["with"]["name"]
    assert upload_name.startswith(download["with"]["pattern"].rstrip("*"))
    # Two jobs' artifacts as download-artifact lays them out: one folder per artifact name, each
    # holding that job's run folder (results.json, its own report/ and the logs).
    collected = tmp_path / download["with"]["path"]
    for run_id, kind in (("gh1-a-sm_100a", "verified"), ("gh1-b-any", "expected-failure")):
        run = make_run(run_id=run_id, kinds=(kind,))
        results.save(run, collected / f"results-{run_id}" / "results.json")
        results.save(run, collected / f"results-{run_id}" / "report" / "results.json")
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    argv = command(step("report", "Merge into one report")["run"], "nox -s report", {})
    assert report.main(argv, Workspace.at(tmp_path), {"GITHUB_STEP_SUMMARY": str(summary)}) == 0
    out = tmp_path / step("report", "Upload the report")["with"]["path"]
    merged = results.load(out / "results.json")
    assert merged.run_id == "merged:gh1-a-sm_100a+gh1-b-any"
    assert {c.verdict.value for c in merged.cells} == {"verified", "expected-failure"}
    assert {"compat.html", "junit.xml", "compat.md"} <= {p.name for p in out.iterdir()}
    assert "SGLang image compatibility" in summary.read_text()
    assert not (tmp_path / "README.md").exists()  # CI leaves the README table alone
    capsys.readouterr()


def test_manual_runs_take_a_glob_and_pushes_run_on_the_paths_that_matter() -> None:
    triggers = SPEC[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["workflow_dispatch"]["inputs"]["only"]["type"] == "string"
    for event in ("push", "pull_request"):
        assert {"matrix.yaml", "lockfiles/**", "images/**", "buildscripts/**"} <= set(triggers[event]["paths"])
    pinned = re.findall(r"uses: (\S+)", TEXT)
    assert pinned and all(re.fullmatch(r"actions/[\w-]+@v\d+", u) for u in pinned)
