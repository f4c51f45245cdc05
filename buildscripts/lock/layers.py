"""Resolve the three layer locks of a cell: torch lane, SGLang on top, CUDA toolkit on top of that.

Strategy (what works with uv on PyPI today):
- lane: torch alone may pick versions that the lane's SGLang rejects (torch 2.11.0 alone pins
  cuda-bindings 13.5.0; sglang 0.5.16 then fails to resolve on it). So torch is first resolved
  jointly with an SGLang version of the lane, and the lane lock is torch's own closure resolved
  again with that joint result as constraints: every pin of torch's world, nothing of SGLang's.
- sglang: `torch==X sglang==Y` constrained by the lane lock, so that it contains the lane's
  packages at the same versions and hashes (the torch layer stays byte-identical across cells), and
  the CUDA compiler wheels its dependencies bring held on the lane's CUDA major.minor (left alone,
  they drag nvcc/crt/nvvm 13.5 in next to the 13.0 runtime).
- toolkit: the recipe constrained by the SGLang lock; a toolkit component that the SGLang layer has
  on another CUDA major.minor is the toolkit's to override. Components already on the lane's CUDA
  stay as they are, so the toolkit layer installs only what is missing, not a second compiler.
Each outcome is checked against the matrix by `drift` before a lock is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..errors import LockError
from ..matrix import Cell
from . import drift, lockfile
from .lockfile import Lockfile
from .resolver import Resolution, Target, compile_requirements
from .state import State, layer_inputs_hash, paths_for, toolkit_requirements


@dataclass(frozen=True)
class LayerOutcome:
    layer: str
    layer_id: str
    state: State
    reason: str | None = None
    lock: Lockfile | None = None
    pins: dict[str, str] = field(default_factory=dict)
    reused: bool = False
    seconds: float = 0.0


class LayerLocker:
    """Locks layers once each (cells share lane and SGLang layers) and remembers the outcome."""

    def __init__(self, locks: Path, *, logs: Path, upgrade: bool, env: Mapping[str, str], uv: str) -> None:
        self.locks, self.logs, self.upgrade, self.env, self.uv = locks, logs, upgrade, dict(env), uv
        self.done: dict[tuple[str, str], LayerOutcome] = {}
        self.written: set[Path] = set()

    # -------------------------------------------------------------- layers

    def lane(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        return self._once("lane", cell.lane_layer_id, lambda: self._lane(cell, inputs))

    def sglang(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        return self._once("sglang", cell.sglang_layer_id, lambda: self._sglang(cell, inputs))

    def toolkit(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        return self._once("toolkit", cell.id, lambda: self._toolkit(cell, inputs))

    def _once(self, layer: str, layer_id: str, make: Callable[[], LayerOutcome]) -> LayerOutcome:
        if (layer, layer_id) not in self.done:
            self.done[layer, layer_id] = make()
        return self.done[layer, layer_id]

    def _lane(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        path, lane = paths_for(cell, self.locks).lane, cell.lane
        reused = self._reusable("lane", cell.lane_layer_id, path, inputs, None)
        if reused:
            return reused
        torch = f"torch=={lane.torch}"
        shaped_by, seconds = "", 0.0
        constraints: list[str] = []
        for version in inputs["lane-sglang"]:
            joint = self._compile([torch, f"sglang=={version}"], cell, path, (), "lane-joint")
            seconds += joint.seconds
            if joint.network_failure:
                return self._unreachable("lane", cell, joint, seconds)
            if joint.ok:
                shaped_by, constraints = f"sglang=={version}", pin_lines(joint.body)
                break
        done = self._compile([torch], cell, path, constraints, "lane")
        seconds += done.seconds
        if not done.ok:
            if done.network_failure:
                return self._unreachable("lane", cell, done, seconds)
            return LayerOutcome("lane", cell.lane_layer_id, "unresolvable", f"{torch}: {done.error}",
                                seconds=seconds)
        pins = lockfile.parse_pins(done.body)
        versions = {name: pin.version for name, pin in pins.items()}
        problems = drift.lane_problems(lane, versions)
        if problems:
            reason = f"lane {lane.id}: " + "; ".join(problems)
            return LayerOutcome("lane", cell.lane_layer_id, "incompatible", reason, pins=versions,
                                seconds=seconds)
        header = self._header("lane", cell.lane_layer_id, cell, [torch], inputs=inputs)
        header["shaped-by"] = shaped_by or "(none: no SGLang of this lane resolves jointly with it)"
        return self._write("lane", cell.lane_layer_id, path, header, body=done.body, seconds=seconds)

    def _sglang(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        below = self.lane(cell, inputs)
        layer_id, path = cell.sglang_layer_id, paths_for(cell, self.locks).sglang
        if below.state != "ok" or below.lock is None:
            return LayerOutcome("sglang", layer_id, below.state, below.reason, pins=below.pins)
        reused = self._reusable("sglang", layer_id, path, inputs, below.lock)
        if reused:
            return reused
        lane, version = cell.lane, cell.sglang.version
        wanted = [f"torch=={lane.torch}", f"sglang=={version}"]
        lane_pins = pin_lines(below.lock.body)
        done = self._compile(wanted, cell, path, [*lane_pins, *inputs["sglang-compiler"]], "sglang")
        if not done.ok:
            state, reason = self._why_sglang_fails(cell, done, lane_pins)
            return LayerOutcome("sglang", layer_id, state, reason, pins=below.pins, seconds=done.seconds)
        pins = lockfile.parse_pins(done.body)
        versions = {name: pin.version for name, pin in pins.items()}
        problems = drift.sglang_problems(version, lane, versions)
        moved = sorted(n for n, pin in below.lock.pins.items() if pins.get(n) != pin)
        if moved:
            problems.append("it would change the shared torch layer: " + ", ".join(moved))
        if problems:
            reason = f"sglang {version} on {lane.id}: " + "; ".join(problems)
            return LayerOutcome("sglang", layer_id, "incompatible", reason, pins=versions,
                                seconds=done.seconds)
        header = self._header("sglang", layer_id, cell, wanted, inputs=inputs, below=below)
        return self._write("sglang", layer_id, path, header, body=done.body, seconds=done.seconds)

    def _why_sglang_fails(self, cell: Cell, failed: Resolution, lane_pins: list[str]) -> tuple[State, str]:
        """Tell SGLang's own torch pin (resolved without the lane) and a compiler that cannot stay on the
        lane's CUDA apart from other conflicts."""
        version, lane = cell.sglang.version, cell.lane
        if failed.network_failure:
            return "unresolvable", f"sglang=={version}: a package index cannot be reached: {failed.error}"
        unheld = self._compile([f"torch=={lane.torch}", f"sglang=={version}"], cell, None, lane_pins,
                               "sglang-unheld")
        if unheld.ok:
            pins = {name: pin.version for name, pin in lockfile.parse_pins(unheld.body).items()}
            skewed = drift.toolkit_skew(lane, pins)
            return "incompatible", (
                f"sglang {version} needs CUDA compiler wheels off the lane's CUDA {lane.cuda_version} "
                f"({', '.join(skewed) or 'see the log'}); the lock holds them on the lane's CUDA "
                f"(drift.compiler_constraints), so that one compiler matches torch's runtime: {failed.error}"
            )
        alone = self._compile([f"sglang=={version}"], cell, None, (), "sglang-alone")
        if not alone.ok:
            return "unresolvable", f"sglang=={version} cannot be resolved at all: {alone.error}"
        torch = lockfile.parse_pins(alone.body).get("torch")
        if torch and Version(torch.version).public != Version(lane.torch).public:
            return "incompatible", (
                f"sglang {version} pins torch {torch.version} (its own requirement, resolved without the "
                f"lane), but lane {lane.id} has torch {lane.torch} (matrix.yaml declares torch "
                f"{cell.sglang.torch} for this SGLang)"
            )
        return "incompatible", f"sglang {version} does not fit the torch layer of {cell.lane_layer_id}: " \
            + failed.error

    def _toolkit(self, cell: Cell, inputs: dict[str, Any]) -> LayerOutcome:
        below = self.sglang(cell, inputs)
        path = paths_for(cell, self.locks).toolkit
        if below.state != "ok" or below.lock is None or path is None:
            return LayerOutcome("toolkit", cell.id, below.state, below.reason, pins=below.pins)
        reused = self._reusable("toolkit", cell.id, path, inputs, below.lock)
        if reused:
            return self._coherent(cell, below, reused)
        wanted = list(toolkit_requirements(cell))
        kept = [f"{n}=={p.version}" for n, p in below.lock.pins.items() if binds_toolkit(n, p.version, cell)]
        done = self._compile(wanted, cell, path, kept, "toolkit")
        if not done.ok and not done.network_failure:
            # The recipe pins another patch of the lane's CUDA than the SGLang layer has (e.g. a newer
            # 13.0 nvcc than cuda-toolkit 13.0.2's): the toolkit then owns its components, as before.
            owned = [f"{n}=={p.version}" for n, p in below.lock.pins.items() if not drift.component_of(n)]
            done = self._compile(wanted, cell, path, owned, "toolkit-owned")
        if not done.ok:
            state: State = "unresolvable" if done.network_failure else "incompatible"
            recipe = " ".join(wanted)
            reason = f"toolkit {cell.toolkit_name} ({recipe}) on {cell.sglang_layer_id}: {done.error}"
            return LayerOutcome("toolkit", cell.id, state, reason, pins=below.pins, seconds=done.seconds)
        header = self._header("toolkit", cell.id, cell, wanted, inputs=inputs, below=below)
        lock = Lockfile(header=header, body=done.body)
        outcome = LayerOutcome("toolkit", cell.id, "ok", lock=lock, pins=lock.versions(),
                               seconds=done.seconds)
        checked = self._coherent(cell, below, outcome)
        if checked.state == "ok":
            return self._write("toolkit", cell.id, path, header, body=done.body, seconds=done.seconds)
        return checked

    def _coherent(self, cell: Cell, below: LayerOutcome, top: LayerOutcome) -> LayerOutcome:
        """Coherence is checked over what ends up installed: the SGLang layer with the toolkit over it."""
        installed = drift.overlay(below.pins, top.pins)
        skewed = drift.toolkit_skew(cell.lane, installed)
        if not skewed:
            return top
        return LayerOutcome("toolkit", cell.id, "incompatible", drift.skew_message(cell.lane, skewed),
                            pins=top.pins, seconds=top.seconds)

    # -------------------------------------------------------------- helpers

    def _compile(self, wanted: list[str], cell: Cell, prefer: Path | None, constraints: Sequence[str],
                 what: str) -> Resolution:
        target = Target(cell.base.python, cell.base.platform)
        env = dict(self.env)
        if cell.lane.index:  # the lane's own index replaces the host's
            env = {**env, "UV_DEFAULT_INDEX": cell.lane.index, "UV_INDEX": ""}
        log = self.logs / f"{cell.id}.{what}.log"  # the exact uv command and output
        return compile_requirements(wanted, target, constraints=constraints, env=env, log=log,
                                    prefer=None if self.upgrade else prefer)

    def _unreachable(self, layer: str, cell: Cell, failed: Resolution, seconds: float) -> LayerOutcome:
        where = f"the lane's index {cell.lane.index}" if cell.lane.index else "the host's package index"
        reason = f"{where} cannot be reached for lane {cell.lane.id}: {failed.error}"
        return LayerOutcome(layer, cell.lane_layer_id, "unresolvable", reason, seconds=seconds)

    def _header(self, layer: str, layer_id: str, cell: Cell, wanted: list[str], *, inputs: dict[str, Any],
                below: LayerOutcome | None = None) -> dict[str, str]:
        header = {
            "layer": f"{layer} {layer_id}",
            "python": cell.base.python,
            "platform": cell.base.platform,
            "index": cell.lane.index or "(the host's pip index)",
            "requirements": " ".join(wanted),
        }
        if below is not None and below.lock is not None:
            below_path = getattr(paths_for(cell, self.locks), below.layer)
            header["constraints"] = str(below_path.relative_to(self.locks))
            header["constraints-sha256"] = below.lock.header["content-sha256"]
        header["resolver"] = f"uv {self.uv} (uv pip compile --generate-hashes)"
        header["inputs-sha256"] = layer_inputs_hash(inputs, layer)
        return header

    def _write(self, layer: str, layer_id: str, path: Path, header: dict[str, str], *, body: str,
               seconds: float) -> LayerOutcome:
        lock = lockfile.parse(Lockfile(header=header, body=body).render(), path)
        lockfile.write(path, lock)
        self.written.add(path)
        return LayerOutcome(layer, layer_id, "ok", lock=lock, pins=lock.versions(), seconds=seconds)

    def _reusable(self, layer: str, layer_id: str, path: Path, inputs: dict[str, Any],
                  below: Lockfile | None) -> LayerOutcome | None:
        """The existing lock, when its inputs and the lock below are unchanged (and not --upgrade)."""
        if self.upgrade or not path.is_file():
            return None
        try:
            lock = lockfile.read(path)
        except LockError:
            return None
        fresh = (
            not lock.edited_by_hand()
            and lock.header.get("inputs-sha256") == layer_inputs_hash(inputs, layer)
            and (below is None or lock.header.get("constraints-sha256") == below.header["content-sha256"])
        )
        if not fresh:
            return None
        self.written.add(path)
        return LayerOutcome(layer, layer_id, "ok", lock=lock, pins=lock.versions(), reused=True)


def binds_toolkit(name: str, version: str, cell: Cell) -> bool:
    """Is the SGLang layer's pin a constraint of the toolkit lock (first attempt)? The toolkit owns its
    metapackage and any component on another CUDA major.minor; a component already on the lane's CUDA
    stays, so that the toolkit layer does not install a second copy of it. Where the recipe cannot
    resolve so, the toolkit lock owns every component (`_toolkit`)."""
    component = drift.component_of(name)
    if component is None:
        return True
    return component in drift.TOOLKIT_COMPONENTS and drift.major_minor(version) == cell.lane.cuda_version


def pin_lines(body: str) -> list[str]:
    """`name==version` constraints from a lock body (hashes are not constraints)."""
    return [f"{name}=={pin.version}" for name, pin in lockfile.parse_pins(body).items()]
