"""The verdict that travels with the bytes: one in-toto Statement per cell and GPU arch.

Predicate: the in-toto test-result predicate (https://in-toto.io/attestation/test-result/v0.1), with
`result` PASSED / WARNED / FAILED, the stages as `STAGE@ARCH` (CPU stages as `STAGE@cpu`), the inputs of the
verification as `configuration` (matrix.yaml, the lockfiles, the probe: name and sha256 each) and the CI
run's URL. Three fields of this project's own beside the predicate's:
- `arch`: the GPU arch the GPU tests ran on (the same as every `STAGE@ARCH` of a GPU test names);
- `signedAt`: when the verifier signed, ISO-8601 in UTC (`2026-12-01T21:05:09Z`): the newest verdict per
  digest and arch decides (verdicts.py);
- `imageIndex`: when the verifier was handed an index, its digest (informative: the subject is what ran);
- `cell` and `axes`: the matrix cell the image was judged as, and its coordinates: promotion takes a verdict
  as an earlier promotion of a cell's tag only when it names that cell (publish/bydigest.py).
The subject is the **platform manifest** that ran, in the registry it was verified from: for an index, the
manifest of the verifier's platform, never the index (an index's other platforms did not run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..results import GPU_STAGES, CellResult, Status, family

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"


def stage_names(cell: CellResult, arch: str) -> dict[str, list[str]]:
    """passed/warned/failed stage names of `cell` as seen on `arch` (its GPU stages of that family and
    every CPU stage); skipped and aborted stages count as failed: they did not pass."""
    out: dict[str, list[str]] = {"passed": [], "warned": [], "failed": []}
    for stage in cell.stages:
        gpu = stage.name in GPU_STAGES
        if gpu and not (stage.arch and family(stage.arch) == family(arch)):
            continue
        name = f"{stage.name}@{arch if gpu else 'cpu'}"
        if stage.status is Status.PASSED:
            out["warned" if stage.evidence.get("warnings") else "passed"].append(name)
        else:
            out["failed"].append(name)
    return out


def statement(cell: CellResult, arch: str, *, subject: str, digest: str, configuration: Mapping[str, str],
              url: str | None, signed_at: str, index: str | None = None) -> dict[str, Any]:
    """The Statement for `cell` on `arch`; `subject` is the repository, `digest` the `sha256:…` platform
    manifest that ran, `signed_at` the ISO-8601 UTC time of signing, `index` the index it was chosen from."""
    names = stage_names(cell, arch)
    gpu_ran = any(n.endswith(f"@{arch}") for n in names["passed"] + names["warned"])
    result = "FAILED" if names["failed"] or not gpu_ran else ("WARNED" if names["warned"] else "PASSED")
    predicate: dict[str, Any] = {
        "result": result,
        "configuration": [{"name": name, "digest": {"sha256": sha.removeprefix("sha256:")}}
                          for name, sha in sorted(configuration.items())],
        "passedTests": names["passed"], "warnedTests": names["warned"], "failedTests": names["failed"],
        "arch": arch, "signedAt": signed_at, "cell": cell.cell_id, "axes": dict(sorted(cell.axes.items())),
    }
    if url:
        predicate["url"] = url
    if index:
        predicate["imageIndex"] = index
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": subject, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": TEST_RESULT, "predicate": predicate}
