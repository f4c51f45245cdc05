"""The locks a step builds: for every subset of the changes, what the composed layers install together is the good
set with that subset moved, entries moved whole, headers chained as the lock step chains them."""

from __future__ import annotations

import itertools

import pytest

from buildscripts.bisect.compose import composed_locks
from buildscripts.bisect.diff import compose, lock_diff
from buildscripts.bisect.sources import Side
from buildscripts.errors import BisectError
from buildscripts.lock.lockfile import Lockfile, sha256


def layer(body: str, below: Lockfile | None = None) -> Lockfile:
    header = {"layer": "test", "inputs-sha256": sha256("inputs")}
    if below is not None:
        header["constraints-sha256"] = sha256(below.body)
    return Lockfile({**header, "content-sha256": sha256(body)}, body)


def pin(name: str, version: str, via: str = "-r requirements.in") -> str:
    return f"{name}=={version} \\\n    --hash=sha256:{sha256(name + version)}\n    # via {via}\n"


def side(lane: str, top: str) -> Side:
    below = layer(lane)
    return Side("ref", ("lane", "sglang"), (below, layer(top, below)))


# The SGLang layer holds the lane's packages again (resolved against them), as the project's locks do.
GOOD = side(pin("numpy", "2.3.0") + pin("torch", "2.11.0") + pin("triton", "3.5.0", "torch"),
            pin("filecheck", "1.0.6") + pin("numpy", "2.3.0") + pin("sglang", "0.5.16") + pin("torch", "2.11.0")
            + pin("triton", "3.5.0", "torch"))
BAD = side(pin("numpy", "2.3.0") + pin("torch", "2.12.0") + pin("triton", "3.6.0", "torch"),
           pin("cython", "3.3.1", "sglang") + pin("numpy", "2.3.0") + pin("sglang", "0.5.17")
           + pin("torch", "2.12.0") + pin("triton", "3.6.0", "torch"))
CHANGES = lock_diff(GOOD.pins, BAD.pins)


def test_the_sides_differ_in_five_packages() -> None:
    assert [c.name for c in CHANGES] == ["cython", "filecheck", "sglang", "torch", "triton"]


@pytest.mark.parametrize("size", range(len(CHANGES) + 1))
def test_every_subset_installs_what_the_diff_composes(size: int) -> None:
    for subset in itertools.combinations(CHANGES, size):
        locks = composed_locks(GOOD, BAD, subset)
        assert Side("step", ("lane", "sglang"), locks).pins == compose(GOOD.pins, subset)
        assert all(not lock.edited_by_hand() for lock in locks)
        assert locks[1].header["constraints-sha256"] == sha256(locks[0].body)


def test_entries_move_whole_and_stay_in_name_order() -> None:
    torch = next(c for c in CHANGES if c.name == "torch")
    lane, top = composed_locks(GOOD, BAD, [torch])
    assert pin("torch", "2.12.0") in lane.body and pin("torch", "2.12.0") in top.body
    assert pin("triton", "3.5.0", "torch") in top.body   # not moved: still the good one
    names = [line.split("==")[0] for line in top.body.splitlines() if "==" in line]
    assert names == sorted(names)


def test_sides_of_different_layers_cannot_be_composed() -> None:
    one = Side("file", ("file",), (layer(pin("torch", "2.11.0")),))
    with pytest.raises(BisectError, match="layer lock"):
        composed_locks(GOOD, one, [])
