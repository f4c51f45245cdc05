"""`kernel-image-missing`: the kernel-smoke stage's words for an op that has no kernel image for the GPU
(probe/smokeparts.py), and nearby texts that must not be taken for it. The texts are the stage's reasons as the
probe writes them; the first is what an H100 test machine gave for sglang-kernel 0.4.5 with its sm_90 code pruned
away (evidence/h200-smoke/summary.md)."""

from __future__ import annotations

import pytest

from buildscripts.verify import classify

NO_IMAGE = ("sgl_kernel: sgl_kernel op silu_and_mul failed on sm_90 (NVIDIA H100 80GB HBM3) at its launch or the wait "
            "right after it: AcceleratorError: CUDA error: no kernel image is available for execution on the device "
            "(cudaErrorNoKernelImageForDevice)")
WRONG = ("torch-extension: torch-extension op axpy computed a wrong result (compared with torch) on sm_90 (NVIDIA "
         "H200): error 0.5 > tolerance 1e-05")


def test_the_library_the_op_the_arch_and_the_drivers_words_reach_the_hint() -> None:
    found = classify.classify(NO_IMAGE, "kernel-smoke")
    assert found.id == "kernel-image-missing"
    assert dict(found.captured) == {"library": "sgl_kernel", "op": "silu_and_mul", "arch": "sm_90",
                                    "words": "no kernel image is available for execution on the device "
                                             "(cudaErrorNoKernelImageForDevice)"}
    assert found.hint.startswith("silu_and_mul of sgl_kernel has no kernel image for sm_90 (the driver: no kernel "
                                 "image is available")
    assert "Install a build of sgl_kernel made for sm_90" in found.hint
    assert "an image whose target archs include sm_90" in found.hint


def test_with_another_part_failing_first_the_op_without_an_image_is_the_one_named() -> None:
    found = classify.classify(f"{WRONG}; {NO_IMAGE}", "kernel-smoke")
    assert found.id == "kernel-image-missing"
    assert (found.captured["library"], found.captured["op"]) == ("sgl_kernel", "silu_and_mul")


@pytest.mark.parametrize(("text", "expected"), [
    # the same words from anywhere else (no op launched and waited for by the probe): the public family
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", None),
    # a GB10: its own class explains the sm_120a rule
    (NO_IMAGE.replace("sm_90 (NVIDIA H100 80GB HBM3)", "sm_121 (NVIDIA GB10)"), "no-code-for-gb10"),
    # a compile error in view: the mend's rule (docs/classifier.md) - the compiler's error is named first
    (f"torch-extension: cuda.cu(7): error: identifier \"axpy_kernell\" is undefined; {NO_IMAGE}",
     "kernel-source-does-not-compile"),
    # a wrong result alone stays a wrong result
    (WRONG, "kernel-wrong-result"),
    # the op failed, but not for want of an image
    (NO_IMAGE.replace("no kernel image is available for execution on the device (cudaErrorNoKernelImageForDevice)",
                      "out of memory"), None),
])
def test_nearby_texts_are_not_taken_for_it(text: str, expected: str | None) -> None:
    found = classify.classify(text, "kernel-smoke").id
    assert found != "kernel-image-missing"
    if expected:
        assert found == expected


def test_arch_code_missing_no_longer_promises_the_failure_at_the_first_launch() -> None:
    hint = classify.hint_for("arch-code-missing") or ""
    assert "first launch" not in hint
    assert "no kernel image is available for execution on the device" in hint
    assert "not reliably at its launch" in hint and "possibly far from the launch" in hint
