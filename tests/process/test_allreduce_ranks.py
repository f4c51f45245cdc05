"""The all-reduce's rank runner with real processes: stand-in rank programs (no torch here, and a CPU
backend would say nothing about NCCL), so what is shown is the runner's own work: every rank started with
its rank and world, a rank that hangs killed at the one deadline, each rank's output kept; and the network
namespace the ranks run in, for real where this process may make one (root): one namespace for all ranks,
loopback up in it, even when loopback is down where the probe runs (an LXC container's own namespace)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import allreduce, netcut
from buildscripts.verify import netns
from tests import needs

REPORTS = r"""
import json, os
print("NCCL WARN from rank", os.environ["PROBE_RANK"], os.environ.get("NCCL_SOCKET_IFNAME"))
print("@@json " + json.dumps({"rank": int(os.environ["PROBE_RANK"]), "world_size": int(os.environ["PROBE_WORLD"]),
                              "rendezvous": os.path.exists(os.environ["PROBE_RENDEZVOUS"])}))
"""

HANGS_ON_RANK_1 = r"""
import os, time
if os.environ["PROBE_RANK"] == "1":
    print("waiting for a peer", flush=True)
    time.sleep(600)
"""


def test_every_rank_gets_its_rank_and_world_and_its_output_is_kept(tmp_path: Path) -> None:
    stale = tmp_path / "allreduce-rendezvous"
    stale.write_text("an earlier run")
    ranks, _ = allreduce.run_ranks(3, str(tmp_path), 60, {}, program=REPORTS)
    assert [r["result"]["rank"] for r in ranks] == [0, 1, 2]
    assert all(r["result"]["world_size"] == 3 and r["exit_code"] == 0 for r in ranks)
    assert not any(r["result"]["rendezvous"] for r in ranks)   # the stale rendezvous file was removed
    assert "NCCL WARN from rank 2 lo" in ranks[2]["output"]


def test_a_hung_rank_is_killed_at_the_deadline_and_reported(tmp_path: Path) -> None:
    ranks, _ = allreduce.run_ranks(2, str(tmp_path), 3, {}, program=HANGS_ON_RANK_1)
    assert ranks[0]["exit_code"] == 0
    assert ranks[1]["exit_code"] is None and ranks[1]["result"] is None
    assert "waiting for a peer" in ranks[1]["output"]
    assert allreduce.judge(ranks, 2) is not None


NETWORK = r"""
import fcntl, json, os, socket, struct
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    flags = struct.unpack("16sH14s", fcntl.ioctl(sock, 0x8913, struct.pack("16sH14s", b"lo", 0, b"")))[1]
print("@@json " + json.dumps({"rank": int(os.environ["PROBE_RANK"]), "netns": os.stat("/proc/self/ns/net").st_ino,
                              "lo_up": bool(flags & 1)}))
"""
@pytest.fixture
def namespaces() -> None:
    """Network namespaces can be made and joined here (root), else `needs.unavailable` (a failure under CI=true)."""
    problem = netns.problem()
    if problem is not None:
        needs.unavailable("joining network namespaces", f"{problem}; CI runs the tests as root")


ROOT = pytest.mark.usefixtures("namespaces")


def in_a_namespace_with_loopback_down(work: Any) -> Any:
    """`work()` in a thread moved into a fresh network namespace whose loopback stays down: what an LXC container
    with its own namespace and nothing that brings `lo` up looks like from inside."""
    box: dict[str, Any] = {}

    def run() -> None:
        assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
        box["value"] = work()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["value"]


@ROOT
def test_the_ranks_share_one_namespace_of_their_own_with_loopback_up(tmp_path: Path) -> None:
    ranks, network = allreduce.run_ranks(2, str(tmp_path), 60, {}, program=NETWORK)
    assert network == {"own_namespace": True, "loopback_up": True}
    inodes = {r["result"]["netns"] for r in ranks}
    assert len(inodes) == 1 and inodes != {os.stat("/proc/self/ns/net").st_ino}   # theirs, not the probe's
    assert all(r["result"]["lo_up"] for r in ranks)


@ROOT
def test_a_probe_whose_loopback_is_down_still_gives_the_ranks_one_that_is_up(tmp_path: Path) -> None:
    ranks, network = in_a_namespace_with_loopback_down(
        lambda: allreduce.run_ranks(1, str(tmp_path), 60, {}, program=NETWORK))
    assert network["own_namespace"] is True and ranks[0]["result"]["lo_up"] is True


@ROOT
def test_where_no_namespace_is_made_a_loopback_that_is_down_is_said(tmp_path: Path) -> None:
    ranks, network = in_a_namespace_with_loopback_down(
        lambda: allreduce.run_ranks(1, str(tmp_path), 60, {}, program=NETWORK, own_network=False))
    assert network["loopback_up"] is False and ranks[0]["result"]["lo_up"] is False
    assert allreduce.NO_LOOPBACK in allreduce.loopback_note(network)


def test_without_the_right_to_make_one_the_ranks_run_here_and_say_why(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netcut, "cut", lambda: "unshare(CLONE_NEWNET): EPERM (Operation not permitted)")
    ranks, network = allreduce.run_ranks(1, str(tmp_path), 60, {}, program=NETWORK)
    assert network["own_namespace"] is False and "EPERM" in network["why_not"]
    assert ranks[0]["result"]["netns"] == os.stat("/proc/self/ns/net").st_ino
