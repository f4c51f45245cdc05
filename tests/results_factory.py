"""Results records for report and tag tests, built from the real pydantic models (no JSON by hand).

Five kinds of cell: verified on an H200 (sm_90), cpu-checked (GPU stages skipped), an expected
failure, a failure with class and hint, and an incompatible (excluded) cell. And the result sets of
three CI jobs that overlap: one runner on sm_100, one on sm_120, one without a GPU.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from buildscripts import matrix
from buildscripts.matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from buildscripts.matrix.schema import LABEL_PREFIX
from buildscripts.publish import trusted
from buildscripts.report.weigh import Weighed
from buildscripts.results import (
    GPU_STAGES,
    BuildResult,
    CellResult,
    ExpectedFailure,
    Given,
    ImageInfo,
    RunResults,
    StageResult,
    Status,
    cell_record,
    judged,
)
from buildscripts.trust import keys, seal
from buildscripts.trust.keys import SigningKey

CPU_STAGES = ("facts", "import", "flavour", "arch-audit", "toolchain", "jit-compile")
H200 = "NVIDIA H200"
COORDINATES = {  # kind -> (torch, cuda, toolkit); distinct cell ids for one SGLang version
    "verified": ("2.11.0", "cu130", "pip"),
    "cpu-checked": ("2.11.0", "cu130", "apt"),
    "expected-failure": ("2.11.0", "cu130", "none"),
    "failed": ("2.11.0", "cu130", "pip-nocccl"),
    "incompatible": ("2.9.1", "cu128", "none"),
}


def axes(sglang: str, torch: str, cuda: str, toolkit: str) -> dict[str, str]:
    cell = f"sglang{sglang}-torch{torch}-{cuda}-{toolkit}-bookworm"
    return {"cell": cell, "base": "bookworm", "python": "3.11", "torch": torch, "cuda": cuda,
            "lane": f"torch{torch}-{cuda}", "sglang": sglang, "toolkit": toolkit,
            "archs": "sm_90a sm_100a sm_120a"}


def build_labels(ax: dict[str, str], platform: str = DEFAULT_PLATFORM, inputs: str = "0123456789ab") -> dict[str, str]:
    """The labels the build puts on a cell's image (build/buildx.py cell_metadata): its cell, axes, inputs and,
    off linux/amd64, its platform. The gate shows a record under a cell only when its image carries them."""
    labels = {f"{LABEL_PREFIX}.{k}": v for k, v in ax.items()} | {f"{LABEL_PREFIX}.inputs": inputs}
    return labels | ({f"{LABEL_PREFIX}.platform": platform} if platform != DEFAULT_PLATFORM else {})


def cpu_passed() -> list[StageResult]:
    return [StageResult(name=n, status=Status.PASSED, duration_s=1.5) for n in CPU_STAGES]


def gpu_passed(gpu: str = H200, arch: str = "sm_90") -> list[StageResult]:
    return [StageResult(name=n, status=Status.PASSED, duration_s=12.0, where=f"container: {gpu} ({arch})",
                        gpu=gpu, arch=arch) for n in GPU_STAGES]


def gpu_skipped() -> list[StageResult]:
    return [StageResult(name=n, status=Status.SKIPPED, reason="no GPU on this machine") for n in GPU_STAGES]


def finish(cell: CellResult, **changes: object) -> CellResult:
    """`cell` with `changes`, judged again (records are frozen: a change is a new record)."""
    return judged(cell.model_copy(update=changes))


def sealed(cell: CellResult, key: SigningKey | None = None, *, matrix_digest: str | None = None,
           against: matrix.Matrix | None = None) -> CellResult:
    """`cell` sealed as a verifier seals it: by `key`, else this test session's throw-away verifier key
    (tests/session.py points SGLANG_IMAGES_KEY_DIR at a temporary folder). Bound to a cell's definition when it
    is a cell of the matrix `against`, or of kinds_matrix when neither that nor `matrix_digest` is given; with
    only `matrix_digest`, bound to that whole matrix as records were before definitions (what a test's own
    matrix.yaml and its digest make)."""
    pool = against or (kinds_matrix() if matrix_digest is None else None)
    of = next((c for c in pool.cells if c.id == cell.cell_id), None) if pool is not None else None
    update: dict[str, object] = {"matrix_digest": matrix_digest} if matrix_digest else {}
    if of is not None:
        update |= {"definition": of.definition, "definition_digest": of.definition_digest}
    return seal.seal(cell.model_copy(update=update), key or keys.signing_key(os.environ))


PROJECT_MATRIX = Path(__file__).resolve().parents[1] / "matrix.yaml"


@cache
def kinds_matrix() -> matrix.Matrix:
    """The project's matrix.yaml with the toolkits of the kinds above that it lacks (`apt`, `pip-nocccl`), so
    that every kind of cell is a cell of it."""
    text = PROJECT_MATRIX.read_text().replace("\ntoolkits:\n", "\ntoolkits:\n  apt:\n    description: test\n"
                                                                "  pip-nocccl:\n    description: test\n", 1)
    return matrix.parse(text, PROJECT_MATRIX)


def gated(cell: CellResult, against: matrix.Matrix | None = None) -> trusted.Trusted | trusted.Refused:
    """`cell` sealed with this session's key and put through the gate against the matrix `against` (default:
    kinds_matrix), for tests of what the tag policy makes of a record."""
    return trusted.check(sealed(cell, against=against), 0, against or kinds_matrix(),
                         [keys.signing_key(os.environ).public])


def passed_gate(cell: CellResult, against: matrix.Matrix | None = None) -> trusted.Trusted:
    """`gated`, for a record the gate must let through (AssertionError, with the reason, when it does not)."""
    found = gated(cell, against)
    assert isinstance(found, trusted.Trusted), found
    return found


def of_cell(record: CellResult, cell: matrix.Cell) -> CellResult:
    """`record` made a record of the matrix cell `cell` (its id, axes, targets and expectation), judged again:
    what a verifier of that cell would have written."""
    image = record.image.model_copy(update={"labels": build_labels(cell.axes(), cell.platform)})
    return finish(record, cell_id=cell.id, axes=cell.axes(), targets=list(cell.archs),
                  expected=cell.expected_failure(), image=image)


def make_cell(kind: str, image_id: str | None = None, sglang: str = "0.5.16") -> CellResult:
    """One cell of `kind`: verified | cpu-checked | expected-failure | failed | incompatible."""
    ax = axes(sglang, *COORDINATES[kind])
    if kind == "incompatible":
        excluded = f"sglang {sglang} pins torch 2.11.0; lane torch2.9.1-cu128 has torch 2.9.1"
        return cell_record(ax["cell"], Given(axes=ax, targets=ax["archs"].split(), excluded=excluded))
    expected, stages = None, []
    if kind == "verified":
        stages = cpu_passed() + gpu_passed()
    elif kind == "cpu-checked":
        stages = cpu_passed() + gpu_skipped()
    elif kind == "expected-failure":
        expected = ExpectedFailure(stages=["import"], failure_class="cuda-home-missing",
                                   reason="pip's nvcc is not found")
        stages = [
            StageResult(name="facts", status=Status.PASSED),
            StageResult(name="import", status=Status.FAILED, failure_class="cuda-home-missing",
                        reason="import deep_gemm: assert cuda_home is not None",
                        hint="install the pip toolkit layer", log_excerpt="AssertionError: cuda_home"),
            *[StageResult(name=n, status=Status.ABORTED, reason="import failed") for n in CPU_STAGES[2:]],
            *[StageResult(name=n, status=Status.ABORTED, reason="import failed") for n in GPU_STAGES],
        ]
    elif kind == "failed":
        stages = [
            *cpu_passed()[:5],
            StageResult(name="jit-compile", status=Status.FAILED, failure_class="nvcc-arch-unsupported",
                        reason="nvcc fatal: Unsupported gpu architecture 'compute_120a'",
                        hint="use a CUDA toolkit >= 12.8 for sm_120a",
                        log_excerpt="<script>alert('x')</script>\nnvcc fatal : Unsupported gpu architecture"),
            *[StageResult(name=n, status=Status.ABORTED, reason="jit-compile failed") for n in GPU_STAGES],
        ]
    given = Given(axes=ax, targets=ax["archs"].split(), expected=expected,
                  versions={"torch": "2.11.0+cu130", "sglang": sglang, "flashinfer": "0.4.1"},
                  locks={"lockfiles/lanes/torch2.11.0-cu130-bookworm.txt": "sha256:" + "11" * 32})
    return cell_record(
        ax["cell"], given, build=BuildResult(status=Status.PASSED, duration_s=321.0, log="logs/build.log"),
        image=ImageInfo(ref=f"sglang-images:{ax['cell']}-0123456789ab", id=image_id or "sha256:" + "ab" * 32,
                        size_bytes=9_876_543_210, labels=build_labels(ax)), stages=stages)


ALL_KINDS = ("verified", "cpu-checked", "expected-failure", "failed", "incompatible")


def make_run(run_id: str = "run-1", finished: str = "2025-01-02T03:04:05+00:00",
             kinds: tuple[str, ...] = ALL_KINDS) -> RunResults:
    return RunResults(run_id=run_id, started=finished, finished=finished, runner="ci-runner-1",
                      host={"platform": "Linux-6.1-x86_64-with-glibc2.36"},
                      cells=[make_cell(k) for k in kinds])


B200, RTX = "NVIDIA B200", "NVIDIA RTX PRO 6000 Blackwell"


def server_fails(gpu: str, arch: str) -> list[StageResult]:
    """GPU stages on `gpu` where the server dies at start-up (first-generation aborted)."""
    died: dict[str, object] = {"status": Status.FAILED, "failure_class": "server-died",
                               "reason": "the server exited during start-up"}
    aborted: dict[str, object] = {"status": Status.ABORTED, "reason": "server failed", "gpu": None, "arch": None,
                                  "where": "container (cpu)"}
    changes: dict[str, dict[str, object]] = {"server": died, "first-generation": aborted}
    return [s.model_copy(update=changes[s.name]) if s.name in changes else s for s in gpu_passed(gpu, arch)]


def ci_job(run_id: str, runner: str, finished: str, cells: dict[str, list[StageResult] | None],
           matrix_digest: str | None = None) -> RunResults:
    """One CI job's results, sealed as its verifier seals them: a cell per kind; given GPU stages replace the
    kind's, after every CPU stage passed."""
    made = []
    for kind, gpu_stages in cells.items():
        cell = make_cell(kind)
        if gpu_stages is not None:
            cell = finish(cell, stages=cpu_passed() + gpu_stages)
        made.append(sealed(cell.model_copy(update={"finished": finished}), matrix_digest=matrix_digest))
    return RunResults(run_id=run_id, started=finished, finished=finished, runner=runner, matrix="matrix.yaml",
                      matrix_digest=matrix_digest, cells=made)


