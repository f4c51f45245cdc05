"""Warm kernel caches, lean layers and bytecode: the bake's arch naming, the verifier's warm-start
check, the size report, the matrix key and the build arguments (no Docker, no GPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from buildscripts import matrix
from buildscripts.build import base
from buildscripts.build import buildx as build
from buildscripts.lock import LockPaths
from buildscripts.matrix.schema import Toolkit
from buildscripts.probe import warmcheck
from buildscripts.report import sizes
from buildscripts.results import RunResults
from buildscripts.verify import classify
from buildscripts.verify.plan import Plan
from buildscripts.workspace import Workspace
from tests import image_scripts

ROOT = Path(__file__).resolve().parents[2]



# ------------------------------------------------------------------------------------------- bake

def test_bake_names_cache_folders_as_the_server_detects_the_device() -> None:
    bake = image_scripts.load(ROOT / "images" / "warm" / "bake.py")
    assert bake.arch_parts("sm_90a") == (9, 0, "a")
    assert bake.arch_parts("sm_100a") == (10, 0, "a")
    assert bake.arch_parts("sm_120a") == (12, 0, "f")  # SM 12.0 is detected as the 12.0f family
    assert bake.arch_parts("sm_121a") == (12, 1, "a")
    assert bake.arch_parts("sm_80") == (8, 0, "")


def test_recorded_manifest_names_what_cannot_be_baked() -> None:
    manifest = json.loads((ROOT / "images" / "warm" / "sglang-0.5.16.json").read_text())
    default = manifest["profiles"]["default"]
    assert [c["args"][0] for c in default["sglang_jit"]] == ["fused_rope", "kvcache", "activation",
                                                             "clamp_position"]
    assert default["flashinfer"] == ["flashinfer.jit.norm:gen_norm_module"]
    assert any("Triton" in line for line in manifest["first_start"])
    # The piecewise start compiled what the default one did; the flashinfer start its attention modules
    # too, FA3's prefill only where FlashInfer picks it (sm_90).
    assert manifest["profiles"]["piecewise"] == default
    assert manifest["profiles"]["reasoning"] == default  # the reasoning parser is Python: nothing more compiles
    flashinfer = manifest["profiles"]["flashinfer"]["flashinfer"]
    backends = {c["args"][0]: c.get("archs") for c in flashinfer if c["ref"].endswith(":gen_batch_prefill_module")}
    assert backends == {"fa3": ["sm_90a"], "fa2": None}
    assert {"torch.dtype": "bfloat16"} in flashinfer[0]["args"]


def test_bake_lists_a_profile_with_no_recorded_start_as_compiled_at_first_start(tmp_path: Path) -> None:
    bake = image_scripts.load(ROOT / "images" / "warm" / "bake.py")
    report = tmp_path / "r.json"
    code = bake.main([str(ROOT / "images" / "warm" / "sglang-0.5.16.json"), "--archs", "sm_90a,sm_100a",
                      "--profiles", "long-context", "--report", str(report)])
    assert code == 0
    written = json.loads(report.read_text())
    assert written["profiles"] == [] and written["not_recorded"] == ["long-context"]
    assert written["baked"] == [{"arch": "sm_90a", "built": []}, {"arch": "sm_100a", "built": []}]
    assert "everything the `long-context` profile compiles: no start of it was recorded for SGLang 0.5.16" \
        in written["first_start"]


def test_a_module_limited_to_some_gpus_is_built_for_those_only() -> None:
    bake = image_scripts.load(ROOT / "images" / "warm" / "bake.py")
    fa3 = {"ref": "m:gen", "archs": ["sm_90a"]}
    assert bake.applies(fa3, "sm_90a") and bake.applies(fa3, "sm_90")
    assert not bake.applies(fa3, "sm_100a") and not bake.applies(fa3, "sm_120a")
    assert bake.applies({"ref": "m:gen"}, "sm_120a")


def test_bake_turns_recorded_arguments_back_into_python(monkeypatch: pytest.MonkeyPatch) -> None:
    bake = image_scripts.load(ROOT / "images" / "warm" / "bake.py")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(bfloat16="torch.bfloat16"))
    assert bake._decode(["fa2", {"torch.dtype": "bfloat16"}, 64, False, {"k": [{"torch.dtype": "bfloat16"}]}]) == \
        ["fa2", "torch.bfloat16", 64, False, {"k": ["torch.bfloat16"]}]


# ------------------------------------------------------------------------------------ warm check

def test_no_bake_report_means_no_warm_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warmcheck.REPORT_ENV, str(tmp_path / "absent.json"))
    if not os.path.exists(warmcheck.REPORT):
        assert warmcheck.load_claim() is None


def test_server_env_decides_which_cache_folders_are_watched() -> None:
    claim = {"caches": {"TVM_FFI_CACHE_DIR": "/var/cache/sglang/tvm-ffi",
                        "FLASHINFER_WORKSPACE_BASE": "/var/cache/sglang/flashinfer",
                        "TRITON_CACHE_DIR": "/var/cache/sglang/triton", "SGLANG_CACHE_DIR": "/var/cache/sglang"}}
    dirs = warmcheck.watched_dirs(claim, {"TVM_FFI_CACHE_DIR": "/elsewhere"})
    assert dirs == ["/elsewhere", "/var/cache/sglang/flashinfer/.cache/flashinfer", "/var/cache/sglang/deep_gemm"]
    assert not any("triton" in d for d in dirs)  # Triton compiles at first start by design


def test_a_start_that_compiles_into_the_baked_caches_is_named(tmp_path: Path) -> None:
    module = tmp_path / "sgl_kernel_jit_rope__arch_9.0a__tvmffi_0.1.11"
    module.mkdir()
    (module / "rope.so").write_bytes(b"baked")
    watch = warmcheck.Watch([str(tmp_path)]).start()
    missing = tmp_path / "sgl_kernel_jit_clamp__arch_9.0a__tvmffi_0.1.11"
    missing.mkdir()
    (missing / "clamp.so").write_bytes(b"compiled at start")
    result = watch.stop()
    assert result["baked_files"] == 1 and result["compiled_count"] == 1
    why = warmcheck.verdict(result)
    assert why is not None and "sgl_kernel_jit_clamp" in why and "compiled at server start" in why


def test_a_warm_start_is_clean_and_an_empty_claim_is_named(tmp_path: Path) -> None:
    (tmp_path / "rope.so").write_bytes(b"baked")
    warm = warmcheck.Watch([str(tmp_path)]).start().stop()
    assert warmcheck.verdict(warm) is None
    empty = warmcheck.Watch([str(tmp_path / "none")]).start().stop()
    assert "hold no compiled kernel" in (warmcheck.verdict(empty) or "")


def test_a_false_warm_claim_has_its_own_failure_class() -> None:
    result = {"baked_files": 9, "compiled_count": 1, "compiled_files": ["/c/sgl_kernel_jit_x/x.so"],
              "compiler_processes": ["nvcc"]}
    assert classify.classify(warmcheck.verdict(result) or "", "server").id == "warm-cache-compiled-at-start"


def test_a_compile_at_start_warns_on_an_arch_the_image_baked_and_is_recorded_on_another() -> None:
    """The server came up, so a false warm claim is a warning (with what compiled), never a failure; on a GPU
    the image never baked for, compiling at start is what the claim says, a record only."""
    watched = {"baked_files": 9, "compiled_count": 2, "compiler_processes": ["nvcc"], "declared_at_start": [],
               "archs": ["sm_90a", "sm_100a"],
               "compiled_files": ["/c/sgl_kernel_jit_clamp/x.so", "/c/sgl_kernel_jit_rope/y.so"]}
    claimed = warmcheck.cold_start(watched, "sm_90")
    assert list(claimed) == ["warnings"]
    said = claimed["warnings"][0]
    assert "sgl_kernel_jit_clamp" in said and "on sm_90, an arch the image claims" in said
    other = warmcheck.cold_start(watched, "sm_120")
    assert "warnings" not in other and "the image bakes sm_90a, sm_100a" in other["cold_expected"]
    assert warmcheck.cold_start({**watched, "compiled_count": 0, "compiled_files": [], "compiler_processes": []},
                                "sm_90") == {}


def test_only_a_baked_profile_is_held_to_a_warm_start() -> None:
    claim = {"profiles": ["default", "piecewise"]}
    assert warmcheck.covers(claim, "default") and warmcheck.covers(claim, "piecewise")
    assert not warmcheck.covers(claim, "flashinfer") and not warmcheck.covers({}, "default")
    args = Plan.make(archs=["sm_90a"], lane_cuda="13.0", profile_name="flashinfer").probe_args("container")
    assert args[args.index("--server-profile") + 1] == "flashinfer"  # the probe knows which profile runs


def test_a_module_the_report_declares_may_compile_at_start() -> None:
    """FlashInfer's CUTLASS attention of the flashinfer profile compiles at first start on sm_100."""
    manifest = json.loads((ROOT / "images" / "warm" / "sglang-0.5.16.json").read_text())
    claim = {"profiles": ["flashinfer"], "compiled_at_start": {
        "flashinfer": manifest["profiles"]["flashinfer"]["compiled_at_start"]}}
    allowed = tuple(warmcheck.declared(claim, "flashinfer"))
    assert allowed == ("fmha_cutlass_sm100a",) and warmcheck.declared(claim, "default") == []
    files = ["/c/100a/cached_ops/fmha_cutlass_sm100a/fmha_cutlass_sm100a.so",
             "/c/100a/cached_ops/fmha_cutlass_sm100a/fmha.cuda.o"]
    cutlass = {"baked_files": 40, "compiled_count": 2, "compiler_processes": ["nvcc", "cicc"], "compiled_files": files}
    assert warmcheck.verdict(cutlass, allowed) is None
    assert "2 file(s) compiled" in (warmcheck.verdict(cutlass) or "")  # not declared for this profile
    norm = "/c/90a/cached_ops/norm/n.so"
    more = {**cutlass, "compiled_count": 3, "compiled_files": [*files, norm]}
    assert "1 file(s) compiled into the caches (norm)" in (warmcheck.verdict(more, allowed) or "")
    bare = {**cutlass, "compiled_count": 0, "compiled_files": []}  # a compiler ran and left nothing declared
    assert "compiler processes ran: nvcc, cicc" in (warmcheck.verdict(bare, allowed) or "")


