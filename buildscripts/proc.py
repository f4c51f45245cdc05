"""The one wrapper for external commands (docker buildx, mmdebstrap, uv, ...).

List arguments only (never a shell); the command is logged shell-quoted first; output is teed to
a log file; explicit timeouts; Ctrl-C escalates interrupt -> terminate -> kill (as nox does).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from .errors import ToolMissingError


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str          # the last lines (the whole output is in the log file)
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def which(program: str, *, hint: str) -> str:
    """Absolute path of `program`, or a ToolMissingError naming the PATH searched and how to install it."""
    found = shutil.which(program)
    if found is None:
        path = os.environ.get("PATH", "")
        msg = f"{program!r} was not found on PATH ({path})"
        raise ToolMissingError(msg, hint=hint)
    return found


def quote(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def _start(argv: tuple[str, ...], *, env: Mapping[str, str] | None, cwd: Path | None,
           stdin: bool, stdout: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE if stdout else subprocess.STDOUT,
            # no input but what is given: a command never reads the verifier's terminal (nor the code under test)
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True,
        )
    except OSError as exc:  # not found, not executable (`--python /etc/passwd`), not a program at all
        why = "not found" if isinstance(exc, FileNotFoundError) else exc.strerror
        msg = f"{argv[0]!r} could not be started: {why}"
        raise ToolMissingError(msg, hint="install it, or check PATH and that it is an executable") from None


def run(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], object] | None = None,
    keep_lines: int = 400,
    stdin: bytes | None = None,
    inherit_env: bool = True,
) -> Completed:
    """Run `argv`, teeing stdout+stderr to `log`. Never raises on a non-zero exit: callers decide.

    With `inherit_env=False` the command gets `env` alone, none of this process's environment."""
    full_env = ({**os.environ, **env} if inherit_env else dict(env)) if env is not None else None
    return _run(tuple(str(a) for a in argv), _How(log=log, timeout=timeout, env=full_env, cwd=cwd, on_line=on_line,
                                                  keep_lines=keep_lines, stdin=stdin))


def run_to_file(argv: Sequence[str], out: Path, *, log: Path | None = None, timeout: float | None = None,
                env: Mapping[str, str] | None = None) -> Completed:
    """Run `argv` as `run` does, its standard output going to `out` byte for byte (a manifest whose sha256 is its
    digest); only its standard error is teed to `log`."""
    full_env = {**os.environ, **env} if env is not None else None
    return _run(tuple(str(a) for a in argv), _How(log=log, timeout=timeout, env=full_env, stdout=out))


@dataclass(frozen=True, kw_only=True)
class _How:
    """How one command runs (`run`, `run_to_file`): its log, deadline, environment, folder, input and output."""

    log: Path | None = None
    timeout: float | None = None
    env: Mapping[str, str] | None = None    # the whole environment (None: this process's)
    cwd: Path | None = None
    on_line: Callable[[str], object] | None = None
    keep_lines: int = 400
    stdin: bytes | None = None
    stdout: Path | None = None              # standard output to this file, byte for byte


def _run(argv: tuple[str, ...], how: _How) -> Completed:
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=how.keep_lines)
    log_handle = _open_log(how.log, argv)
    stdout, stdin, timeout = how.stdout, how.stdin, how.timeout
    try:
        with stdout.open("wb") if stdout is not None else nullcontext() as out:
            proc = _start(argv, env=how.env, cwd=how.cwd, stdin=bool(stdin), stdout=out)
    except BaseException:
        if log_handle:
            log_handle.close()
        raise
    stream = cast(IO[bytes], proc.stderr if stdout is not None else proc.stdout)
    reader = threading.Thread(target=_pump, args=(stream, tail, log_handle, how.on_line), daemon=True)
    reader.start()
    if stdin and proc.stdin:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        shutdown(proc)
    except KeyboardInterrupt:
        shutdown(proc)
        raise
    finally:
        reader.join(timeout=10)
        duration = time.monotonic() - started
        if log_handle:
            note = " (timed out)" if timed_out else ""
            log_handle.write(f"# exit {proc.returncode} after {duration:.1f}s{note}\n")
            log_handle.close()
    return Completed(argv, proc.returncode if proc.returncode is not None else -1, "\n".join(tail),
                     duration, timed_out)


def _open_log(log: Path | None, argv: Sequence[str]) -> IO[str] | None:
    """The command's log, opened to append, the command shell-quoted as its first line (None: no log)."""
    if log is None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = log.open("a", encoding="utf-8")
    handle.write(f"$ {quote(argv)}\n")
    handle.flush()
    return handle


def _pump(stream: IO[bytes], tail: deque[str], log_handle: IO[str] | None,
          on_line: Callable[[str], object] | None) -> None:
    """The command's output, line by line as it comes: into `tail`, the log and `on_line`."""
    # `with` closes the pipe: else a ResourceWarning per command (an error under pytest -W error)
    with stream:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(line)
            if log_handle:
                log_handle.write(line + "\n")
                log_handle.flush()
            if on_line:
                on_line(line)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write a child's input in a thread, so that the timeout covers a child that never reads it; a child that
    exits before reading all of it closes the pipe, which ends the input (its exit status says why)."""
    with suppress(OSError), pipe:
        pipe.write(data)


def shutdown(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Interrupt, then terminate, then kill the process group (nox's popen.shutdown_process)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
