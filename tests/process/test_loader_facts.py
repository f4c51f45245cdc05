"""The probe looks one level below a load failure with the real loader: a compiled module built here with gcc
links a library that is then removed, and `ldd` (what buildscripts/probe/loaderfacts.py runs) names it; the folders a
running SGLang has on hand count as found, as they do at run time. Then the import stage's reason carries the
finding, and the classifier names the missing library from it. The toolchain stage reads the CUDA home it found
(running its nvcc for real) and says what the folder holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from buildscripts.probe import core, cpu_stages, cudatools, loaderfacts, toolchain
from buildscripts.verify import classify
from tests import needs


def build(tmp_path: Path, needed: str) -> tuple[Path, Path]:
    """(a package folder with sm90/common_ops.abi3.so linking lib<needed>.so.1, the folder of that library)."""
    gcc = needs.tool("gcc", hint="apt-get install gcc")
    needs.tool("ldd", hint="apt-get install libc-bin")
    dep = tmp_path / "deps"
    dep.mkdir()
    (dep / "dep.c").write_text("int dep_value(void) { return 7; }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(dep / f"lib{needed}.so.1"), f"-Wl,-soname,lib{needed}.so.1",
                    str(dep / "dep.c")], check=True)
    (dep / f"lib{needed}.so").symlink_to(f"lib{needed}.so.1")
    package = tmp_path / "site" / "fakekernel"
    (package / "sm90").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops.c").write_text("int dep_value(void);\nint ops_value(void) { return dep_value(); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(package / "sm90" / "common_ops.abi3.so"), str(package / "ops.c"),
                    f"-L{dep}", f"-l{needed}"], check=True)
    return package, dep


def test_ldd_names_the_library_that_is_gone_and_not_one_that_is_on_hand(tmp_path: Path) -> None:
    package, dep = build(tmp_path, "probegone")
    so = str(package / "sm90" / "common_ops.abi3.so")
    deadline = cudatools.Deadline(120)
    (dep / "libprobegone.so").unlink()
    (dep / "libprobegone.so.1").rename(package / "sm90" / "libprobegone.so.1")   # beside the module: on hand
    assert loaderfacts.unresolved([so], deadline) == {}
    (package / "sm90" / "libprobegone.so.1").unlink()                              # gone
    missing = loaderfacts.unresolved([so], deadline)
    assert missing == {"libprobegone.so.1": so}
    assert loaderfacts.describe(missing, str(package)) == (
        "ldd: libprobegone.so.1 => not found (fakekernel/sm90/common_ops.abi3.so)")


def test_the_import_stage_reason_carries_the_finding_and_fails_without_a_gpu(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU a load failure used to be skipped as "needs a GPU"; a library no driver brings fails it."""
    package, dep = build(tmp_path, "probegone")
    for path in dep.glob("libprobegone.so*"):
        path.unlink()
    log = ("ImportError: \n[sgl_kernel] CRITICAL: Could not load any common_ops library!\nError details from previous "
           "import attempts:\n- ModuleNotFoundError: No module named 'common_ops'")
    monkeypatch.setattr(loaderfacts, "package_folders", lambda name: [str(package)])
    monkeypatch.setattr("buildscripts.probe.cpu_stages.util.find_spec", lambda name: object())
    monkeypatch.setattr(core, "python_snippet", lambda code, timeout: subprocess.CompletedProcess([], 1, stdout=log))
    monkeypatch.setattr(cpu_stages, "_gpu_present", lambda: False)
    found = cpu_stages._import_one("sgl_kernel", cudatools.Deadline(120))
    assert found["status"] == core.FAILED
    assert found["summary"].endswith("(ldd: libprobegone.so.1 => not found (fakekernel/sm90/common_ops.abi3.so))")
    match = classify.classify(f"sgl_kernel: {found['summary'][len('failed: '):]}\n{log}", "import")
    assert (match.id, match.captured["library"]) == ("shared-library-missing", "libprobegone.so.1")

def test_the_toolchain_stage_says_what_the_cuda_home_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA home that is only a runtime (lib64, include) was reported as "CUDA toolkit not discoverable", and the
    hint said to set CUDA_HOME, which was set. The stage now says what the folder holds."""
    home = tmp_path / "cuda"
    (home / "lib64").mkdir(parents=True)
    (home / "include").mkdir()
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(toolchain, "_torch_view", lambda ctx, deadline, ev: {"error": "torch does not import"})
    with pytest.raises(core.StageFailed) as failed:
        toolchain.run(core.Context(archs=["sm_90a"], workdir=str(tmp_path / "work")))
    assert failed.value.reason == (f"the CUDA home {home} (found via $CUDA_HOME) has no bin/nvcc; it holds include, "
                                   "lib64")
    match = classify.classify(failed.value.reason, "toolchain")
    assert match.id == "cuda-home-without-toolkit"
    assert match.hint.startswith(f"{home} (found via $CUDA_HOME) is taken as the CUDA home but has no bin/nvcc; it "
                                 "holds include, lib64.")
    assert loaderfacts.cuda_home_problem(str(tmp_path / "gone"), "$CUDA_PATH") == (
        f"the CUDA home {tmp_path / 'gone'} (found via $CUDA_PATH) does not exist: no bin/nvcc there")
    (home / "bin").mkdir()
    (home / "bin" / "nvcc").write_text("")
    assert loaderfacts.cuda_home_problem(str(home), "$CUDA_HOME") is None   # then nvcc's own output says why
