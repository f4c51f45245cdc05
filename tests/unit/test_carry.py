"""CPU stages carried from the build runner (verify --cpu-record, verify/carry.py): the build runner's record, sealed
by seal.record as `build --stage` seals it with a real key, stands for the CPU stages of the very digest, cell and
plan verified on a GPU runner, and for nothing else; what it stands for is judged as if it had run here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from buildscripts import gate, matrix, results
from buildscripts.commands import verify as verify_command
from buildscripts.errors import ConfigError
from buildscripts.results import CPU_STAGES, GPU_STAGES, ImageInfo, RunResults, StageResult, Status, cell_record
from buildscripts.trust import cpu_record, keys, seal
from buildscripts.trust.keys import SigningKey
from buildscripts.verify import carry
from buildscripts.verify.plan import Plan
from buildscripts.workspace import Workspace
from tests.digest_records import PIP_CELL, built, cell_of
from tests.results_factory import build_labels, gpu_passed

ROOT = Path(__file__).resolve().parents[2]
LOADED = matrix.load(ROOT / "matrix.yaml")
CELL = cell_of(LOADED, PIP_CELL)
IMAGE_ID = "sha256:" + "a" * 64
DIGEST = "sha256:" + "d" * 64
REPO = "127.0.0.1:5000/staging"
BUILD_KEY = SigningKey("keys/ci.pub", keys.generate())
GPU_KEY = SigningKey("gpu-runner", keys.generate())
PLAN = Plan.make(archs=CELL.archs, lane_cuda=CELL.lane.cuda_version, also_archs=CELL.also_audit)
PULLED = ImageInfo(ref=f"{REPO}@{DIGEST}", id=IMAGE_ID, repository=REPO, digest=DIGEST)


def cpu_stages(**status: Status) -> list[StageResult]:
    """The CPU stages as a build runner's container records them, each passed unless `status` says otherwise."""
    return [StageResult(name=n, status=status.get(n.replace("-", "_"), Status.PASSED), duration_s=2.0,
                        reason=None if status.get(n.replace("-", "_"), Status.PASSED) is Status.PASSED else "it broke",
                        evidence={"seen": n}) for n in CPU_STAGES]


def staged(tmp_path: Path, *, key: SigningKey | None = BUILD_KEY, digest: str = DIGEST,
           stages: list[StageResult] | None = None, name: str = "build") -> Path:
    """The build runner's results file: its record of the cell staged as `digest`, sealed by `key` as
    pipeline.execute seals it (seal.record), with the cell's definition."""
    record = built(CELL, IMAGE_ID)
    image = record.image.model_copy(update={"repository": REPO, "digest": digest,
                                            "labels": build_labels(CELL.axes())})
    record = cell_record(CELL.id, results.Given(axes=CELL.axes(), targets=CELL.archs, run_id=f"gh1.1-{name}"),
                         build=record.build, image=image, stages=stages or cpu_stages())
    path = tmp_path / name / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    run = RunResults(run_id=f"gh1.1-{name}", started=results.now(), runner="build-runner",
                     matrix_digest=results.matrix_digest(LOADED.spec))
    seal.record(run, record, key, path, definition=CELL.definition)
    return path


def chosen(path: Path, *, pulled: ImageInfo = PULLED, cell: matrix.Cell | None = CELL, plan: Plan = PLAN,
           trusted: tuple[keys.PublicKey, ...] = (BUILD_KEY.public,)) -> carry.Carried | str:
    return carry.choose(carry.read([path]), pulled=pulled, cell=cell, plan=plan, trusted=trusted)


def test_a_sealed_record_of_the_digest_stands_for_exactly_its_cpu_stages(tmp_path: Path) -> None:
    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    assert found.names == CPU_STAGES
    assert carry.without(PLAN, found).stages == tuple(s for s in PLAN.stages if s in GPU_STAGES)
    assert found.entry.keyid == BUILD_KEY.public.keyid and found.entry.digest == DIGEST
    for stage in found.stages:
        assert stage.sealed_by == BUILD_KEY.public.keyid and stage.run_id == "gh1.1-build"
        assert stage.runner == "build-runner" and stage.where == "container (cpu)"
        assert stage.carried_from and BUILD_KEY.public.keyid[:16] in stage.carried_from
        assert "gh1.1-build" in stage.carried_from and DIGEST in stage.carried_from


def test_the_platform_manifest_of_an_index_is_what_a_record_is_held_to(tmp_path: Path) -> None:
    path = staged(tmp_path, digest=DIGEST)
    index = PULLED.model_copy(update={"digest": "sha256:" + "e" * 64, "platform_digest": DIGEST})
    assert isinstance(chosen(path, pulled=index), carry.Carried)
    other = PULLED.model_copy(update={"platform_digest": "sha256:" + "f" * 64})
    assert "judged the platform manifest sha256:fff" in str(chosen(path, pulled=other))


