"""A failing JIT keeps the compiler's words: the kernel-smoke check runs a library whose compiler fails (a
fake nvcc, a fake deep_gemm shaped like the real one), reruns it under the library's debug switches and
keeps the compiler's first error and command; and the LXC probe's login environment, run by a real shell."""

from __future__ import annotations

import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from buildscripts.lxc.target import LOGIN_ENV
from buildscripts.probe import gpu_stages, jitlog

FAKE_NVCC = """#!/bin/sh
# nvcc's way of failing: the host compiler's error, then a non-zero exit
for a in "$@"; do case $a in *.cu) src=$a ;; esac; done
if [ ! -f "$src" ]; then
  echo "cc1plus: fatal error: $src: No such file or directory"; echo "compilation terminated."; exit 1
fi
echo "$src(3): error: identifier \\"undefined_thing\\" is undefined"; exit 1
"""

# deep_gemm's JIT as compiler.hpp writes it: the cache under $HOME/.deep_gemm, `cd tmp && nvcc tmp/.../kernel.cu`,
# the command printed only under its debug switches, nvcc's output printed by C's printf (a pipe holds it back
# until the process exits, after Python's traceback), then the assertion.
FAKE_DEEP_GEMM = '''
import atexit, os, subprocess, sys

def bf16_gemm_nt(*args):
    cache = os.path.join(os.environ.get("HOME", ""), ".deep_gemm")
    tmp = os.path.join(cache, "tmp", "11-abc")
    os.makedirs(tmp, exist_ok=True)
    code = os.path.join(tmp, "kernel.cu")
    open(code, "w").write("__global__ void k() { undefined_thing(); }\\n")
    command = "cd %s && %s %s -cubin -o %s -std=c++20" % (os.path.join(cache, "tmp"), os.environ["FAKE_NVCC"], code,
                                                       os.path.join(tmp, "kernel.cubin"))
    if os.environ.get("DG_JIT_DEBUG") or os.environ.get("DG_JIT_PRINT_COMPILER_COMMAND"):
        print("Running NVCC command: " + command, flush=True)
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    if done.returncode != 0:
        atexit.register(lambda: (sys.stdout.write("NVCC compilation failed: " + done.stdout), sys.stdout.flush()))
        raise RuntimeError('Assertion error (csrc/jit/compiler.hpp:228): false and "NVCC compilation failed"')
'''
CALL = "import deep_gemm; deep_gemm.bf16_gemm_nt()"


@pytest.fixture
def fake_deep_gemm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "site" / "deep_gemm").mkdir(parents=True)
    (tmp_path / "site" / "deep_gemm" / "__init__.py").write_text(FAKE_DEEP_GEMM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("FAKE_NVCC", str(nvcc))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_without_home_the_relative_cache_fails_and_the_compilers_line_is_kept(
        fake_deep_gemm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOME")   # what lxc-attach --clear-env and `sh -l` leave
    found = gpu_stages._kernel_check("deep_gemm", CALL, 60, {})
    assert found["ok"] is False
    assert found["error"].startswith("NVCC compilation failed: cc1plus: fatal error: .deep_gemm/tmp/11-abc/kernel.cu")
    assert "compiler.hpp:228" in found["library_error"]
    assert found["compiler"]["command"].startswith("cd .deep_gemm/tmp && ")   # only the rerun printed it
    assert found["debug_rerun"]["env"] == jitlog.DEBUG_ENV["deep_gemm"]
    assert "--- the compiler's own output ---" in found["log"] and "RuntimeError: Assertion error" in found["log"]


def test_a_real_compile_error_is_the_decisive_line(fake_deep_gemm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(fake_deep_gemm / "home"))
    found = gpu_stages._kernel_check("deep_gemm", CALL, 60, {})
    assert found["error"].endswith('kernel.cu(3): error: identifier "undefined_thing" is undefined')
    assert found["compiler"]["command"].startswith(f"cd {fake_deep_gemm}/home/.deep_gemm/tmp && ")


def test_ninja_output_in_the_exception_message_is_kept_without_a_rerun(tmp_path: Path) -> None:
    # torch's cpp_extension and FlashInfer put ninja's output on the lines below the exception line.
    code = textwrap.dedent('''
        raise RuntimeError("""Error building extension 'probe_axpy': [1/3] c++ -c main.cpp -o main.o
        FAILED: cuda.cuda.o
        /usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o -gencode=arch=compute_90,code=sm_90
        cuda.cu(7): error: identifier "axpy_kernell" is undefined
        1 error detected in the compilation of "cuda.cu".
        ninja: build stopped: subcommand failed.""")
    ''')
    found = gpu_stages._kernel_check("torch extension", code, 60, {})
    assert found["error"] == 'cuda.cu(7): error: identifier "axpy_kernell" is undefined'
    assert found["compiler"]["command"].startswith("/usr/local/cuda/bin/nvcc -c cuda.cu")
    assert "debug_rerun" not in found


def test_a_failure_that_is_no_compile_keeps_its_own_error(tmp_path: Path) -> None:
    found = gpu_stages._kernel_check("flashinfer", "raise RuntimeError('CUDA error: out of memory')", 60, {})
    assert found["error"] == "RuntimeError: CUDA error: out of memory" and "compiler" not in found


def login(script: str, env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", LOGIN_ENV, "sh",
                           script], input=stdin, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_the_login_environment_has_a_home_from_passwd_and_keeps_stdin() -> None:
    import pwd
    entry = pwd.getpwuid(os.getuid())
    said = login('echo "$HOME|$USER|$LOGNAME|$PWD"; cat', {"PATH": "/usr/bin:/bin"}, stdin="the probe's tar\n")
    assert said.splitlines() == [f"{entry.pw_dir}|{entry.pw_name}|{entry.pw_name}|{entry.pw_dir}", "the probe's tar"]
    # A HOME the container's own lxc.environment set is kept.
    assert login('echo "$HOME"', {"PATH": "/usr/bin:/bin", "HOME": "/srv/home"}) == "/srv/home"


def test_a_server_that_died_on_a_jit_keeps_the_compilers_line_however_far_up_the_log() -> None:
    from collections import deque
    from typing import Any, cast

    from buildscripts.probe import server
    lines = ["[TP0] Capture cuda graph begin.", "Running NVCC command: cd /root/.deep_gemm/tmp && nvcc k.cu -cubin",
             "NVCC compilation failed: /root/.deep_gemm/tmp/1/kernel.cu(12): error: expected a \";\""]
    lines += [f"[TP0] noise {i}" for i in range(200)]
    lines += ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
              'RuntimeError: Assertion error (compiler.hpp:228): false and "NVCC compilation failed"']
    srv = server.Server(proc=cast(Any, None), base_url="http://127.0.0.1:1", log_path="-", tail=deque(lines))
    kept = server.failure_excerpt(srv)[-6000:]   # what a stage's log_excerpt keeps
    compiler = kept.split("--- the compiler's own output ---\n", 1)[1]
    assert compiler.startswith("$ cd /root/.deep_gemm/tmp && nvcc k.cu -cubin\n")
    assert 'kernel.cu(12): error: expected a ";"' in compiler and "Traceback" in kept
