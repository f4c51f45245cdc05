"""The decisive line of a failure log: the one line a person needs to see when no failure class fits.

Python tracebacks end in the exception that stopped the program, so the last exception line
(`RuntimeError: ...`) decides; compilers, linkers and ninja print their cause first and then pages of
follow-up errors, so there the first `error:` line decides. A traceback that only reports that a
compiler failed (`CalledProcessError`, `Ninja build failed`) defers to the compiler's own error line.
"""

from __future__ import annotations

import re

MAX_CHARS = 300
EVIDENCE_KEY = "decisive_line"      # where `verify.classify.label` stores it in a stage's evidence

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `RuntimeError: x`, `torch._inductor.exc.InvalidCxxCompiler: x`, `zmq.error.ZMQError: x`, `AssertionError`,
# also behind log prefixes such as `ERROR 02-21 06:30:25 core.py:291] ` or `(Worker pid=1) `.
_EXCEPTION = re.compile(
    r"(?:^|(?<=[\s\]|>)]))((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failed|Failure)"
    r"|(?:[a-z_]\w*\.)+[A-Z][A-Za-z]+)(?::(?=\s|$)(.*)|\s*$)")
_COMPILER_ERROR = re.compile(
    r"(?i)(?:^|\W)(?:fatal error|error|fatal)\s*:|\bnvcc fatal\b|\bptxas fatal\b|\bld(?:\.\w+)?: cannot find\b"
    r"|\bundefined reference to\b|#error\b")
_NINJA_FAILED = re.compile(r"^FAILED: ")
_FAILURE_WORDS = re.compile(
    r"(?i)\b(?:error|errno|failed|failure|fatal|cannot|can't|couldn't|unable to|not found|no such file|denied"
    r"|not supported|not permitted|segmentation fault|killed|aborted|timed out)\b")
_WRAPPER = re.compile(
    r"CalledProcessError|returned non-zero exit status|Ninja build failed|subprocess-exited-with-error"
    r"|build stopped: subcommand failed|NVCC compilation failed|NVRTC compilation failed|Error building extension")


def decisive_line(text: str) -> str:
    """The line that says what went wrong, at most MAX_CHARS long; "" for an empty log."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    exception = _last_exception(lines)
    compiler = next((line.strip() for line in lines if _COMPILER_ERROR.search(line)), "")
    ninja = next((line.strip() for line in lines if _NINJA_FAILED.match(line.strip())), "")
    if exception and not (_WRAPPER.search(exception) and (compiler or ninja)):
        found = exception
    else:
        found = (compiler or exception or ninja
                 or next((line.strip() for line in lines if _FAILURE_WORDS.search(line)), "")
                 or next((line.strip() for line in reversed(lines) if line.strip()), ""))
    return _shorten(found)


def _last_exception(lines: list[str]) -> str:
    for index in range(len(lines) - 1, -1, -1):
        hit = _EXCEPTION.search(lines[index])
        if hit is None or lines[index].lstrip().startswith(("raise ", "File ", "except ")):
            continue
        name, message = hit.group(1), (hit.group(2) or "").strip()
        if not message:  # `AssertionError:` with its message on the next line(s) ...
            message = next((line.strip() for line in lines[index + 1:] if line.strip()), "")
        if not message and index and lines[index - 1].strip().startswith("assert "):
            return f"{name} ({lines[index - 1].strip()})"  # ... or a bare assert, shown above it
        return f"{name}: {message}" if message else name
    return ""


def _shorten(line: str) -> str:
    line = re.sub(r"\s+", " ", line).strip()
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"