@pytest.mark.parametrize("case", ["another digest", "unsealed", "untrusted key", "tampered", "another definition",
                                  "failed cpu stage", "skipped cpu stage", "another cell", "other targets",
                                  "no digest pulled"])
def test_a_record_that_does_not_hold_is_refused_with_why(tmp_path: Path, case: str) -> None:
    path, said = staged(tmp_path), ""
    kwargs: dict[str, Any] = {}
    if case == "another digest":
        path, said = staged(tmp_path, digest="sha256:" + "b" * 64), "no record in"
    elif case == "unsealed":
        path, said = staged(tmp_path, key=None), "not sealed by a verifier"
    elif case == "untrusted key":
        kwargs, said = {"trusted": (GPU_KEY.public,)}, "seal is not valid"
    elif case == "tampered":   # a failed toolchain flipped to passed after the seal
        path = staged(tmp_path, stages=cpu_stages(toolchain=Status.FAILED))
        data = json.loads(path.read_text())
        stage = next(s for s in data["cells"][0]["stages"] if s["name"] == "toolchain")
        stage.update(status="passed", reason=None)
        path.write_text(json.dumps(data))
        said = "changed after it was sealed"
    elif case == "another definition":
        kwargs = {"cell": dataclasses.replace(CELL, definition={**CELL.definition, "targets": ["sm_90a"]})}
        said = "definition changed"
    elif case == "failed cpu stage":
        path, said = staged(tmp_path, stages=cpu_stages(arch_audit=Status.FAILED)), "arch-audit stage failed"
    elif case == "skipped cpu stage":
        path, said = staged(tmp_path, stages=cpu_stages(jit_compile=Status.SKIPPED)), "jit-compile stage skipped"
    elif case == "another cell":
        other = next(c for c in LOADED.cells if c.id != CELL.id and not c.excluded)
        kwargs, said = {"cell": other}, f"a record of {CELL.id}, not of {other.id}"
    elif case == "other targets":
        kwargs, said = {"plan": dataclasses.replace(PLAN, archs=("sm_90a",))}, "planned for"
    elif case == "no digest pulled":
        kwargs, said = {"pulled": ImageInfo(ref="local", id=IMAGE_ID)}, "not pulled by digest"
    found = chosen(path, **kwargs)
    assert isinstance(found, str), found
    assert said in found, found


def test_a_file_that_is_no_results_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"--cpu-record .*not valid JSON"):
        carry.read([path])
    with pytest.raises(ConfigError, match="--cpu-record cannot read"):
        carry.read([tmp_path / "absent.json"])


def gpu_record(stages: list[StageResult], carried: carry.Carried | None) -> results.CellResult:
    """The GPU runner's record: the cell's stages as verify makes it of the pulled digest."""
    image = PULLED.model_copy(update={"labels": build_labels(CELL.axes())})
    return cell_record(CELL.id, results.Given(axes=CELL.axes(), targets=CELL.archs, run_id="gh1.1-gpu"),
                       build=results.BuildResult(status=Status.PASSED, reason="existing image"), image=image,
                       stages=carry.merged(stages, carried), carried=carried.entry if carried else None)


@pytest.mark.parametrize("gpu_outcome", ["passed", "server failed"])
def test_the_judge_gives_carried_stages_the_verdict_of_local_ones(tmp_path: Path, gpu_outcome: str) -> None:
    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    gpu = gpu_passed()
    if gpu_outcome == "server failed":
        gpu = [s.model_copy(update={"status": Status.FAILED, "failure_class": "server-died", "reason": "died"})
               if s.name == "server" else s for s in gpu]
    with_carried, local = gpu_record(gpu, found), gpu_record(cpu_stages() + gpu, None)
    assert [s.name for s in with_carried.stages] == [s.name for s in local.stages]
    assert (with_carried.verdict, with_carried.verdict_reason, with_carried.verified_archs) == (
        local.verdict, local.verdict_reason, local.verified_archs)
    assert with_carried.verdict is (results.Verdict.VERIFIED if gpu_outcome == "passed" else results.Verdict.FAILED)


def sealed_gpu_record(tmp_path: Path, record: results.CellResult) -> results.CellResult:
    run = RunResults(run_id="gh1.1-gpu", started=results.now(), runner="gpu-runner",
                     matrix_digest=results.matrix_digest(LOADED.spec))
    return seal.record(run, record, GPU_KEY, tmp_path / "gpu" / "results.json", definition=CELL.definition)


