"""Per-GPU verification: one container per GPU, side by side (as users run one server per GPU), each
verified with the whole ladder; a stage passes only where it passed on every GPU."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from ..results import StageResult, Status
from .gpus import Discovery, Gpu, container_options
from .one_image import verify_image
from .request import VerificationRequest

if TYPE_CHECKING:
    import docker

T = TypeVar("T")


def per_gpu(discovery: Discovery, verify_one: Callable[[Gpu], T]) -> list[T]:
    """Run `verify_one` once per GPU, side by side (one container or process per GPU), in GPU order."""
    if not discovery.gpus:
        return []
    with ThreadPoolExecutor(max_workers=len(discovery.gpus), thread_name_prefix="gpu") as pool:
        return list(pool.map(verify_one, discovery.gpus))


def verify_per_gpu(client: docker.DockerClient, image: str,
                   request: VerificationRequest) -> dict[int, list[StageResult]]:
    """{gpu index: its stage results}, one container per GPU side by side; logs go to the request's gpu<i>/.
    The request's network options apply to every container; each container's GPU facts are its own GPU's, and
    each server is observed by the host in its own container's network."""
    discovery = request.provision.discovery

    def one(gpu: Gpu) -> list[StageResult]:
        return verify_image(client, image, request.on_gpu(gpu, container_options(discovery, gpu.index)))

    return dict(zip([g.index for g in discovery.gpus], per_gpu(discovery, one), strict=True))


def combine_per_gpu(by_gpu: Mapping[int, Sequence[StageResult]]) -> list[StageResult]:
    """One ladder from several GPUs' ladders: a stage passes only where it passed on every GPU.

    The first GPU's results stand unless another GPU did worse at that stage; then that GPU's
    result stands, its reason naming the GPU. Each stage's evidence lists the status per GPU.
    """
    rank = {Status.PASSED: 0, Status.SKIPPED: 1, Status.ABORTED: 2, Status.FAILED: 3}
    first, *_ = by_gpu.values()
    combined = []
    for position, stage in enumerate(first):
        per = {i: stages[position] for i, stages in by_gpu.items() if position < len(stages)}
        index, worst = max(per.items(), key=lambda item: rank[item[1].status])
        chosen = stage if rank[worst.status] <= rank[stage.status] else worst.model_copy(
            update={"reason": f"on GPU {index}: {worst.reason or worst.status.value}"})
        evidence = {**chosen.evidence, "per_gpu": {str(i): s.status.value for i, s in per.items()}}
        combined.append(chosen.model_copy(update={"evidence": evidence}))
    return combined
