"""Records of a staging build and of the GPU jobs that verified what it staged, sealed as their verifiers
seal them (this test session's key), for the tests of promotion by digest.

The build record is what `build --stage` writes for a cell that passed its CPU stages; a GPU job's record is
what `verify REPO@sha256:…` writes on a GPU runner. No GPU is on the machines these tests run on, so a GPU
job's stages are fixtures (tests/results_factory.py: passed on a B200 or an RTX PRO 6000); everything else
about them (subject, image id, seal, matrix digest) is what the real commands write.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from buildscripts import matrix, results
from buildscripts.results import CellResult, RunResults, StageResult
from tests.results_factory import B200, RTX, cpu_passed, finish, gpu_passed, gpu_skipped, make_cell, of_cell, sealed

ROOT = Path(__file__).resolve().parents[1]
PIP_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
GPUS = {"sm_100": B200, "sm_120": RTX}


def arch_runners_matrix(folder: Path) -> Path:
    """The project's matrix.yaml with a runner per target arch the users own (B200, RTX PRO 6000): the CI
    verifies each cell on both, so the arch-free tag needs both. Same matrix digest (runners are not the
    matrix)."""
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["runners"]["archs"] = {"sm_100a": ["self-hosted", "linux", "x64", "gpu", "b200"],
                                "sm_120a": ["self-hosted", "linux", "x64", "gpu", "rtx-pro-6000"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cell_of(loaded: matrix.Matrix, cell_id: str = PIP_CELL) -> matrix.Cell:
    return next(c for c in loaded.cells if c.id == cell_id)


def built(cell: matrix.Cell, image_id: str, inputs: str = "0123456789ab") -> CellResult:
    """A record of `cell` built as `image_id` whose CPU stages passed (GPU stages skipped: no GPU)."""
    record = of_cell(make_cell("cpu-checked", image_id=image_id), cell)
    image = record.image.model_copy(update={"ref": f"sglang-images:{cell.id}-{inputs}", "id": image_id,
                                            "size_bytes": None})
    return finish(record, image=image,
                  stages=cpu_passed() + gpu_skipped())


def gpu_job(build: CellResult, arch: str, stages: list[StageResult] | None = None) -> CellResult:
    """What the GPU job of `arch` records for the digest `build` names: `build`'s own CPU stages (a record
    of a real run keeps its real ones) and GPU stages on that arch, the only fixture."""
    assert build.image.subject, "stage the build record first"
    image = build.image.model_copy(update={"ref": build.image.subject})
    cpu = [s for s in build.stages if s.name in results.CPU_STAGES]
    return finish(build, image=image, stages=cpu + (stages or gpu_passed(GPUS[arch], arch)))


def save(record: CellResult, path: Path, loaded: matrix.Matrix, run_id: str | None = None) -> Path:
    """`record` sealed, alone in a results file of `loaded`, at `path`."""
    run_id = run_id or path.parent.name
    digest = results.matrix_digest(loaded.spec)
    results.save(RunResults(run_id=run_id, started=results.now(), finished=record.finished or results.now(),
                            matrix=str(loaded.path), matrix_digest=digest,
                            cells=[sealed(record, matrix_digest=digest)]), path)
    return path