def test_the_sealed_record_names_where_each_stage_ran_and_the_gate_checks_the_carried_seal(tmp_path: Path) -> None:
    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    record = sealed_gpu_record(tmp_path, gpu_record(gpu_passed(), found))
    ran = {s.name: s for s in record.stages}
    assert {ran[n].sealed_by for n in CPU_STAGES} == {BUILD_KEY.public.keyid}
    assert {ran[n].sealed_by for n in GPU_STAGES} == {GPU_KEY.public.keyid}
    assert {ran[n].runner for n in GPU_STAGES} == {"gpu-runner"} and not any(ran[n].carried_from for n in GPU_STAGES)
    assert seal.signer(record, [GPU_KEY.public]).keyid == GPU_KEY.public.keyid
    both = [GPU_KEY.public, BUILD_KEY.public]
    assert cpu_record.recheck(record, both) is None
    checked = gate.check(record, 0, LOADED, both)
    assert isinstance(checked, gate.Trusted) and checked.archs == ["sm90"], checked
    alone = gate.check(record, 0, LOADED, [GPU_KEY.public])   # the build runner's key is not trusted here
    assert isinstance(alone, gate.Refused) and "carried CPU stages do not stand" in alone.reason
    assert not gate.weigh(record, LOADED, [GPU_KEY.public]).vouches


def test_a_carried_stage_changed_by_its_carrier_is_seen_in_the_carried_envelope(tmp_path: Path) -> None:
    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    record = gpu_record(gpu_passed(), found)
    changed = [s.model_copy(update={"evidence": {"seen": "something else"}}) if s.name == "import" else s
               for s in record.stages]
    why = cpu_record.recheck(record.model_copy(update={"stages": changed}), [BUILD_KEY.public])
    assert why is not None and "import is not as the record" in why
    other = record.model_copy(update={"image": record.image.model_copy(update={"digest": "sha256:" + "c" * 64})})
    assert "this one of sha256:ccc" in str(cpu_record.recheck(other, [BUILD_KEY.public]))


def test_a_record_refused_leaves_the_plan_whole() -> None:
    assert carry.without(PLAN, None) == PLAN
    assert carry.merged(gpu_passed(), None) == gpu_passed()


@pytest.mark.parametrize(("argv", "words"), [
    (["--host"], "a run in place verifies no image"),
    (["--lxc-name", "ct1"], "a run in place verifies no image"),
    (["sglang-images:some-tag"], "sglang-images:some-tag is no digest"),
])
def test_cpu_records_go_with_an_image_by_digest_only(tmp_path: Path, argv: list[str], words: str) -> None:
    path = staged(tmp_path)
    with pytest.raises(ConfigError, match=words):
        verify_command.parse([*argv, "--cpu-record", str(path)], Workspace.at(ROOT), {})


def test_a_record_with_the_gpu_stages_alone_asked_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """It would go unused, and a run of the GPU stages alone claims nothing: GPU minutes for no verdict."""
    path, ref = staged(tmp_path), f"{REPO}@{DIGEST}"
    gpu_only = ["--stages", ",".join(GPU_STAGES)]
    with pytest.raises(ConfigError, match="asks for none: the record would go unused") as caught:
        verify_command.parse([ref, "--cpu-record", str(path), *gpu_only], Workspace.at(ROOT), {})
    assert "leave --stages out" in (caught.value.hint or "")
    some = ["--stages", "facts," + ",".join(GPU_STAGES)]   # a CPU stage asked: the record may stand for it
    assert verify_command.parse([ref, "--cpu-record", str(path), *some], Workspace.at(ROOT), {}).cpu_records


def test_the_records_are_read_before_the_pull_and_set_aside_with_rerun_cpu(tmp_path: Path) -> None:
    path, ref = staged(tmp_path), f"{REPO}@{DIGEST}"
    opts = verify_command.parse([ref, "--cpu-record", str(path)], Workspace.at(ROOT), {})
    assert [o.run.cells[0].cell_id for o in opts.cpu_records] == [CELL.id]
    assert verify_command.parse([ref, "--cpu-record", str(path), "--rerun-cpu"], Workspace.at(ROOT),
                                {}).cpu_records == ()
    with pytest.raises(ConfigError, match="--cpu-record cannot read"):
        verify_command.parse([ref, "--cpu-record", str(tmp_path / "absent.json")], Workspace.at(ROOT), {})


def test_the_html_report_says_a_stage_was_carried(tmp_path: Path) -> None:
    from buildscripts.report import html

    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    assert html._carried(found.stages[0]) == f"carried, sealed by key {BUILD_KEY.public.keyid[:16]}"
    assert html._carried(gpu_passed()[0]) == ""
