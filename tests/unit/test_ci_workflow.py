"""The CI workflow (.github/workflows/sglang-images.yml), read as GitHub would and its commands run in
process: the build jobs are the rows of `nox -s matrix -- --builds` (one per build runner, linux/arm64 cells with
the others under emulation or on an arm64 build runner), which together build the selection once; the verify jobs
are the rows of `nox -s matrix -- --github` for the cells they staged, each with its digest; every `matrix.<key>`
the workflow uses is in every row; each verify job checks its runner's CPU and pulls exactly its digest into its
own run and artifact; one promote job, one at a time, promotes and merges what the jobs upload.

The `${{ }}` expressions the workflow uses are property look-ups and `a || 'b'`; `evaluate` below
reads just those, so that a new kind of expression fails here instead of being guessed at."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from buildscripts import matrix, results
from buildscripts.commands import build as build_command
from buildscripts.commands import matrix as matrix_command
from buildscripts.commands import report as report_command
from buildscripts.commands import verify as verify_command
from buildscripts.results import ImageInfo
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import make_run
from tests.sbom_tree import PIP_CELL

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


def setup_env(only_input: str) -> dict[str, str]:
    context = {"inputs": {"only": only_input}, "github": GITHUB}
    return {k: evaluate(v, context) for k, v in JOBS["setup"]["env"].items()} | {"RUNNER_TEMP": "/tmp"}


def build_env(row: Mapping[str, Any]) -> dict[str, str]:
    context = {"matrix": row, "github": GITHUB}
    return {k: evaluate(v, context) for k, v in JOBS["build"]["env"].items()} | {"RUNNER_TEMP": "/tmp"}


def github_rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[str, list[dict[str, Any]]]:
    assert call(matrix_command, argv) == 0
    out = capsys.readouterr().out
    rows: list[dict[str, Any]] = json.loads(out)["include"]
    return out, rows


def staged_results(tmp_path: Path, cell_ids: list[str], run_id: str = "gh4242.1-build") -> Path:
    """A staging build's results.json in which `cell_ids` were staged (and the others were not)."""
    run = make_run(run_id=run_id, kinds=("verified", "expected-failure"))
    run.matrix_digest = results.matrix_digest(matrix.load(ROOT / "matrix.yaml").spec)
    image = ImageInfo(repository="registry.example/team/staging", digest="sha256:" + "5d" * 32,
                      id="sha256:" + "1d" * 32)
    run.cells = [results.CellResult(cell_id=c, image=image) for c in cell_ids]
    path = tmp_path / "runs" / run.run_id / "results.json"
    results.save(run, path)
    return path


def test_the_setup_job_names_the_build_runner_from_matrix_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    runner = step("setup", "Build runner from matrix.yaml")
    assert command(runner["run"], "nox -s matrix", {"RUNNER_TEMP": "/tmp"}) == ["--build-runner"]
    assert call(matrix_command, ["--build-runner"]) == 0
    labels = json.loads(capsys.readouterr().out)
    assert labels == list(matrix.load(ROOT / "matrix.yaml").spec.runners.build) and "gpu" not in labels
    assert JOBS["setup"]["outputs"]["build-runner"] == "${{ steps.runner.outputs.labels }}"
    assert JOBS["promote"]["runs-on"] == "${{ fromJSON(needs.setup.outputs.build-runner) }}"


@pytest.mark.parametrize(("only_input", "whole"), [
    ("", True),                       # push and pull_request: no input, every cell (arm64's included)
    ("sglang0.5.23-*-pip-*", False),  # a manual run's glob: its cells, amd64's and arm64's
])
def test_the_build_jobs_are_what_matrix_builds_prints_and_build_the_selection_once(
        capsys: pytest.CaptureFixture[str], only_input: str, whole: bool) -> None:
    default = matrix.load(ROOT / "matrix.yaml")
    setup = step("setup", "Build jobs from matrix.yaml")
    assert setup["id"] == "builds" and JOBS["setup"]["outputs"]["builds"] == "${{ steps.builds.outputs.builds }}"
    env = setup_env(only_input)
    assert env["ONLY"] == only_input
    argv = command(setup["run"], "nox -s matrix", env)
    assert argv == ["--builds"] and '"${only[@]}"' in setup["run"]   # `--only "$ONLY"` when given (tests/process)
    _, rows = github_rows(capsys, [*argv, *(["--only", only_input] if only_input else [])])
    job = JOBS["build"]
    assert job["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.setup.outputs.builds) }}"}
    assert job["runs-on"] == "${{ matrix.runs-on }}" and job["name"] == "${{ matrix.name }}"
    build = step("build", "Build once, check on the CPU, stage")
    built: list[str] = []
    for row in rows:
        env = build_env(row) | {"STAGING": "registry.example/team/staging"}
        assert env["RUN_ID"] == f"gh4242.1-{row['id']}"
        # the script passes each of the job's cells as `--only ID` ("${only[@]}": tests/process runs it)
        only = [w for cell in env["CELLS"].split() for w in ("--only", cell)]
        argv = command(build["run"], "nox -s build", env)
        opts = build_command.parse([*only, *argv, "--stage", env["STAGING"]], Workspace.at(ROOT), env)
        assert opts.run_id == env["RUN_ID"] and '"${stage[@]}"' in build["run"]
        built += [c.id for c in matrix.select(default.cells, opts.only)]
    wanted = matrix.select(default.cells, [] if whole else [only_input])
    assert built == [c.id for c in wanted]   # each cell once, in one of the jobs
    assert any(c.platform == "linux/arm64" for c in wanted)
    assert build["env"]["STAGING"] == "${{ vars.SGLANG_IMAGES_STAGING }}"


