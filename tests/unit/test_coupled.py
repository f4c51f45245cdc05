"""Version-coupled packages: FlashInfer's three at one release; sgl-kernel against the torch it was built for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from buildscripts.probe import core, coupled, cpu_stages
from buildscripts.verify import classify


@dataclass
class FakeDistribution:
    """What coupled.check reads of an installed distribution."""

    name: str
    version: str
    requires: list[str] = field(default_factory=list)

    @property
    def metadata(self) -> dict[str, str]:
        return {"Name": self.name}


def installed(monkeypatch: pytest.MonkeyPatch, *found: FakeDistribution) -> None:
    by_name = {coupled.name_of(d.name): d for d in found}
    monkeypatch.setattr(coupled, "_distribution", by_name.get)


def test_exact_pins_are_read_whatever_the_spelling_and_extras_are_left_out() -> None:
    assert coupled.pins(["torch==2.14.1", "Flashinfer_Python[cu13]==0.6.14", "torch_memory_saver>=0.0.9",
                         'torch>=2.12.0; extra == "b12x"', "sglang-kernel (==0.4.5)",
                         'numpy==2.1; python_version >= "3.10"']) == {
        "torch": "2.14.1", "flashinfer-python": "0.6.14", "sglang-kernel": "0.4.5", "numpy": "2.1"}
    assert coupled.pinned_matches("2.9.1", "2.9.1+cu128") and coupled.pinned_matches("2.9.*", "2.9.0")
    assert not coupled.pinned_matches("2.9.1", "2.11.0+cu130")


def test_flashinfer_packages_of_one_release_pass_and_a_drifted_one_is_named() -> None:
    assert coupled.flashinfer_problems({"flashinfer-python": "0.6.18", "flashinfer-cubin": "0.6.18",
                                        "flashinfer-jit-cache": "0.6.18+cu130"}) == []
    assert coupled.flashinfer_problems({"flashinfer-python": "0.6.18"}) == []
    found = coupled.flashinfer_problems({"flashinfer-python": "0.6.18", "flashinfer-cubin": "0.6.13",
                                         "flashinfer-jit-cache": "0.6.13+cu130"})
    assert found == [
        "flashinfer-cubin version (0.6.13) does not match flashinfer version (0.6.18, flashinfer-python)",
        "flashinfer-jit-cache version (0.6.13+cu130) does not match flashinfer version (0.6.18, flashinfer-python)"]
    assert {classify.classify(text, "import").id for text in found} == {"flashinfer-cubin-version-mismatch"}


def test_the_torch_a_kernel_was_built_for_comes_from_its_own_requirement_first() -> None:
    built, how, problems = coupled.kernel_torch(("sglang-kernel", "0.4.10"), ["torch==2.14.1"],
                                                ("sglang", "0.5.23"), ["sglang-kernel==0.4.10", "torch==2.11.0"])
    assert (built, how, problems) == ("2.14.1", "sglang-kernel 0.4.10 requires torch==2.14.1", [])


def test_then_from_a_torch_its_version_names_then_from_the_sglang_release_that_pins_both() -> None:
    assert coupled.kernel_torch(("sgl-kernel", "0.3.9+torch2.8cu128"), [], None, [])[0] == "2.8"
    built, how, problems = coupled.kernel_torch(("sglang-kernel", "0.4.5"), [], ("sglang", "0.5.16"),
                                                ["sglang-kernel==0.4.5", "torch==2.11.0"])
    assert built == "2.11.0" and how == "sglang 0.5.16 pins sglang-kernel==0.4.5 with torch==2.11.0"
    assert problems == []
    unknown = coupled.kernel_torch(("sglang-kernel", "0.4.5"), [], None, [])
    assert unknown[0] is None and "declares no torch" in unknown[1] and unknown[2] == []


def test_a_kernel_other_than_the_one_sglang_pins_is_a_mismatch() -> None:
    built, _how, problems = coupled.kernel_torch(("sglang-kernel", "0.4.6"), [], ("sglang", "0.5.16"),
                                                 ["sglang-kernel==0.4.5", "torch==2.11.0"])
    assert built is None
    assert problems == ["sglang 0.5.16 pins sglang-kernel==0.4.5, but sglang-kernel 0.4.6 is installed "
                        "(not the kernel that release was built and tested with)"]
    assert classify.classify(problems[0], "import").id == "sgl-kernel-built-for-other-torch"


def test_a_kernel_built_for_another_torch_fails_naming_both_versions() -> None:
    kernel = ("sglang-kernel", "0.4.10")
    how = "sglang-kernel 0.4.10 requires torch==2.14.1"
    assert coupled.torch_problem(kernel, "2.14.1", how, "2.14.1+cu130") == []
    assert coupled.torch_problem(kernel, None, "unknown", "2.11.0") == []
    problem = coupled.torch_problem(kernel, "2.14.1", how, "2.11.0+cu130")
    assert problem == ["sglang-kernel 0.4.10 is built for torch 2.14.1 (sglang-kernel 0.4.10 requires "
                       "torch==2.14.1), but torch 2.11.0+cu130 is installed"]
    # The cause, with versions, beats the symptom it shows at import.
    symptom = "sgl_kernel: ImportError: common_ops.abi3.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev"
    assert classify.classify(f"{symptom}; {problem[0]}", "import").id == "sgl-kernel-built-for-other-torch"


def test_check_reads_the_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, FakeDistribution("torch", "2.11.0+cu130"),
              FakeDistribution("sglang", "0.5.16", ["sglang-kernel==0.4.5", "torch==2.11.0"]),
              FakeDistribution("sglang_kernel", "0.4.5"), FakeDistribution("flashinfer-python", "0.6.14"))
    ev, problems = coupled.check()
    assert problems == []
    assert ev == {"flashinfer": {"flashinfer-python": "0.6.14"},
                  "sgl_kernel": {"distribution": "sglang-kernel", "version": "0.4.5", "built_for_torch": "2.11.0",
                                 "how": "sglang 0.5.16 pins sglang-kernel==0.4.5 with torch==2.11.0",
                                 "torch": "2.11.0+cu130"}}
    installed(monkeypatch, FakeDistribution("torch", "2.11.0+cu130"),
              FakeDistribution("sglang-kernel", "0.4.10", ["torch==2.14.1"]),
              FakeDistribution("flashinfer-python", "0.6.14"), FakeDistribution("flashinfer-cubin", "0.6.13"))
    _ev, problems = coupled.check()
    assert len(problems) == 2 and "0.6.13" in problems[0] and "built for torch 2.14.1" in problems[1]


def test_the_import_stage_fails_on_a_mismatch_even_when_every_module_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    def imported(name: str, _deadline: Any) -> dict[str, Any]:
        return {"status": core.PASSED, "summary": "ok", "log": "", "version": "1", "seconds": 0.1}

    monkeypatch.setattr(cpu_stages, "_import_one", imported)
    installed(monkeypatch, FakeDistribution("torch", "2.11.0"), FakeDistribution("sglang-kernel", "0.4.10",
                                                                                 ["torch==2.14.1"]))
    result = core.run_stage(core.Context(archs=["sm_90a"]), core.REGISTRY["import"])
    assert result["status"] == core.FAILED
    assert result["reason"].startswith("sglang-kernel 0.4.10 is built for torch 2.14.1")
    assert result["evidence"]["coupled"]["sgl_kernel"]["built_for_torch"] == "2.14.1"
    installed(monkeypatch, FakeDistribution("torch", "2.14.1"), FakeDistribution("sglang-kernel", "0.4.10",
                                                                                 ["torch==2.14.1"]))
    assert core.run_stage(core.Context(archs=["sm_90a"]), core.REGISTRY["import"])["status"] == core.PASSED
