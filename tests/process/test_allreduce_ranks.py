"""The all-reduce's rank runner with real processes: stand-in rank programs (no torch here, and a CPU
backend would say nothing about NCCL), so what is shown is the runner's own work: every rank started with
its rank and world, a rank that hangs killed at the one deadline, each rank's output kept."""

from __future__ import annotations

from pathlib import Path

from buildscripts.probe import allreduce

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
    ranks = allreduce.run_ranks(3, str(tmp_path), 60, {}, program=REPORTS)
    assert [r["result"]["rank"] for r in ranks] == [0, 1, 2]
    assert all(r["result"]["world_size"] == 3 and r["exit_code"] == 0 for r in ranks)
    assert not any(r["result"]["rendezvous"] for r in ranks)   # the stale rendezvous file was removed
    assert "NCCL WARN from rank 2 lo" in ranks[2]["output"]


def test_a_hung_rank_is_killed_at_the_deadline_and_reported(tmp_path: Path) -> None:
    ranks = allreduce.run_ranks(2, str(tmp_path), 3, {}, program=HANGS_ON_RANK_1)
    assert ranks[0]["exit_code"] == 0
    assert ranks[1]["exit_code"] is None and ranks[1]["result"] is None
    assert "waiting for a peer" in ranks[1]["output"]
    assert allreduce.judge(ranks, 2) is not None
