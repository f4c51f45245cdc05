"""The reports' view by GPU per platform (buildscripts/data/gpus.yaml, report/bygpu.py): an H200 and a GH200 are
both sm_90, but the one takes a linux/amd64 image and the other a linux/arm64 one, so each platform has its own
rows, its own products and its own cells; no amd64 row claims sm_121 (GB10 is arm64 only)."""

from __future__ import annotations

from buildscripts import matrix
from buildscripts.report import bygpu, junit, markdown
from buildscripts.report.weigh import Weighed
from buildscripts.results import BuildResult, CellResult, RunResults, StageResult, Status, family
from tests.results_factory import PROJECT_MATRIX, cpu_passed, gpu_passed, of_cell

MATRIX = matrix.load(PROJECT_MATRIX)
AMD64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm"
ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"


def cell(cell_id: str) -> matrix.Cell:
    return next(c for c in MATRIX.cells if c.id == cell_id)


def record(cell_id: str, stages: list[StageResult]) -> CellResult:
    """A built cell's record with `stages`, as a verifier of that cell of matrix.yaml writes it, judged."""
    return of_cell(CellResult(cell_id=cell_id, build=BuildResult(status=Status.PASSED), stages=stages), cell(cell_id))


def weighed(*records: CellResult) -> Weighed:
    run = RunResults(run_id="run-1", started="2026-12-01T00:00:00+00:00", finished="2026-12-01T01:00:00+00:00",
                     cells=list(records))
    platforms = {name: base.cpu.oci for name, base in MATRIX.spec.bases.items()}
    return Weighed(run, {r.cell_id: () for r in records}, platforms=platforms)


def test_each_platform_lists_its_own_products_and_the_archs_matrix_yaml_builds_it_for() -> None:
    catalogue = bygpu.catalogue()
    assert list(catalogue) == list(MATRIX.spec.targets_by_platform) == ["linux/amd64", "linux/arm64"]
    for platform, archs in catalogue.items():
        targets = MATRIX.spec.targets(platform)
        assert set(archs) == {family(a) for a in (*targets.archs, *targets.also_audit)}, platform
    assert catalogue["linux/arm64"] == {"sm_90": ("NVIDIA GH200",), "sm_100": ("NVIDIA GB200",),
                                        "sm_103": ("NVIDIA GB300",), "sm_121": ("NVIDIA DGX Spark / GB10",)}
    assert "sm_121" not in catalogue["linux/amd64"]
    products = [p for archs in catalogue.values() for names in archs.values() for p in names]
    assert len(products) == len(set(products))   # one home: each product once, on its platform


def test_an_arm64_cell_shows_on_the_arm64_rows_and_an_amd64_cell_on_the_amd64_rows() -> None:
    amd64 = record(AMD64, [*cpu_passed(), *gpu_passed()])
    arm64 = record(ARM64, [*cpu_passed(), *gpu_passed("NVIDIA GH200 480GB", "sm_90")])
    views = dict(bygpu.views(weighed(amd64, arm64)))
    assert list(views) == ["linux/amd64", "linux/arm64"]
    by_arch = {p: {r.arch: r for r in rows} for p, rows in views.items()}
    assert list(by_arch["linux/amd64"]) == ["sm_90", "sm_100", "sm_103", "sm_120"]
    assert list(by_arch["linux/arm64"]) == ["sm_90", "sm_100", "sm_103", "sm_121"]
    assert [v.cell_id for v in by_arch["linux/amd64"]["sm_90"].verified] == [AMD64]
    assert [v.cell_id for v in by_arch["linux/arm64"]["sm_90"].verified] == [ARM64]
    assert by_arch["linux/arm64"]["sm_121"].compiled == [ARM64] and by_arch["linux/amd64"]["sm_120"].compiled == [AMD64]
    assert by_arch["linux/arm64"]["sm_90"].products == ("NVIDIA GH200",)


def test_the_renderers_say_which_platform_each_row_is_of() -> None:
    view = weighed(record(ARM64, cpu_passed()))
    lines = markdown.gpu_view(view)
    heads = [line for line in lines if line.startswith("By GPU")]
    assert [h.split(")")[0] for h in heads] == ["By GPU (images for linux/amd64", "By GPU (images for linux/arm64"]
    amd64 = lines[lines.index(heads[0]):lines.index(heads[1])]
    assert not any(line.startswith("| sm_121") for line in amd64)   # no amd64 image claims GB10's arch
    assert f"| sm_121 | NVIDIA DGX Spark / GB10 | nothing has run on this GPU yet | — | `{ARM64}` |" in lines
    assert 'name="gpu sm_121 (linux/arm64)"' in junit.render(view)
    assert 'name="gpu sm_121 (linux/amd64)"' not in junit.render(view)


def test_a_cell_of_a_base_no_matrix_names_takes_its_platform_from_its_image_label() -> None:
    found = record(ARM64, cpu_passed())
    plain = found.model_copy(update={"image": found.image.model_copy(update={"labels": {}})})
    labelled = plain.model_copy(update={"image": plain.image.model_copy(
        update={"labels": {"io.sglang-images.platform": "linux/arm64"}})})
    bare = Weighed(RunResults(run_id="r", started="2026-12-01T00:00:00+00:00", cells=[labelled]), {ARM64: ()})
    assert bare.platform_of(labelled) == "linux/arm64"
    assert bare.platform_of(plain) == "linux/amd64"   # no matrix, no label: what every image before arm64 was
