"""Host-side interpretation of a probe run (hung, killed, crashed) and the probe's prerequisite logic."""

from __future__ import annotations

from typing import Any

from buildscripts.probe import core, cpu_stages, cudatools
from buildscripts.results import StageResult, Status
from buildscripts.verify import output, plan

PLANNED = ["facts", "import", "flavour", "arch-audit"]


def result(name: str, status: str = "passed", **extra: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "duration_s": 1.0, "evidence": {}, "where": "container (cpu)",
            **extra}


def probe_run(planned: list[str], results: list[dict[str, Any]], **kwargs: Any) -> output.ProbeRun:
    run = output.ProbeRun.of(planned, **kwargs)
    for raw in results:
        assert run.lines.offer(raw)
    return run


def test_planned_stages_follow_the_ladder_order() -> None:
    assert plan.planned_stages(["toolchain", "facts"]) == ["facts", "toolchain"]
    assert plan.planned_stages(None)[:6] == core.ORDER[:6]


def test_a_hung_stage_fails_as_probe_timeout_and_the_rest_are_aborted() -> None:
    run = probe_run(PLANNED, [result("facts")], output=["@@probe-result {}", "importing torch"], hung_stage="import")
    stages = output.interpret(run, stage_timeout=5)
    assert [(s.name, s.status) for s in stages] == [
        ("facts", Status.PASSED), ("import", Status.FAILED), ("flavour", Status.ABORTED),
        ("arch-audit", Status.ABORTED)]
    assert stages[1].failure_class == "probe-timeout"
    assert stages[1].log_excerpt and "importing torch" in stages[1].log_excerpt


def test_a_dead_container_keeps_the_stages_done_so_far() -> None:
    run = probe_run(PLANNED, [result("facts"), result("import")], output=["last words"], exit_code=None,
                    container_exit={"status": 137, "oom_killed": False})
    stages = output.interpret(run, stage_timeout=900)
    assert [s.status for s in stages[:2]] == [Status.PASSED, Status.PASSED]
    assert stages[2].name == "flavour" and stages[2].failure_class == "container-died"
    assert stages[2].reason and "137" in stages[2].reason
    assert stages[3].status is Status.ABORTED


def test_a_probe_that_cannot_start_is_one_failed_probe_stage() -> None:
    run = probe_run(PLANNED, [], output=['  File "/opt/probe/probe/core.py", line 3',
                                         "SyntaxError: future feature annotations is not defined"], exit_code=1)
    stages = output.interpret(run, stage_timeout=900)
    assert stages[0].name == "probe" and stages[0].failure_class == "python-too-old"
    assert all(s.status is Status.ABORTED for s in stages[1:])


def test_failed_results_from_the_probe_are_classified() -> None:
    failed = result("import", "failed", reason="deep_gemm: AssertionError (assert cuda_home is not None)",
                    log_excerpt="AssertionError")
    stages = output.interpret(probe_run(["facts", "import"], [result("facts"), failed]), 900)
    assert stages[1].failure_class == "cuda-home-missing"


def test_flavour_needs_torch_to_import_not_every_module() -> None:
    flavour = core.REGISTRY["flavour"]
    ctx = core.Context(archs=["sm_90a"], results={"import": {"status": "failed"},
                                                  "import:torch": {"status": "passed"}})
    missing = [n for n in flavour.needs if not ctx.passed(n)]
    assert missing == []
    ctx.results["import:torch"] = {"status": "failed"}
    assert core.run_stage(ctx, flavour)["status"] == core.ABORTED
    assert core.REGISTRY["toolchain"].needs == () and core.REGISTRY["arch-audit"].needs == ()
    assert core.REGISTRY["jit-compile"].needs == ()


def test_driver_only_import_errors_are_told_apart_from_real_ones() -> None:
    cpu_only = ("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n"
                "ModuleNotFoundError: No module named 'common_ops'")
    assert cpu_stages.NEEDS_DRIVER.search(cpu_only) and not cpu_stages.OTHER_LOAD_ERROR.search(cpu_only)
    wrong_wheel = cpu_only + "\nImportError: libnvrtc.so.12: cannot open shared object file"
    assert cpu_stages.OTHER_LOAD_ERROR.search(wrong_wheel)


def test_compiler_logs_are_reduced_to_the_telling_line() -> None:
    log = ("$ nvcc -c x.cu\n/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
           "collect2: error: ld returned 1 exit status\n")
    assert cudatools.error_line(log) == "/usr/bin/ld: cannot find -lcudart: No such file or directory"
    assert cudatools.min_nvcc("sm_100a") == (12, 8) and cudatools.min_nvcc("sm_100f") == (12, 9)
    assert cudatools.flashinfer_arch("sm_120a") == "12.0a"
    assert cudatools.gencode("sm_90a") == ["-gencode", "arch=compute_90a,code=sm_90a"]


def test_probe_sources_parse_as_python_3_8() -> None:
    import ast
    from pathlib import Path

    import buildscripts.probe as probe_pkg
    for path in sorted(Path(probe_pkg.__file__).parent.glob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_log_text_and_stage_details_are_shown_literally() -> None:
    from rich.text import Text

    from buildscripts import log
    from buildscripts.commands.verify import _detail

    stage = StageResult(name="server", status=Status.FAILED, failure_class="unclassified",
                        reason="[rank0]: RuntimeError [/] in [bold]x", hint="see [dim]the log")
    shown = Text.from_markup(_detail(stage)).plain   # what the table cell shows
    assert "[rank0]: RuntimeError [/] in [bold]x" in shown and "see [dim]the log" in shown
    with log.console.capture() as printed:
        log.info("no such file [/tmp/x]")
        log.step("c[/]", "server", "failed", 1.0, "[rank0]: died")
        log.info("repo/absent:x: failed")
    assert printed.get() == "no such file [/tmp/x]\n✕ c[/] server 1.0s [rank0]: died\nrepo/absent:x: failed\n"