@pytest.mark.parametrize("only", [[], ["--only", "sglang0.5.23-*-pip-*"]])
def test_the_verify_jobs_are_what_matrix_github_prints_for_the_staged_cells_with_their_digest(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, only: list[str]) -> None:
    _, planned = github_rows(capsys, ["--github", *only])
    staged = [planned[0]["cell"], planned[-1]["cell"]]   # the last is the arm64 cell when the glob names it
    plan = step("plan", "Verify jobs of the staged digests")
    argv = command(plan["run"], "nox -s matrix", {"RUNNER_TEMP": "/tmp"})
    assert argv == ["--github"] and '"${staged[@]}"' in plan["run"]   # `--staged FILE` per build job
    download = step("plan", "Download the build jobs' results")
    assert f"{download['with']['path']}/*/results.json" in plan["run"]
    for row in github_rows(capsys, ["--builds", *only])[1]:   # every build job's artifact is downloaded
        name = evaluate(step("build", "Upload results and logs")["with"]["name"], {"matrix": row})
        assert fnmatch.fnmatchcase(name, download["with"]["pattern"])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        files = [staged_results(tmp_path, [staged[0]]), staged_results(tmp_path, [staged[1]], "gh4242.1-build-arm64")]
        from_workflow, rows = github_rows(capsys, [*argv, *(w for f in files for w in ("--staged", str(f)))])
    assert "\n" not in from_workflow.rstrip("\n")  # `echo "matrix=..." >> $GITHUB_OUTPUT` takes one line
    assert [{k: v for k, v in r.items() if k != "image"} for r in rows] == [r for r in planned if r["cell"] in staged]
    assert {r["image"] for r in rows} == {"registry.example/team/staging@sha256:" + "5d" * 32}
    assert JOBS["plan"]["outputs"]["matrix"] == "${{ steps.jobs.outputs.matrix }}" and plan["id"] == "jobs"
    assert JOBS["plan"]["needs"] == ["setup", "build"] and "!cancelled()" in JOBS["plan"]["if"]


