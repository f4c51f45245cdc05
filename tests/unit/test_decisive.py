"""The decisive line of a failure log, and that every report shows it for an unclassified failure.

The logs are shapes taken from real reports in the seen corpus (tests/unit/data/corpus/seen.yaml) and
from nvcc / ninja / ld output as those tools print it.
"""

from __future__ import annotations

from rich.console import Console

from buildscripts.report import common, console, html, markdown
from buildscripts.results import BuildResult, CellResult, RunResults, StageResult, Status, judge
from buildscripts.results.decisive import EVIDENCE_KEY, MAX_CHARS, decisive_line
from buildscripts.verify import classify
from tests.results_factory import vouched

CHAINED_TRACEBACK = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/flash_attn/flash_attn_interface.py", line 8, in <module>
    import flash_attn_2_cuda as flash_attn_cuda
ImportError: libcudart.so.12: cannot open shared object file: No such file or directory

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/transformers/utils/import_utils.py", line 1535
    raise RuntimeError(
RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error
"""

PREFIXED = """\
ERROR 02-21 06:30:25 core.py:291]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py"
ERROR 02-21 06:30:25 core.py:291]     gen_lens = valid_mask.sum(dim=1).tolist()
ERROR 02-21 06:30:25 core.py:291] RuntimeError: CUDA error: an illegal memory access was encountered
ERROR 02-21 06:30:25 core.py:291] CUDA kernel errors might be asynchronously reported at some other API call
"""

NINJA = """\
ninja: Entering directory `/root/.cache/flashinfer/0.6.4/89/cached_ops'
[1/3] /usr/local/cuda/bin/nvcc -c sampling.cu -o sampling.cuda.o
FAILED: sampling.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c sampling.cu -o sampling.cuda.o
/usr/local/cuda/include/cuda/std/__cccl/compiler.h(38): error: identifier "__builtin_is_constant_evaluated" is undefined
/usr/local/cuda/include/cuda/std/__cccl/compiler.h(40): error: expected a ";"
2 errors detected in the compilation of "sampling.cu".
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/flashinfer/jit/cpp_ext.py", line 299, in run_ninja
    subprocess.run(
subprocess.CalledProcessError: Command '['ninja', '-v', '-C', '/root/.cache']' returned non-zero exit status 1.
"""


def test_the_last_exception_of_a_chained_traceback_decides() -> None:
    assert decisive_line(CHAINED_TRACEBACK) == (
        "RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error")


def test_an_exception_behind_a_log_prefix_is_found_without_the_prefix() -> None:
    assert decisive_line(PREFIXED) == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_ninja_output_gives_the_first_compiler_error_not_the_python_wrapper() -> None:
    assert decisive_line(NINJA) == ('/usr/local/cuda/include/cuda/std/__cccl/compiler.h(38): error: identifier '
                                    '"__builtin_is_constant_evaluated" is undefined')


def test_nvcc_and_linker_errors_without_a_traceback() -> None:
    assert decisive_line("nvcc fatal   : Unsupported gpu architecture 'compute_120a'\ngmake[2]: *** Error 1") == (
        "nvcc fatal : Unsupported gpu architecture 'compute_120a'")
    linker = "/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status"
    assert decisive_line(linker) == "/usr/bin/ld: cannot find -lcuda: No such file or directory"


def test_an_exception_with_its_message_on_the_next_line_or_a_bare_assert() -> None:
    torch_driver = ('  File "torch/cuda/__init__.py", line 99, in _check_driver\nAssertionError: \n'
                    "Found no NVIDIA driver on your system. Please check that you\nhave an NVIDIA GPU")
    assert decisive_line(torch_driver) == (
        "AssertionError: Found no NVIDIA driver on your system. Please check that you")
    bare = 'File ".../deep_gemm/__init__.py", in _find_cuda_home\n    assert cuda_home is not None\nAssertionError'
    assert decisive_line(bare) == "AssertionError (assert cuda_home is not None)"


def test_dotted_exception_names_and_raise_lines() -> None:
    log = ('    raise exc.InvalidCxxCompiler()\n'
           "torch._inductor.exc.InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx")
    assert decisive_line(log).startswith("torch._inductor.exc.InvalidCxxCompiler: No working C++ compiler")


def test_without_exception_or_error_line_a_failure_line_then_the_last_line() -> None:
    nccl = ("x:52560:52783 [0] init.cc:426 NCCL WARN Cuda failure 'operation not supported'\n"
            "x:52560:52783 [0] NCCL INFO init.cc:1437 -> 1\n"
            "[2025-12-28 13:06:52] Scheduler hit an exception: Traceback (most recent call last):")
    assert decisive_line(nccl) == "x:52560:52783 [0] init.cc:426 NCCL WARN Cuda failure 'operation not supported'"
    assert decisive_line("loading weights\nstill loading\n\n") == "still loading"
    assert decisive_line("") == "" and decisive_line("\n \n") == ""


def test_long_lines_are_cut_and_colour_codes_removed() -> None:
    line = decisive_line("\x1b[31mRuntimeError: " + "x" * 1000 + "\x1b[0m")
    assert len(line) == MAX_CHARS and line.startswith("RuntimeError: xxx") and line.endswith("…")


def failed_cell(stage: StageResult) -> CellResult:
    return CellResult(cell_id="c", axes={"archs": "sm_90a"}, build=BuildResult(status=Status.PASSED), stages=[stage])


def test_an_unclassified_stage_keeps_its_decisive_line_and_every_report_shows_it() -> None:
    raw = StageResult(name="server", status=Status.FAILED, reason="server exited early", log_excerpt=PREFIXED)
    stage = classify.label(raw)
    line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert stage.failure_class == classify.UNCLASSIFIED and stage.evidence[EVIDENCE_KEY] == line
    assert stage.hint and "failures.yaml" in stage.hint
    cell = failed_cell(stage)
    _, why = judge(cell)
    assert why == f"failed at server: unclassified: {line}"
    assert common.outcome(cell, "server") == ("failed", f"unclassified: {line}; server exited early")
    run = RunResults(run_id="r", started="2026-11-30T10:00:00Z", cells=[cell])
    out = Console(record=True, width=400, color_system=None)
    console.summary(vouched(run), out, verbose=True)
    assert f"c: failed at server: unclassified: {line}" in out.export_text()
    assert line in markdown.table(vouched(run))
    assert line.replace('"', "&quot;") in html.render(vouched(run))


def test_stages_labelled_before_the_decisive_line_existed_still_show_one() -> None:
    old = StageResult(name="import", status=Status.FAILED, failure_class="unclassified",
                      log_excerpt="Traceback (most recent call last):\nImportError: libfoo.so.3: cannot open")
    assert judge(failed_cell(old))[1] == "failed at import: unclassified: ImportError: libfoo.so.3: cannot open"
    classified = old.model_copy(update={"failure_class": "shm-too-small"})
    assert judge(failed_cell(classified))[1] == "failed at import: shm-too-small"
