"""The release watch's logic on real metadata, with a fake index (no network, no processes)."""

from __future__ import annotations

import fcntl
import json
import os
from email.message import Message
from pathlib import Path

import pytest

from buildscripts import hostenv
from buildscripts import matrix as matrix_mod
from buildscripts.build import buildx
from buildscripts.build.base import BaseImage
from buildscripts.commands import watch as watch_command
from buildscripts.errors import PackageIndexError, ProposalError
from buildscripts.lock.state import paths_for
from buildscripts.watch import edit, news, proposal, propose
from buildscripts.watch.index import DistFile, Project, normalize, parse_metadata, parse_page
from buildscripts.watch.wheels import Platform, cuda_flavour, installable, torch_pin
from buildscripts.workspace import Workspace
from tests.local_index import TORCH_TAG, Release, filename, made_up, real

ROOT = Path(__file__).resolve().parents[2]
BOOKWORM = Platform("3.11", "x86_64-manylinux_2_36")
SGLANG = real("sglang", "0.5.23")
TORCH_FILES = [Release("torch", "2.14.1", real("torch", "2.14.1"), TORCH_TAG),
               Release("torch", "2.15.0", real("torch", "2.15.0"), TORCH_TAG)]


class FakeIndex:
    def __init__(self, releases: list[Release]) -> None:
        self.projects: dict[str, list[DistFile]] = {}
        self.meta: dict[str, bytes] = {}
        self.asked: list[str] = []
        for r in releases:
            self.projects.setdefault(normalize(r.name), []).append(
                DistFile(filename(r), f"https://index.test/{filename(r)}", r.yanked, None))
            self.meta[filename(r)] = r.metadata

    def project(self, name: str) -> Project | None:
        self.asked.append(name)
        files = self.projects.get(normalize(name))
        return Project(name, "https://index.test/simple/", tuple(files)) if files is not None else None

    def metadata(self, file: DistFile) -> Message:
        return parse_metadata(self.meta[file.filename])


def the_matrix() -> matrix_mod.Matrix:
    return matrix_mod.load(ROOT / "matrix.yaml", {})


def locked() -> dict[str, dict[str, str]]:
    data = json.loads((ROOT / "lockfiles" / "index.json").read_text())
    return {cid: entry["versions"] for cid, entry in data["cells"].items()}


def run_watch(releases: list[Release]) -> news.Findings:
    return news.watch(the_matrix(), {news.HOST: FakeIndex(releases)}, locked(), ["the test index"])


def held() -> list[Release]:
    return [Release("sglang", v, made_up(SGLANG, v)) for v in ("0.5.10", "0.5.16", "0.5.23")] + TORCH_FILES


def test_today_torch_2150_is_new_and_no_sglang_pins_it() -> None:
    found = run_watch(held())
    assert found.sglang == [] and found.room == [] and found.skipped == []
    assert [(t.version, t.cuda, t.pinned_by) for t in found.torch] == [("2.15.0", "cu132", ())]
    assert found.lines()[1:] == [
        "new torch 2.15.0 (cu132: it requires cuda-toolkit==13.2.2): no SGLang release pins it yet (the newest, "
        "sglang 0.5.23, pins torch 2.14.1): listed, not built (its lane would be in the new CUDA flavour cu132)",
    ]
    assert found.proposable() == [] and found.to_json()["new"] is True