def test_each_verify_job_pulls_exactly_its_digest_into_its_own_run_and_artifact(
        capsys: pytest.CaptureFixture[str]) -> None:
    job = JOBS["verify"]
    assert job["needs"] == "plan" and "needs.plan.outputs.count != '0'" in job["if"]
    assert job["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert job["runs-on"] == "${{ matrix.runs-on }}"
    _, rows = github_rows(capsys, ["--github", "--only", "sglang0.5.23-*-pip-*"])   # with the arm64 CPU-only job
    rows += [{**rows[0], "arch": "sm_100a"}, {**rows[0], "arch": "sm_120a"}]   # per-arch runner labels
    artifacts, run_ids = set(), set()
    for n, row in enumerate(rows):
        row = {**row, "image": f"registry.example/staging@sha256:{n:064x}"}
        context = {"matrix": row, "github": GITHUB, "env": {}}
        env = {k: evaluate(v, context) for k, v in job["env"].items()}
        argv = command(step("verify", "Verify the staged digest")["run"], "nox -s verify", env)
        parsed = verify_command.parse(argv, Workspace.at(ROOT), {})
        assert parsed.place.pull and parsed.place.image == row["image"] and parsed.run_id == env["RUN_ID"]
        upload = step("verify", "Upload results and logs")
        context["env"] = env
        assert upload["if"] == "always()"
        assert evaluate(upload["with"]["path"], context) == f"runs/{parsed.run_id}/"
        artifacts.add(evaluate(upload["with"]["name"], context))
        run_ids.add(parsed.run_id)
    assert len(artifacts) == len(run_ids) == len(rows)  # no job overwrites another's results
    assert not any(fnmatch.fnmatchcase(a, step("plan", "Download the build jobs' results")["with"]["pattern"])
                   for a in artifacts)


def test_each_verify_job_checks_its_runner_is_of_the_cells_platform_and_arch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before the pull: the runner's `uname -m` is the row's machine, and GPU 0 the row's arch (not for `any`
    or a CPU-only job); a GitHub-hosted runner (the arm64 CPU-only job's) gets nox, uv and skopeo first."""
    _, rows = github_rows(capsys, ["--github", "--only", "sglang0.5.23-*-pip-*"])
    assert {(r["platform"], r["machine"]) for r in rows} == {("linux/amd64", "x86_64"), ("linux/arm64", "aarch64")}
    job = JOBS["verify"]
    assert job["env"]["MACHINE"] == "${{ matrix.machine }}" and job["env"]["PLATFORM"] == "${{ matrix.platform }}"
    names = [s.get("name", s.get("uses")) for s in job["steps"]]
    cpu = names.index("Check the runner's CPU is the cell's platform")
    assert cpu < names.index("Check the GPU is the job's arch") < names.index("Verify the staged digest")
    assert '"$(uname -m)"' in job["steps"][cpu]["run"].replace("found=$(uname -m)", '"$(uname -m)"')
    assert step("verify", "Check the GPU is the job's arch")["if"] == "startsWith(matrix.arch, 'sm_')"
    hosted = [s for s in job["steps"] if "self-hosted" in s.get("if", "")]
    assert [s.get("uses", s.get("name")) for s in hosted] == ["actions/setup-python@v6",
                                                             "Install the tools on a GitHub-hosted runner"]
    assert all(s["if"] == "${{ !contains(matrix.runs-on, 'self-hosted') }}" for s in hosted)
    assert names.index("Install the tools on a GitHub-hosted runner") < names.index("Check the runner")


def matrix_keys(job: str) -> set[str]:
    """The `matrix.KEY`s a job uses, in `${{ }}` and in bare `if:` conditions alike."""
    def expressions(node: Any, key: object = None) -> list[str]:
        if isinstance(node, dict):
            return [e for k, v in node.items() for e in expressions(v, k)]
        if isinstance(node, list):
            return [e for v in node for e in expressions(v)]
        return [str(node)] if key == "if" else EXPR.findall(str(node))
    return {k for e in expressions(JOBS[job]) for k in re.findall(r"(?<![\w.-])matrix\.([\w-]+)", e)}


def test_every_matrix_key_the_workflow_uses_is_in_every_row_of_its_job(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    used = matrix_keys("verify")
    assert {"cell", "arch", "runs-on", "name", "image", "platform", "machine"} <= used
    _, planned = github_rows(capsys, ["--github", "--only", "sglang0.5.23-*-pip-*"])
    path = staged_results(tmp_path, [r["cell"] for r in planned])
    _, rows = github_rows(capsys, ["--github", "--staged", str(path)])
    assert {r["platform"] for r in rows} == {"linux/amd64", "linux/arm64"}
    for row in rows:
        assert used <= row.keys(), f"the verify job uses matrix keys {sorted(used - row.keys())} a row lacks"
    used = matrix_keys("build")
    assert {"id", "name", "runs-on", "cells"} <= used
    for row in github_rows(capsys, ["--builds", "--only", "sglang0.5.23-*-pip-*"])[1]:
        assert used <= row.keys(), f"the build job uses matrix keys {sorted(used - row.keys())} a row lacks"
    # the provenance job's rows are the plan job's own list of staged digests: a repository and a digest each
    assert matrix_keys("provenance") == {"name", "digest"}
    assert not {k for job in JOBS if job not in ("build", "verify", "provenance") for k in matrix_keys(job)}


def test_no_expression_is_pasted_into_a_shell_script() -> None:
    """Inputs and matrix values reach scripts through `env:` only (no script injection)."""
    for name, job in JOBS.items():
        for s in job["steps"]:
            assert "${{" not in s.get("run", ""), f"{name}: step {s.get('name')!r} pastes an expression"


def test_one_promote_job_at_a_time_after_every_job_and_never_for_pull_requests() -> None:
    job = JOBS["promote"]
    assert job["needs"] == ["setup", "build", "plan", "verify"] and job["if"].startswith("always()")
    assert job["concurrency"] == {"group": "sglang-images-promote", "cancel-in-progress": False}
    promote = step("promote", "Promote the tested digests")
    assert "github.event_name != 'pull_request'" in promote["if"]
    assert promote["env"]["REGISTRY"] == "${{ vars.SGLANG_IMAGES_REGISTRY }}"
    assert all(v.startswith("${{ secrets.") for k, v in promote["env"].items() if k.startswith("REGISTRY_"))
    # the key the verifiers sign with signs the snapshots of the verdicts too (trust/snapshot.py)
    assert promote["env"]["SGLANG_IMAGES_SIGNING_KEY"] == "${{ secrets.SGLANG_IMAGES_SIGNING_KEY }}"
    script = promote["run"]
    assert script.index('if [ -z "$REGISTRY" ]') < script.index("exit 0") < script.index("nox -s promote")
    argv = command(script, "nox -s promote", {"REGISTRY": "127.0.0.1:5000"})
    assert argv == ["--registry", "127.0.0.1:5000", "--results", "collected/*/results.json"]


def test_the_promote_job_merges_what_the_jobs_upload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    download = step("promote", "Download every job's results")
    for job in ("build", "verify"):
        assert step(job, "Upload results and logs")["with"]["name"].startswith(download["with"]["pattern"].rstrip("*"))
    # Two jobs' artifacts as download-artifact lays them out: one folder per artifact name, each
    # holding that job's run folder (results.json, its own report/ and the logs).
    collected = tmp_path / download["with"]["path"]
    for run_id, kind in (("gh1-a-sm_100a", "verified"), ("gh1-b-any", "expected-failure")):
        run = make_run(run_id=run_id, kinds=(kind,))
        results.save(run, collected / f"results-{run_id}" / "results.json")
        results.save(run, collected / f"results-{run_id}" / "report" / "results.json")
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    merge = step("promote", "Merge into one report")
    assert merge["if"] == "always()"
    argv = command(merge["run"], "nox -s report", {})
    assert call(report_command, argv, Workspace.at(tmp_path), {"GITHUB_STEP_SUMMARY": str(summary)}) == 0
    out = tmp_path / step("promote", "Upload the report")["with"]["path"]
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


def test_each_gpu_job_gets_the_build_jobs_cpu_records_and_the_promote_job_does_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    upload = step("build", "Upload the CPU records")
    download = step("verify", "Download the build jobs' CPU records")
    verify = step("verify", "Verify the staged digest")["run"]
    assert upload["if"] == "always()" and download["if"] == "matrix.arch != 'cpu'"   # a CPU-only job runs them
    assert f"{download['with']['path']}/*/results.json" in verify and '"${records[@]}"' in verify
    for row in github_rows(capsys, ["--builds"])[1]:
        env = build_env(row)
        name = evaluate(upload["with"]["name"], {"matrix": row})
        assert fnmatch.fnmatchcase(name, download["with"]["pattern"])
        assert not fnmatch.fnmatchcase(name, step("promote", "Download every job's results")["with"]["pattern"])
        assert evaluate(upload["with"]["path"], {"env": env}) == f"runs/{env['RUN_ID']}/results.json"
    names = [s.get("name") for s in JOBS["verify"]["steps"]]
    assert names.index("Download the build jobs' CPU records") < names.index("Verify the staged digest")


def test_the_provenance_job_attests_each_staged_platform_manifest_once_and_pushes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The plan job's list of staged digests (its inline script run here on two build jobs' results: a cell staged
    by both counts once) is the provenance job's matrix; GitHub's action pushes each attestation to the registry."""
    script = step("plan", "The staged platform manifests (for GitHub's own provenance)")["run"]
    inline = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    for artifact in ("results-build", "results-build-arm64"):
        found = staged_results(tmp_path / artifact, [PIP_CELL], run_id=f"gh1.1-{artifact}")
        (tmp_path / "staged" / artifact).mkdir(parents=True)
        found.rename(tmp_path / "staged" / artifact / "results.json")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    exec(compile(inline, "provenance-digests", "exec"), {})   # the step's own Python, in this process
    assert json.loads(capsys.readouterr().out) == {"include": [{"name": "registry.example/team/staging",
                                                    "digest": "sha256:" + "5d" * 32}]}
    job = JOBS["provenance"]
    assert job["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write",
                                  "packages": "write"}
    attest = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/attest-build-provenance@"))
    assert attest["with"] == {"subject-name": "${{ matrix.name }}", "subject-digest": "${{ matrix.digest }}",
                              "push-to-registry": True}
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.digests) }}"
