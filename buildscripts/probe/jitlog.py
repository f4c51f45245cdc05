"""The compiler's own words when a JIT compile fails (stdlib only).

The JIT libraries report a failed compile in their own words ("NVCC compilation failed", "Ninja build
failed", "Error building extension") and keep what the compiler said elsewhere:
- deep_gemm prints nvcc's output with C's printf, which a pipe holds back until the process exits, so it
  lands after Python's traceback; the nvcc command it ran is printed only under DG_JIT_DEBUG or
  DG_JIT_PRINT_COMPILER_COMMAND (csrc/jit/compiler.hpp);
- FlashInfer and torch's cpp_extension put ninja's output into the exception's message, on the lines
  below the exception line; FLASHINFER_JIT_VERBOSE=1 also prints the commands ninja ran.
So a failing call is run once more with its library's debug switches, and the compiler's decisive line
(its first error) is picked out of everything it printed.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

# What a JIT library says when the compiler under it failed.
JIT_FAILED = re.compile(r"NVCC compilation failed|NVRTC compilation failed|NVCC PTX compilation failed"
                        r"|Ninja build failed|Error building extension|ninja: build stopped|subcommand failed")
# The switches that make a library print the compiler's command and output (the check's name -> env).
DEBUG_ENV = {
    "deep_gemm": {"DG_JIT_DEBUG": "1", "DG_JIT_PRINT_COMPILER_COMMAND": "1"},
    "flashinfer": {"FLASHINFER_JIT_VERBOSE": "1"},
}
# A compiler's, linker's or shell's own error line (nvcc, gcc, ptxas, ld, ninja's shell).
COMPILER_ERROR = re.compile(
    r"(?i)(?:^|[\s:(])(?:fatal error|error|fatal)\s*:|\bnvcc fatal\b|\bptxas fatal\b|\bld(?:\.\w+)?: cannot find\b"
    r"|\bundefined reference to\b|#error\b|: not found\s*$|can't cd to|No such file or directory")
# The command that ran: deep_gemm's "Running NVCC command: ...", ninja's "FAILED: out" + next line, "$ cmd".
COMMAND = re.compile(r"^(?:Running NVCC (?:PTX )?command: |Running cuobjdump command: |\$ )(.+)$")
NINJA_FAILED = re.compile(r"^FAILED: ")
WRAPPER = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception)\b.*:|^\s*File \"|Traceback \(most recent")
MAX_LINES = 40


def jit_failed(output: str) -> bool:
    return JIT_FAILED.search(output) is not None


def compiler_words(output: str) -> Dict[str, Any]:
    """{"error": the compiler's first error line, "command": the command that failed, "excerpt": the lines
    around the error}; {} when the output holds no compiler error."""
    lines = [line.rstrip() for line in output.splitlines()]
    index = _first_error(lines)
    if index is None:
        return {}
    words: Dict[str, Any] = {"error": lines[index].strip()[:300]}
    command = _command_before(lines, index)
    if command:
        words["command"] = command[:2000]
    start = max(0, index - 3)
    words["excerpt"] = "\n".join(lines[start:start + MAX_LINES])[-3000:]
    return words


def _first_error(lines: List[str]) -> Optional[int]:
    for i, line in enumerate(lines):
        # A Python exception or traceback line that quotes a compile failure is the wrapper, not the cause.
        if COMPILER_ERROR.search(line) and not WRAPPER.search(line):
            return i
    return None


def _command_before(lines: List[str], index: int) -> Optional[str]:
    for i in range(index, -1, -1):
        found = COMMAND.match(lines[i].strip())
        if found:
            return found.group(1).strip()
        if NINJA_FAILED.match(lines[i].strip()) and i + 1 < len(lines):
            return lines[i + 1].strip()
    return None


def excerpt(words: Dict[str, Any]) -> str:
    """The compiler's part of a stage's log excerpt."""
    if not words:
        return ""
    head = f"$ {words['command']}\n" if words.get("command") else ""
    return "--- the compiler's own output ---\n" + head + str(words.get("excerpt", ""))