def test_a_new_sglang_on_an_existing_lane_is_proposable() -> None:
    found = run_watch([*held(), Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24"))])
    (new,) = found.sglang
    assert (new.version, new.torch, new.lane, new.new_lane, new.problem) == (
        "0.5.24", "2.14.1", "torch2.14.1-cu130", None, None)
    assert new.runtime == {"flashinfer": "flashinfer_python[cu13]==0.7.2", "sglang-kernel": "sglang-kernel==0.4.10",
                           "deep-gemm": "sgl-deep-gemm==0.2.3.post2"}
    assert [s.version for s in found.proposable()] == ["0.5.24"]


def test_a_new_sglang_pinning_a_torch_of_a_new_flavour_proposes_the_flavour_and_its_lane() -> None:
    found = run_watch([*held(), Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24", torch="torch==2.15.0"))])
    (new,) = found.sglang
    assert (new.torch, new.problem, new.new_lane, new.new_flavour) == (
        "2.15.0", None, {"torch": "2.15.0", "cuda": "cu132"}, {"name": "cu132", "version": "13.2", "toolkit": "13.2.2"})
    assert new.follows.endswith("a new lane torch2.15.0-cu132, in a new CUDA flavour cu132 (CUDA 13.2)")
    assert found.torch[0].pinned_by == ("0.5.24",) and found.torch[0].problem is None
    assert found.torch[0].follows == ("pinned by sglang 0.5.24: a new lane is proposed for it, in the new CUDA "
                                      "flavour cu132")
    assert [s.version for s in found.proposable()] == ["0.5.24"]


def test_a_torch_that_is_no_cuda_build_gets_no_lane() -> None:
    cpu_torch = Release("torch", "2.15.0+cpu", b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0+cpu\n", TORCH_TAG)
    found = run_watch([*held()[:-1], cpu_torch,
                       Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24", torch="torch==2.15.0+cpu"))])
    (new,) = found.sglang
    assert new.problem == "cpu is not a CUDA build of torch (a lane is a torch in a CUDA flavour such as cu130)"
    assert found.proposable() == []


def test_the_change_declares_a_new_flavour_with_its_toolkit_recipe() -> None:
    text = (ROOT / "matrix.yaml").read_text()
    release = news.NewSGLang("0.5.24", "2.15.0", new_lane={"torch": "2.15.0", "cuda": "cu132"},
                             new_flavour={"name": "cu132", "version": "13.2", "toolkit": "13.2.2"})
    change = edit.propose(text, the_matrix(), [release])
    assert [line for line in _diff(text, change.text) if line.startswith("+")] == [
        '+  cu132: {version: "13.2"}', "+  - {torch: 2.15.0, cuda: cu132}", "+  - {version: 0.5.24, torch: 2.15.0}",
        '+      cu132: ["cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,nvrtc]==13.2.2"]']
    assert change.added[:2] == ['cuda: cu132: {version: "13.2"}',
                                'toolkits.pip.pip: cu132: ["cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,nvrtc]==13.2.2"] '
                                "(cu130's recipe, pinned to the cuda-toolkit 13.2.2 that the new torch requires)"]
    built = {c.id: c for c in change.new_cells if c.excluded is None}
    assert sorted(built) == [*(f"sglang0.5.24-torch2.15.0-cu132-{t}-bookworm" for t in ("none", "pip")),
                             "sglang0.5.24-torch2.15.0-cu132-pip-bookworm-arm64"]   # arm64: opt-in, pip only
    pip = built["sglang0.5.24-torch2.15.0-cu132-pip-bookworm"]
    assert (pip.lane.cuda_version, pip.toolkit.pip["cu132"]) == (
        "13.2", ("cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,nvrtc]==13.2.2",))
    # the cells that were there stay as they were: ids, exclusions, and their images' inputs (a recipe for
    # another flavour is not an input of theirs)
    before = the_matrix()
    kept = [c for c in change.matrix.cells if c.sglang.version != "0.5.24" and c.lane.cuda != "cu132"]
    assert [(c.id, c.excluded) for c in kept] == [(c.id, c.excluded) for c in before.cells]
    recipe, base = buildx.Recipe.of(Workspace.at(ROOT)), BaseImage("base", "sha256:b", "x", built=False)
    assert [buildx.inputs_hash(c, base, paths_for(c, ROOT / "lockfiles"), recipe) for c in kept if not c.excluded] == [
        buildx.inputs_hash(c, base, paths_for(c, ROOT / "lockfiles"), recipe) for c in before.buildable()]


@pytest.mark.parametrize(("toolkit", "why"), [("", "its torch pins no cuda-toolkit"),
                                               ("13.1.0", "a cuda-toolkit of another CUDA than the flavour's")])
def test_without_a_toolkit_to_pin_the_new_flavours_pip_cells_are_excluded(toolkit: str, why: str) -> None:
    release = news.NewSGLang("0.5.24", "2.15.0", new_lane={"torch": "2.15.0", "cuda": "cu132"},
                             new_flavour={"name": "cu132", "version": "13.2", "toolkit": toolkit})
    change = edit.propose((ROOT / "matrix.yaml").read_text(), the_matrix(), [release])
    assert change.added[0] == 'cuda: cu132: {version: "13.2"}' and not change.added[1].startswith("toolkits"), why
    pip = next(c for c in change.new_cells if c.id == "sglang0.5.24-torch2.15.0-cu132-pip-bookworm")
    assert pip.excluded == "toolkit 'pip' has no recipe for cu132"


def test_a_flow_mapping_of_flavours_is_refused_with_the_fix() -> None:
    block = 'cuda:\n  cu128: {version: "12.8"}\n  cu130: {version: "13.0"}\n'
    flow = 'cuda: {cu128: {version: "12.8"}, cu130: {version: "13.0"}}\n'
    text = (ROOT / "matrix.yaml").read_text().replace(block, flow)
    release = news.NewSGLang("0.5.24", "2.15.0", new_lane={"torch": "2.15.0", "cuda": "cu132"},
                             new_flavour={"name": "cu132", "version": "13.2", "toolkit": "13.2.2"})
    with pytest.raises(ProposalError, match="`cuda:` is not a block mapping"):
        edit.propose(text, matrix_mod.parse(text, ROOT / "matrix.yaml"), [release])


def test_yanked_pre_releases_and_releases_without_a_wheel_for_the_base() -> None:
    found = run_watch([*held(),
                       Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24"), yanked="broken wheel"),
                       Release("sglang", "0.5.25rc1", made_up(SGLANG, "0.5.25rc1")),
                       Release("sglang", "0.5.26", made_up(SGLANG, "0.5.26"),
                               tags="cp313-cp313-manylinux_2_34_x86_64"),
                       Release("sglang", "0.5.27", made_up(SGLANG, "0.5.27"),
                               tags="cp311-cp311-manylinux_2_39_x86_64")])
    assert [(s.version, s.reason) for s in found.skipped] == [
        ("0.5.24", "yanked (broken wheel)"), ("0.5.25rc1", "a pre-release")]
    assert [(s.version, s.problem) for s in found.sglang] == [
        ("0.5.26", "base bookworm: no wheel for cp311 on x86_64-manylinux_2_36; there are: "
                   "cp313-manylinux_2_34_x86_64; base bookworm-arm64: no wheel for cp311 on aarch64-manylinux_2_36; "
                   "there are: cp313-manylinux_2_34_x86_64"),
        ("0.5.27", "base bookworm: no wheel for cp311 on x86_64-manylinux_2_36; there are: "
                   "cp311-manylinux_2_39_x86_64; base bookworm-arm64: no wheel for cp311 on aarch64-manylinux_2_36; "
                   "there are: cp311-manylinux_2_39_x86_64"),
    ]
    assert found.proposable() == []


@pytest.mark.parametrize(("torch", "why"), [
    (None, "its metadata requires no torch at all"),
    ("torch>=2.9", "its metadata asks for `torch>=2.9`, not one torch version"),
])
def test_metadata_without_a_torch_pin_is_listed_with_the_reason(torch: str | None, why: str) -> None:
    found = run_watch([*held(), Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24", torch=torch))])
    (new,) = found.sglang
    assert new.torch is None and new.problem is not None and new.problem.startswith(why)
    assert "add it to matrix.yaml by hand" in new.follows


def test_room_where_an_sglang_requirement_is_a_range() -> None:
    ranged = made_up(SGLANG, "0.5.23").replace(b"flashinfer_python[cu13]==0.7.2", b"flashinfer_python[cu13]>=0.7.2")
    flashinfer = [Release("flashinfer-python", v, b"Metadata-Version: 2.1\nName: flashinfer-python\n",
                          tags="py3-none-any") for v in ("0.7.2", "0.7.4", "0.8.0rc1")]
    releases = [r for r in held() if r.version != "0.5.23"] + [Release("sglang", "0.5.23", ranged), *flashinfer]
    (room,) = run_watch(releases).room
    assert (room.sglang, room.package, room.newest, room.locked) == ("0.5.23", "flashinfer_python", "0.7.4", "0.7.2")
    assert "nox -s lock -- --upgrade --only 'sglang0.5.23-*'" in room.follows


def test_an_index_without_sglang_is_an_error() -> None:
    with pytest.raises(PackageIndexError, match="no project 'sglang'"):
        run_watch(TORCH_FILES)


def test_wheels_for_the_base_and_torch_flavours() -> None:
    files = [DistFile("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", "u"),
             DistFile("torch-2.15.0-cp311-cp311-win_amd64.whl", "u")]
    assert installable(files, BOOKWORM)[0] == files[0]
    only_new_python = [DistFile("x-1.0-py3-none-any.whl", "u", requires_python=">=3.12")]
    assert installable(only_new_python, BOOKWORM) == (None, "requires Python >=3.12; the base has Python 3.11")
    assert installable([DistFile("x-1.0.tar.gz", "u")], BOOKWORM)[1].startswith("no wheel at all (files: gz)")
    assert cuda_flavour("2.14.1", parse_metadata(real("torch", "2.14.1")), BOOKWORM)[0] == "cu130"
    assert cuda_flavour("2.15.0", parse_metadata(real("torch", "2.15.0")), BOOKWORM) == (
        "cu132", "it requires cuda-toolkit==13.2.2")
    assert cuda_flavour("2.15.0+cu128", Message(), BOOKWORM) == ("cu128", "its version 2.15.0+cu128")
    assert cuda_flavour("2.15.0", Message(), BOOKWORM) == ("cpu", "it requires no CUDA runtime")
    assert torch_pin(parse_metadata(SGLANG), BOOKWORM) == ("2.14.1", "")


def test_simple_pages_html_and_json() -> None:
    page = (b'<a href="../../files/a-1.0-py3-none-any.whl#sha256=ab" data-yanked="" data-core-metadata="sha256=cd">'
            b'a-1.0-py3-none-any.whl</a><a href="b-2.0.tar.gz" data-requires-python="&gt;=3.12">b-2.0.tar.gz</a>')
    a, b = parse_page(page, "text/html", "https://i.test/simple/a/")
    assert (a.url, a.yanked, a.metadata_url) == ("https://i.test/files/a-1.0-py3-none-any.whl#sha256=ab", "",
                                                 "https://i.test/files/a-1.0-py3-none-any.whl.metadata")
    assert (b.yanked, b.requires_python, b.metadata_url) == (None, ">=3.12", None)
    data = {"files": [{"filename": "a-1.0-py3-none-any.whl", "url": "https://f.test/a.whl", "yanked": "bad",
                       "core-metadata": {"sha256": "x"}},
                      {"filename": "a-0.9.tar.gz", "url": "a.tgz", "yanked": False}]}
    one, two = parse_page(json.dumps(data).encode(), "application/vnd.pypi.simple.v1+json", "https://i.test/s/a/")
    assert (one.yanked, one.metadata_url) == ("bad", "https://f.test/a.whl.metadata")
    assert (two.yanked, two.url) == (None, "https://i.test/s/a/a.tgz")


def test_index_urls_follow_the_host_settings_in_uvs_order() -> None:
    assert hostenv.index_urls({"PIP_INDEX_URL": "https://mirror.test/simple"})[-1] == "https://mirror.test/simple"
    assert hostenv.index_urls({"UV_INDEX": "local=http://127.0.0.1:9/simple file:///x",
                               "UV_DEFAULT_INDEX": "https://pypi.org/simple"}) == [
        "http://127.0.0.1:9/simple", "https://pypi.org/simple"]


# ---------------------------------------------------------------- the proposal


def test_the_change_keeps_the_file_and_carries_expectations_over() -> None:
    text = (ROOT / "matrix.yaml").read_text()
    release = news.NewSGLang("0.5.30", "2.14.1", lane="torch2.14.1-cu130")
    change = edit.propose(text, the_matrix(), [release])
    added = [line[1:] for line in _diff(text, change.text) if line.startswith("+")]
    assert added == [
        "  - {version: 0.5.30, torch: 2.14.1}",
        '  - match: "sglang0.5.30-*-none-bookworm"',
        "    stage: import",
        "    class: cuda-home-missing",
        '    reason: "as sglang 0.5.23 (sglang0.5.23-torch2.14.1-cu130-none-bookworm): deep_gemm asserts a CUDA home '
        "at import; pip's nvcc is not discoverable\"",
    ]
    buildable = [c.id for c in change.new_cells if c.excluded is None]
    assert buildable == ["sglang0.5.30-torch2.14.1-cu130-none-bookworm", "sglang0.5.30-torch2.14.1-cu130-pip-bookworm",
                         "sglang0.5.30-torch2.14.1-cu130-pip-bookworm-arm64"]
    none_cell = next(c for c in change.new_cells if c.id == buildable[0])
    assert none_cell.expected is not None and none_cell.expected.failure_class == "cuda-home-missing"


def test_a_new_lane_is_added_after_the_last_lane() -> None:
    text = (ROOT / "matrix.yaml").read_text()
    release = news.NewSGLang("0.5.24", "2.12.0", new_lane={"torch": "2.12.0", "cuda": "cu130"})
    change = edit.propose(text, the_matrix(), [release])
    assert [line for line in _diff(text, change.text) if line.startswith("+")] == [
        "+  - {torch: 2.12.0, cuda: cu130}", "+  - {version: 0.5.24, torch: 2.12.0}"]
    assert {c.lane.id for c in change.new_cells if c.excluded is None} == {"torch2.12.0-cu130"}


def test_a_flow_list_is_refused_with_the_fix() -> None:
    text = (ROOT / "matrix.yaml").read_text().replace(
        "  - {version: 0.5.10, torch: 2.9.1}\n  - {version: 0.5.16, torch: 2.11.0}\n"
        "  - {version: 0.5.23, torch: 2.14.1}",
        "  [{version: 0.5.23, torch: 2.14.1}]")
    path = ROOT / "matrix.yaml"
    with pytest.raises(ProposalError, match="not a block list"):
        edit.propose(text, matrix_mod.parse(text, path), [news.NewSGLang("0.5.24", "2.14.1", lane="x")])


def test_matrix_edited_meanwhile_is_refused(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path)
    ws.matrix.write_text("schema: 1\n")
    start = propose.Snapshot(tmp_path, "matrix.yaml", "schema: 1\n", propose._sha("schema: 1\n"))
    propose._unchanged_since(start, ws)
    ws.matrix.write_text("schema: 1\n# edited by hand\n")
    with pytest.raises(ProposalError, match="was changed while the proposal was made"):
        propose._unchanged_since(start, ws)


def test_two_watches_at_once_are_refused(tmp_path: Path) -> None:
    with watch_command.one_watch(tmp_path):
        with pytest.raises(ProposalError, match="another watch of this checkout is running") as caught, \
                watch_command.one_watch(tmp_path):
            pass
        assert f"pid {os.getpid()}" in caught.value.message
    with (tmp_path / "watch.lock").open("a") as handle:  # released afterwards
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_build_step_is_the_build_command_of_the_new_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from buildscripts import proc
    from buildscripts.results import RunResults, save
    ran: list[tuple[str, ...]] = []
    ws = Workspace.at(tmp_path, runs=tmp_path / "runs")

    def fake_run(argv: list[str], **kwargs: object) -> proc.Completed:
        ran.append(tuple(argv))
        save(RunResults(run_id="watch-1", started="now"), ws.runs / "watch-1" / "results.json")
        return proc.Completed(tuple(argv), 10, "", 1.0)   # 10: some cell ended unexpectedly, still a result

    monkeypatch.setattr(proc, "run", fake_run)
    request = propose.Request(ws=ws, run_id="watch-1", out=None, branch=None, build=True)
    built = propose._build(tmp_path, ["sglang0.5.24-a", "sglang0.5.24-b"], request)
    assert built is not None and built.run_id == "watch-1"
    assert ran[0][1:] == ("-m", "buildscripts", "build", "--run-id", "watch-1", "--runs", str(ws.runs.resolve()),
                          "--only", "sglang0.5.24-a", "--only", "sglang0.5.24-b")
    monkeypatch.setattr(proc, "run", lambda argv, **kw: proc.Completed(tuple(argv), 4, "no engine", 0.1))
    with pytest.raises(ProposalError, match=r"failed to run \(exit 4\)") as caught:
        propose._build(tmp_path, ["sglang0.5.24-a"], propose.Request(ws=ws, run_id="watch-2", out=None, branch=None,
                                                                      build=True))
    assert "without --build" in str(caught.value)


def test_the_report_renders_the_record() -> None:
    found = run_watch([*held(), Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24"))])
    change = edit.propose((ROOT / "matrix.yaml").read_text(), the_matrix(), found.proposable())
    cells = locked()
    locks = {c.id: {"state": "ok", "reason": None, "versions": {**cells[c.id.replace("0.5.24", "0.5.23")],
                                                               "sglang": "0.5.24"}}
             for c in change.new_cells if c.excluded is None}
    ws = Workspace.at(ROOT, runs=ROOT / "tests" / "no-runs-here")
    made = proposal.Made(locks=locks, buildable=list(locks), built=None, changed=["A\tlockfiles/sglang/x.txt"],
                         today={cid: {"versions": v} for cid, v in cells.items()})
    record = proposal.record(found, change, made, the_matrix(), ws, build_asked=False, branch=None)
    text = proposal.markdown(record)
    assert record["title"] == "watch: propose sglang 0.5.24 (torch 2.14.1)"
    assert "Nothing is promoted before this pull request merges" in text
    assert "| `sglang0.5.24-torch2.14.1-cu130-pip-bookworm` | ok | not built |" in text
    assert "9 new cell(s) excluded" in text   # 12 new (two bases); buildable: amd64's none and pip, arm64's pip
    assert "sglang 0.5.23 → 0.5.24, torch 2.14.1" in text
    assert "`nox -s build -- --only sglang0.5.24-torch2.14.1-cu130-none-bookworm --only " in text


def _diff(a: str, b: str) -> list[str]:
    import difflib
    return [line.rstrip("\n") for line in difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=0)
            if not line.startswith(("---", "+++", "@@"))]


def test_the_scheduled_job_opens_a_pull_request_and_promotes_nothing() -> None:
    import yaml
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release-watch.yml").read_text())
    assert "schedule" in workflow[True]  # YAML 1.1 reads the key `on` as True
    scripts = "\n".join(step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"])
    assert "promote" not in scripts and "docker push" not in scripts
    propose_job = workflow["jobs"]["propose"]
    assert propose_job["permissions"] == {"contents": "write", "pull-requests": "write"}
    opened = next(step for step in propose_job["steps"] if step.get("name") == "Open the pull request")
    assert opened["env"] == {"GH_TOKEN": "${{ github.token }}"}
    assert '--body-file "runs/$RUN_ID/proposal.md"' in opened["run"]
