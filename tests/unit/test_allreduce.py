"""The nccl-allreduce stage's decisions: the exact sum on every rank, a hang, NCCL's words kept for the
classifier, world size 1 said as such. The rank program itself needs torch: it runs on a GPU machine
(tests/gpu); the process tests run stand-in programs through the same rank runner."""

from __future__ import annotations

from typing import Any

import pytest

from buildscripts.probe import allreduce, core, shm
from buildscripts.verify import classify

H200 = {"name": "NVIDIA H200", "arch": "sm_90", "capability": "9.0"}


def rank(i: int, world: int, **result: Any) -> dict[str, Any]:
    good = {"rank": i, "world_size": world, "backend": "nccl", "nccl": "2.28.9", "torch": "2.11.0+cu130",
            "elements": allreduce.ELEMENTS, "wrong": 0, "first": allreduce.expected(world, 0),
            "last": allreduce.expected(world, allreduce.ELEMENTS - 1), "ok": True}
    return {"rank": i, "exit_code": 0, "seconds": 3.0, "output": "", "result": {**good, **result}}


def test_the_expected_sum_is_every_ranks_contribution() -> None:
    # rank r holds index + r: two ranks give 2 * index + 1
    assert allreduce.expected(2, 0) == 1.0
    assert allreduce.expected(2, 10) == 21.0
    assert allreduce.expected(1, 7) == 7.0
    assert allreduce.expected(8, allreduce.ELEMENTS - 1) < 2 ** 24   # float32 holds every sum exactly


def test_every_rank_right_passes() -> None:
    assert allreduce.judge([rank(0, 2), rank(1, 2)], 2) is None


@pytest.mark.parametrize(("ranks", "words"), [
    ([rank(0, 2), {"rank": 1, "exit_code": -11, "output": "Segmentation fault", "result": None}],
     "rank(s) 1 printed no result (exit codes -11)"),
    ([rank(0, 2, error="DistBackendError: NCCL error"), rank(1, 2)], "rank 0: DistBackendError: NCCL error"),
    ([rank(0, 2), rank(1, 2, wrong=3, ok=False)], "rank 1 holds a wrong sum: 3 of"),
    ([rank(0, 2), rank(1, 2, first=0.0)], "rank 1 holds a wrong sum"),
])
def test_a_missing_failed_or_wrong_rank_fails(ranks: list[dict[str, Any]], words: str) -> None:
    why = allreduce.judge(ranks, 2)
    assert why is not None and words in why


def context(count: int, tmp: str) -> core.Context:
    ctx = core.Context(archs=["sm_90a"], mode="container", workdir=tmp, server_env={"NCCL_NVLS_ENABLE": "0",
                                                                                  "OTHER": "x"})
    ctx.gpu = {**H200, "count": count}
    ctx.results["gpu-visible"] = {"status": core.PASSED}
    return ctx


def run(monkeypatch: pytest.MonkeyPatch, ctx: core.Context, ranks: list[dict[str, Any]],
        network: dict[str, Any] | None = None) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake(world: int, workdir: str, timeout: float, env: dict[str, str]) -> tuple[list[dict[str, Any]],
                                                                                    dict[str, Any]]:
        seen.update(world=world, env=env, timeout=timeout)
        return ranks, net

    net = network or {"own_namespace": True, "loopback_up": True}

    monkeypatch.setattr(allreduce, "run_ranks", fake)
    result = core.run_stage(ctx, core.REGISTRY["nccl-allreduce"])
    result["seen"] = seen
    return result