def test_compiler_processes_fail_the_claim_too() -> None:
    result = {"baked_files": 3, "compiled_count": 0, "compiled_files": [], "compiler_processes": ["nvcc"]}
    assert "compiler processes ran: nvcc" in (warmcheck.verdict(result) or "")


# ----------------------------------------------------------------------------- lean and bytecode

def test_every_removal_in_the_lean_recipe_says_why() -> None:
    lines = [ln for ln in (ROOT / "images" / "lean" / "recipe.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines
    for line in lines:
        pattern, _, why = line.partition("#")
        assert pattern.strip() and len(why.strip()) > 20, line
        path = pattern.split(":", 1)[-1].strip()
        assert path and not path.startswith("/") and ".." not in path  # inside site-packages only


def test_every_layer_named_in_the_imports_list_exists() -> None:
    layers = {ln.split(":", 1)[0] for ln in (ROOT / "images" / "lean" / "imports.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")}
    dockerfile = (ROOT / "images" / "Dockerfile").read_text()
    assert layers == {"torch", "sglang"}
    assert all(f"finish-layer.sh {layer}" in dockerfile for layer in layers)


# ------------------------------------------------------------------------------ matrix and build

def test_warm_needs_a_cuda_home() -> None:
    with pytest.raises(ValidationError, match="warm needs cuda_home: true"):
        Toolkit(description="x", warm=True)
    assert Toolkit(description="x", warm=True, cuda_home=True).warm


def test_warm_cells_bake_when_their_sglang_was_recorded() -> None:
    # amd64's: another platform's cells bake nothing yet (test_platforms.py)
    cells = [c for c in matrix.load(ROOT / "matrix.yaml", {}).buildable() if c.toolkit.warm
             and c.platform == "linux/amd64"]
    recorded = next(c for c in cells if c.sglang.version == "0.5.16")
    recipe = build.Recipe.of(Workspace.at())
    image = base.BaseImage("sglang-images/base:x", "sha256:abc", "x", built=False)
    inside = ROOT / "lockfiles" / "bootstrap.txt"  # build arguments name files inside the build context
    locks = LockPaths(lane=inside, sglang=inside, toolkit=None)
    cell_json = inside
    args = build.build_args(recorded, image, locks, cell_json, recipe)
    assert "WARM_MODE=true" in args and "WARM_MANIFEST=images/warm/sglang-0.5.16.json" in args
    assert "WARM_ARCHS=" + ",".join(recorded.archs) in args and "LANE_CUDA=cu130" in args
    assert "WARM_PROFILES=default" in args  # `warm: true`
    toolkit = recorded.toolkit.model_copy(update={"warm": ("default", "flashinfer")})
    listed = dataclasses.replace(recorded, toolkit=toolkit)
    assert "WARM_PROFILES=default,flashinfer" in build.build_args(listed, image, locks, cell_json, recipe)
    unrecorded = [c for c in cells if c.sglang.version != "0.5.16"]
    for cell in unrecorded:  # no recorded start: built without the warm layer
        assert not any(a.startswith("WARM_") for a in build.build_args(cell, image, locks, cell_json, recipe))


# ---------------------------------------------------------------------------------------- sizes

def test_layers_are_named_by_their_stage_and_packages_sorted() -> None:
    history = [{"CreatedBy": "RUN uv pip install -r /opt/locks/lane.txt && sh lean.sh", "Size": 4_700_000_000},
               {"CreatedBy": "RUN uv pip install -r /opt/locks/sglang.txt", "Size": 4_100_000_000},
               {"CreatedBy": "RUN python3 /opt/images/warm/bake.py m.json", "Size": 40_000_000},
               {"CreatedBy": "ENV A=1", "Size": 0}, {"CreatedBy": "", "Size": 169_000_000}]
    layers = sizes.layers_from_history(history)
    assert [p.name for p in layers] == ["torch lane", "SGLang", "base image", "baked kernel caches"]
    packages = sizes.packages_from_json('noise\n[["sgl_kernel", 1024], ["nvidia/cu13", 3072000000]]\n')
    assert packages[0] == sizes.Part("nvidia/cu13", 3072000000)
    one = sizes.ImageSizes("img:x", 9_610_000_000, layers, packages)
    assert sizes.ImageSizes.from_json(json.loads(sizes.dumps([one]))[0]) == one
    table = sizes.markdown([one])
    assert "| `img:x` | 9.61 GB | torch lane 4.70 GB" in table and "`nvidia/cu13` 3.07 GB" in table


def test_the_report_lists_image_sizes_largest_first() -> None:
    run = RunResults.model_validate({"run_id": "r", "started": "2026-11-30T10:00:00+00:00", "cells": [
        {"cell_id": "small", "image": {"ref": "img:s", "size_bytes": 9_040_000_000}},
        {"cell_id": "big", "image": {"ref": "img:b", "size_bytes": 11_500_000_000}},
        {"cell_id": "unbuilt"}]})
    text = sizes.document(run)
    assert text.index("`big`") < text.index("`small`") and "11.50 GB" in text and "unbuilt" not in text
    assert "| not recorded | not recorded | not recorded | no (every kernel compiles at first start) |" in text


def test_the_sizes_page_says_what_was_pruned_and_what_still_compiles_at_first_start() -> None:
    facts = {"name": "facts", "status": "passed", "evidence": {
        "pruned_fatbins": {"libraries": 24, "saved_bytes": 1_110_000_000, "dropped_archs": ["sm_80", "sm_86"]},
        "warm_caches": {"archs": ["sm_90a", "sm_100a"], "modules": 10, "first_start": ["Triton kernels", "DeepGEMM"]},
        "largest_packages": [["nvidia/cu13", 1_650_000_000], ["torch", 1_060_000_000]]}}
    image = {"ref": "img:p", "size_bytes": 7_900_000_000,
             "layers": {"torch lane": 3_890_000_000, "SGLang": 3_220_000_000}}
    run = RunResults.model_validate({"run_id": "r", "started": "2026-11-30T10:00:00+00:00", "cells": [
        {"cell_id": "pip", "image": image, "stages": [facts]}]})
    row = next(ln for ln in sizes.document(run).splitlines() if "`pip`" in ln)
    assert "| 7.90 GB | torch lane 3.89 GB, SGLang 3.22 GB | `nvidia/cu13` 1.65 GB, `torch` 1.06 GB |" in row
    assert "| 1.11 GB from 24 libraries (sm_80, sm_86) |" in row
    assert "| 10 modules for sm_90a, sm_100a | Triton kernels; DeepGEMM |" in row



def test_what_kernel_smoke_compiled_beside_the_start_is_its_warning_not_the_servers() -> None:
    """kernel-smoke rebuilt FlashInfer's norm into the baked caches while the server started beside it (the server
    waited on FlashInfer's lock, its own session ran no compiler): kernel-smoke names it, the server does not."""
    norm = ["/c/90a/cached_ops/norm/norm.so", "/c/90a/cached_ops/norm/norm.cuda.o"]
    watched = {"baked_files": 11, "compiled_count": 2, "compiled_files": norm, "compiler_processes": [],
               "compiler_processes_beside": ["nvcc", "cicc"], "declared_at_start": [], "archs": ["sm_90a"]}
    apart = warmcheck.apart_from_checks(watched, norm, set(norm))
    assert apart == {"compiled_files": [], "compiled_count": 0, "compiled_by_checks_beside": norm}
    assert warmcheck.cold_start({**watched, **apart}, "sm_90") == {}
    # a file the checks did not write stays the server's
    rope = "/c/tvm-ffi/sgl_kernel_jit_rope/rope.so"
    more = {**watched, "compiled_count": 3, "compiled_files": [*norm, rope]}
    left = {**more, **warmcheck.apart_from_checks(more, [*norm, rope], set(norm))}
    assert left["compiled_files"] == [rope] and left["compiled_count"] == 1
    assert "sgl_kernel_jit_rope" in warmcheck.cold_start(left, "sm_90")["warnings"][0]


def test_the_servers_files_past_the_shown_ones_are_named_once_the_checks_files_are_left_out() -> None:
    """The record shows SHOWN files; what is left out comes from every file the watch saw, so the server's own files
    beyond the first SHOWN are named, never a count with no names."""
    checks = [f"/c/90a/cached_ops/norm/n{i}.o" for i in range(warmcheck.SHOWN)]
    own = ["/c/tvm-ffi/sgl_kernel_jit_clamp/clamp.so"]
    every = [*checks, *own]
    watched = {"baked_files": 11, "compiled_count": len(every), "compiled_files": every[:warmcheck.SHOWN],
               "compiler_processes": [], "declared_at_start": [], "archs": ["sm_90a"]}
    left = {**watched, **warmcheck.apart_from_checks(watched, every, set(checks))}
    assert left["compiled_files"] == own and left["compiled_count"] == 1
    said = warmcheck.cold_start(left, "sm_90")["warnings"][0]
    assert "1 file(s) compiled into the caches (sgl_kernel_jit_clamp)" in said


def test_a_server_whose_own_session_compiled_keeps_every_file() -> None:
    """A compiler in the server's session: a file both sides wrote cannot be told apart, so none is left out (and
    the checks' warning names it too: never hidden, at worst named twice)."""
    norm = ["/c/90a/cached_ops/norm/norm.so"]
    watched = {"baked_files": 11, "compiled_count": 1, "compiled_files": norm, "compiler_processes": ["nvcc"],
               "declared_at_start": [], "archs": ["sm_90a"]}
    assert warmcheck.apart_from_checks(watched, norm, set(norm)) == {}
    assert "norm" in warmcheck.cold_start(watched, "sm_90")["warnings"][0]
    assert warmcheck.apart_from_checks({**watched, "compiler_processes": []}, norm, set()) == {}


def test_kernel_smokes_compiles_are_judged_against_the_claimed_archs() -> None:
    claim = {"archs": ["sm_90a", "sm_100a"]}
    files = {"flashinfer": ["/c/90a/cached_ops/norm/norm.so", "/c/90a/cached_ops/norm/norm.cuda.o"],
             "deep_gemm": ["/c/deep_gemm/cache/kernel.abc/kernel.cubin"]}
    said = warmcheck.checks_compiled(claim, files, "sm_90")["warnings"][0]
    assert said == ("the image claims baked kernel caches but kernel-smoke compiled into them: deep_gemm: 1 file(s) "
                    "(kernel.abc); flashinfer: 2 file(s) (norm) (on sm_90, an arch the image claims baked)")
    assert list(warmcheck.checks_compiled(claim, files, "sm_120")) == ["cold_expected"]
    assert warmcheck.checks_compiled(claim, {}, "sm_90") == {}
