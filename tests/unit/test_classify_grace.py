"""Failures on Grace machines (GH200, GB200, DGX Spark GB10), each recognised by its own words: an image of another
CPU platform (an amd64 image on an arm64 host), a loader asking for the CUDA runtime of another major, and a library
with no code a GB10 (sm_121) can run. The real reports behind each class are entries of the development corpus
(dev-2026-12.yaml, families platform-mismatch, cuda-major-soname and gb10-no-code); here: what the hint names, and
nearby texts that must not be taken for these classes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from buildscripts.probe import core, cpu_stages, cudatools
from buildscripts.verify import classify


def test_the_engine_warning_names_both_platforms() -> None:
    match = classify.classify(
        "WARNING: The requested image's platform (linux/amd64) does not match the detected host platform "
        "(linux/arm64/v8) and no specific platform was requested\n"
        "exec /usr/local/bin/xinference-local: exec format error", "probe")
    assert match.id == "image-platform-mismatch"
    assert "(image linux/amd64, host linux/arm64/v8)" in match.hint
    assert "/usr/local/bin/xinference-local cannot run here" in match.hint
    assert "docker pull --platform linux/arm64" in match.hint


def test_an_exec_format_error_beats_the_bare_container_exit() -> None:
    log = "container exited with status 255\nexec /usr/bin/python3: exec format error"
    assert classify.classify(log, "probe").id == "image-platform-mismatch"


def test_the_other_cuda_major_is_named() -> None:
    match = classify.classify("PyTorch: 2.9.1+cu130\nCUDA version: 13.0\n"
                              "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory")
    assert match.id == "cuda-soname-other-major"
    assert match.hint.startswith("A loader asks for libcudart.so.12, of another CUDA major than the image has (it has")
    assert "https://docs.sglang.ai/whl/cu130/" in match.hint
    older = classify.classify("OSError: libcudart.so.13: cannot open shared object file: No such file or directory\n"
                              "torch 2.11.0+cu126")
    assert (older.id, older.captured.get("library")) == ("cuda-soname-other-major", "libcudart.so.13")


def test_gb10_without_code_is_told_what_it_runs() -> None:
    match = classify.classify("RuntimeError: RMSNorm failed with error code no kernel image is available for "
                              "execution on the device\nGPU 0: NVIDIA GB10 (sm_121a)", "server")
    assert match.id == "no-code-for-gb10"
    assert "never the arch-specific sm_120a code" in match.hint and "TORCH_CUDA_ARCH_LIST=12.1a" in match.hint


@pytest.mark.parametrize(("text", "not_this"), [
    # the same soname with nothing of the other major in view: the plain missing library
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "cuda-soname-other-major"),
    # libnvrtc.so.12 missing on a GB10 without a word of CUDA 13 (sglang#13198 shape): a soname, not missing arch code
    ("GPU Info:\n* Compute capability: 121\n* Expected variant: SM121 (precise math for compatibility)\n"
     "* ImportError: libnvrtc.so.12: cannot open shared object file: No such file or directory", "no-code-for-gb10"),
    # no kernel image on another GPU
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device\nGPU: Tesla P100 (sm_60)",
     "no-code-for-gb10"),
    # Triton's ptxas that does not know sm_121a is its own class
    ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'", "no-code-for-gb10"),
    # the pruned libraries of this project's arch audit are not a platform mismatch
    ("pruned library does not load: /venv/lib/libx.so: wrong ELF class: ELFCLASS32", "image-platform-mismatch"),
])
def test_nearby_failures_are_not_taken_for_these_classes(text: str, not_this: str) -> None:
    assert classify.classify(text).id != not_this


def test_the_import_stage_names_the_other_major_the_image_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel library asking for libcudart.so.12 in an image of CUDA 13: the probe's reason says which major the
    image has (site-packages/nvidia/cu13/lib), and that is what names the class on this project's own ladder."""
    cu13 = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    cu13.mkdir(parents=True)
    (cu13 / "libcudart.so.13").write_bytes(b"")
    (cu13 / "libnvrtc.so.13").write_bytes(b"")
    log = ("Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
           "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory")
    assert cudatools.other_majors(log, [str(tmp_path / "site")]) == (
        f"the image has libcudart.so.13 ({cu13}): another CUDA major than libcudart.so.12")
    assert cudatools.other_majors(log.replace(".so.12", ".so.13"), [str(tmp_path / "site")]) is None
    assert cudatools.other_majors("ImportError: libfoo.so.1: cannot open shared object file", []) is None

    monkeypatch.setattr(cudatools, "library_dirs", lambda roots=None: [str(cu13)])
    monkeypatch.setattr("buildscripts.probe.cpu_stages.util.find_spec", lambda name: object())
    monkeypatch.setattr(core, "python_snippet", lambda code, timeout: subprocess.CompletedProcess([], 1, stdout=log))
    monkeypatch.setattr(cpu_stages, "_gpu_present", lambda: True)
    found = cpu_stages._import_one("sgl_kernel", cudatools.Deadline(60))
    assert found["status"] == core.FAILED
    assert found["summary"].endswith("(the image has libcudart.so.13 (" + str(cu13) + "): another CUDA major than "
                                     "libcudart.so.12)")
    match = classify.classify(f"sgl_kernel: {found['summary'][len('failed: '):]}\n{log}", "import")
    assert (match.id, match.captured["present"]) == ("cuda-soname-other-major", "libcudart.so.13")