def test_one_gpu_runs_world_size_one_and_says_what_that_shows(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    result = run(monkeypatch, context(1, str(tmp_path)), [rank(0, 1)])
    assert result["status"] == core.PASSED
    assert result["seen"]["world"] == 1
    assert result["evidence"]["world_size"] == 1
    assert "one GPU (no transport between GPUs)" in result["evidence"]["what_it_shows"]
    assert result["evidence"]["nccl"] == "2.28.9"
    assert "warnings" not in result["evidence"]   # a small /dev/shm matters from two GPUs on


def test_the_servers_nccl_settings_reach_the_ranks(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    result = run(monkeypatch, context(2, str(tmp_path)), [rank(0, 2), rank(1, 2)])
    assert result["seen"]["env"] == {"NCCL_NVLS_ENABLE": "0"}
    assert result["evidence"]["world_size"] == 2
    assert result["evidence"]["env"]["NCCL_SOCKET_IFNAME"] == "lo"   # loopback: the server has no route out


def test_a_hang_fails_with_its_class(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    hung = {"rank": 1, "exit_code": None, "seconds": 300.0, "output": "NCCL INFO Channel 00 via P2P/IPC",
            "result": None}
    result = run(monkeypatch, context(2, str(tmp_path)), [rank(0, 2), hung])
    assert result["status"] == core.FAILED
    assert result["reason"].startswith("nccl-allreduce hung: rank(s) 1 of 2")
    assert classify.classify(result["reason"] + "\n" + result["log_excerpt"], "nccl-allreduce").id == "nccl-hang"


@pytest.mark.parametrize(("nccl_says", "expected"), [
    ("misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, error: No "
     "space left on device (28)", "shm-too-small"),
    ("transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported between "
     "these two devices", "p2p-ipc-denied"),
])
def test_ncclS_own_words_reach_the_classifier(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, nccl_says: str,
                                              expected: str) -> None:
    failing = {**rank(1, 2, error="DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3699, unhandled system "
                                  "error (run with NCCL_DEBUG=INFO for details)", ok=False),
               "exit_code": 1, "output": nccl_says}
    result = run(monkeypatch, context(2, str(tmp_path)), [rank(0, 2), failing])
    assert result["status"] == core.FAILED
    assert nccl_says in result["log_excerpt"]
    assert classify.classify(result["reason"] + "\n" + result["log_excerpt"], "nccl-allreduce").id == expected


def test_a_small_shm_is_warned_about_from_two_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(shm, "measure", lambda: {"path": "/dev/shm", "total_bytes": 64 << 20})
    result = run(monkeypatch, context(2, str(tmp_path)), [rank(0, 2), rank(1, 2)])
    assert "--shm-size 16g" in result["evidence"]["warnings"][0]


def test_a_cpu_backend_is_never_a_pass_for_nccl(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    result = run(monkeypatch, context(1, str(tmp_path)), [rank(0, 1, backend="gloo")])
    assert result["status"] == core.SKIPPED
    assert "not NCCL" in result["reason"]


def test_without_a_gpu_it_is_skipped_like_every_gpu_stage() -> None:
    ctx = core.Context(archs=["sm_90a"])
    ctx.results["gpu-visible"] = {"status": core.SKIPPED, "reason": "no GPU visible: none"}
    result = core.run_stage(ctx, core.REGISTRY["nccl-allreduce"])
    assert result["status"] == core.SKIPPED and result["reason"] == "needs a GPU: no GPU visible: none"


def test_it_runs_after_the_kernels_and_before_the_server() -> None:
    assert core.ORDER.index("kernel-smoke") < core.ORDER.index("nccl-allreduce") < core.ORDER.index("server")


NO_SOCKET = ("bootstrap.cc:85 NCCL WARN Bootstrap : no socket interface found\n"
             "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3699, internal error - please report this issue "
             "to the NCCL developers, NCCL version 2.28.9")


def test_a_loopback_that_is_down_where_the_ranks_ran_gets_its_own_class(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Any) -> None:
    """An LXC container nothing brought lo up in, where the probe could make no namespace of its own (issue:
    'Bootstrap : no socket interface found' was unclassified, with a generic hint)."""
    failing = {**rank(0, 1, error="DistBackendError: NCCL error", ok=False), "exit_code": 1, "output": NO_SOCKET}
    network = {"own_namespace": False, "loopback_up": False, "why_not": "unshare(CLONE_NEWNET): EPERM"}
    result = run(monkeypatch, context(1, str(tmp_path)), [failing], network)
    assert result["status"] == core.FAILED
    assert allreduce.NO_LOOPBACK in result["reason"] and "EPERM" in result["reason"]
    assert result["evidence"]["network"] == network
    match = classify.classify(result["reason"] + "\n" + result["log_excerpt"], "nccl-allreduce")
    assert match.id == "no-loopback"
    assert "lxc.net.0.flags = up" in match.hint


def test_the_same_nccl_words_with_loopback_up_are_not_called_a_loopback_failure(monkeypatch: pytest.MonkeyPatch,
                                                                                tmp_path: Any) -> None:
    failing = {**rank(0, 1, error="DistBackendError: NCCL error", ok=False), "exit_code": 1, "output": NO_SOCKET}
    result = run(monkeypatch, context(1, str(tmp_path)), [failing])
    assert allreduce.NO_LOOPBACK not in result["reason"]
    assert result["evidence"]["network"]["own_namespace"] is True
    assert classify.classify(result["reason"] + "\n" + result["log_excerpt"], "nccl-allreduce").id != "no-loopback"
