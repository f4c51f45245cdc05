"""The CI job matrix: runner labels in matrix.yaml (strictly checked) and `nox -s matrix -- --github`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from buildscripts import matrix
from buildscripts.errors import ConfigError, SelectionError
from buildscripts.matrix import listing

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "matrix.yaml").read_text()
DEFAULT_LABELS = ["self-hosted", "linux", "x64", "gpu"]
B200 = [*DEFAULT_LABELS, "b200"]
RTX = [*DEFAULT_LABELS, "rtx-pro-6000"]


def with_runners(tmp_path: Path, runners: object) -> Path:
    data = yaml.safe_load(DEFAULT)
    data["runners"] = runners
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def github(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, list[dict[str, object]]]:
    assert listing.main(["--github", *argv]) == 0
    out = capsys.readouterr().out
    rows: list[dict[str, object]] = json.loads(out)["include"]
    return out, rows


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        matrix.load(path)
    return str(exc.value)


def test_default_runners_give_one_job_per_buildable_cell_on_any_gpu_runner(
        capsys: pytest.CaptureFixture[str]) -> None:
    out, rows = github(capsys)
    assert out.count("\n") == 1 and out.endswith("}\n")  # one line: it goes to $GITHUB_OUTPUT as matrix=...
    # an opt-in platform's cells get a job only when selected by name (matrix/cells.py)
    buildable = [c.id for c in matrix.load(ROOT / "matrix.yaml").buildable() if c.opt_in is None]
    assert [r["cell"] for r in rows] == buildable
    for row in rows:
        assert row == {"cell": row["cell"], "arch": "any", "runs-on": DEFAULT_LABELS, "name": row["cell"]}


def test_per_arch_labels_give_one_job_per_cell_and_arch_on_that_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Written in another order than `archs:`: jobs still follow `archs:` (sm_100a before sm_120a).
    path = with_runners(tmp_path, {"default": DEFAULT_LABELS, "archs": {"sm_120a": RTX, "sm_100a": B200}})
    _, rows = github(capsys, "--matrix", str(path), "--only", "sglang0.5.16-*")
    cells = ["sglang0.5.16-torch2.11.0-cu130-none-bookworm", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    assert [(r["cell"], r["arch"], r["runs-on"]) for r in rows] == [
        (cells[0], "sm_100a", B200), (cells[0], "sm_120a", RTX),
        (cells[1], "sm_100a", B200), (cells[1], "sm_120a", RTX),
    ]
    assert rows[0]["name"] == f"{cells[0]} on sm_100a"
    assert len({(r["cell"], r["arch"]) for r in rows}) == len(rows)  # artifact names stay apart


def test_only_and_skip_select_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows = github(capsys, "--only", "sglang0.5.16-*", "--skip", "*-none-*")
    assert [r["cell"] for r in rows] == ["sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    with pytest.raises(SelectionError, match="matches no buildable cell"):
        listing.main(["--github", "--only", "sglang9.9-*"])


def test_github_output_lists_buildable_cells_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        listing.main(["--github", "--all"])
    assert exc.value.code == 2
    assert "drop --all" in capsys.readouterr().err


def test_runners_default_to_a_linux_gpu_runner_when_the_section_is_absent() -> None:
    data = yaml.safe_load(DEFAULT)
    del data["runners"]
    spec = matrix.parse(yaml.safe_dump(data), Path("matrix.yaml")).spec
    assert list(spec.runners.default) == DEFAULT_LABELS and spec.runners.archs == {}


def test_a_runner_arch_that_is_not_in_archs_is_an_error_with_the_fix(tmp_path: Path) -> None:
    message = error_of(with_runners(tmp_path, {"archs": {"sm_100": B200}}))
    assert "unknown arch 'sm_100' under runners.archs" in message
    assert "did you mean 'sm_100a'?" in message
    assert "sm_90a, sm_100a, sm_120a" in message and "add the arch there" in message
    assert "line " in message  # points at the runners section of the file


def test_an_unknown_key_in_runners_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    message = error_of(with_runners(tmp_path, {"defaults": DEFAULT_LABELS}))
    assert "runners.defaults: unknown key 'defaults'; did you mean 'default'?" in message


@pytest.mark.parametrize(("labels", "problem"), [
    ([], "runners.default: give at least one runner label"),
    (["self-hosted", "has space"], "runners.default.1: a runner label is letters, digits"),
    ("gpu", "runners.default: "),
])
def test_runner_labels_must_be_a_non_empty_list_of_label_names(tmp_path: Path, labels: object, problem: str) -> None:
    assert problem in error_of(with_runners(tmp_path, {"default": labels}))