def three_ci_jobs(matrix_digest: str | None = None) -> list[RunResults]:
    """The `pip` cell verified on sm_100 (runner A) and sm_120 (runner B), the `apt` cell verified on sm_100
    but its server dying on sm_120, and a newest runner C without a GPU that also built `pip-nocccl`."""
    return [
        ci_job("job-sm100", "runner-a", "2026-11-30T08:00:00+00:00",
               {"verified": gpu_passed(B200, "sm_100"), "cpu-checked": gpu_passed(B200, "sm_100"),
                "incompatible": None}, matrix_digest),
        ci_job("job-sm120", "runner-b", "2026-11-30T08:10:00+00:00",
               {"verified": gpu_passed(RTX, "sm_120"), "cpu-checked": server_fails(RTX, "sm_120"),
                "incompatible": None}, matrix_digest),
        ci_job("job-cpu", "runner-c", "2026-11-30T08:20:00+00:00",
               {"verified": gpu_skipped(), "failed": None, "incompatible": None}, matrix_digest),
    ]


def vouched(run: RunResults) -> Weighed:
    """`run` as a report shows records the gate let through (no marks): for tests of layout and escaping; what
    weighing itself decides is tested in test_report_trust.py."""
    spec = kinds_matrix().spec
    return Weighed(run, {cell.cell_id: () for cell in run.cells}, tags=spec.tags,
                   platforms={name: base.cpu.oci for name, base in spec.bases.items()})
