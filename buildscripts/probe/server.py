"""Launch an HTTP server process, wait until it really answers, stop it cleanly (stdlib only).

Readiness is polling with a deadline that fails fast when the process exits: the first HTTP answer
of any status marks "HTTP up", the first 200 from the readiness path marks "ready" (for SGLang,
/health_generate: 200 only once warm-up generation has passed). On failure the caller gets the
last log lines and the last Python traceback cut out of the log, so the failure can be classified.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Deque, Dict, List, Optional, Tuple

from . import jitlog, procstat

TRACEBACK_START = "Traceback (most recent call last):"
# Python prints "ExcType: message" (or a bare "ExcType") as the last line of a traceback.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*|^[A-Z]\w*Error$")
LOG_PREFIX = re.compile(r"^\[\+\s*[\d.]+s\] ")


@dataclass
class Server:
    """A started server process (its own process group) and where its output goes."""

    proc: "subprocess.Popen[str]"
    base_url: str
    log_path: str
    started: float = field(default_factory=time.monotonic)
    tail: Deque[str] = field(default_factory=lambda: deque(maxlen=4000))
    reader: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(list(self.tail)[-lines:])


@dataclass
class Readiness:
    ready: bool
    seconds_to_http: Optional[float] = None    # first HTTP answer of any status
    seconds_to_ready: Optional[float] = None   # first 200 from the readiness path
    exit_code: Optional[int] = None             # set when the process died while we waited
    timed_out: bool = False
    last_answer: Optional[str] = None           # last status/body seen, for the failure message
    waited_s: float = 0.0

    def as_evidence(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def free_port(start: int = 30000, end: int = 40000) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (from a random point of the range)."""
    import random

    for offset in random.sample(range(end - start), 200):
        port = start + offset
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = f"no free TCP port in {start}-{end}"
    raise RuntimeError(msg)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def start(argv: List[str], port: int, log_path: str, env: Optional[Dict[str, str]] = None,
          cwd: Optional[str] = None) -> Server:
    """Start `argv` in its own session (so the whole tree can be stopped), output teed to `log_path`."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    # Closed by the reader thread when the process's output ends.
    log = open(log_path, "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
    log.write("$ " + " ".join(argv) + "\n")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                            text=True, errors="replace", bufsize=1, start_new_session=True)
    server = Server(proc, f"http://127.0.0.1:{port}", log_path)
    server.reader = threading.Thread(target=_pump, args=(server, log), daemon=True)
    server.reader.start()
    return server


def _pump(server: Server, log: IO[str]) -> None:
    assert server.proc.stdout is not None
    try:
        for line in server.proc.stdout:
            stamped = f"[+{time.monotonic() - server.started:7.2f}s] {line.rstrip()}"
            server.tail.append(stamped)
            log.write(stamped + "\n")
    finally:
        log.close()
        server.proc.stdout.close()


def http(url: str, body: Optional[Dict[str, Any]] = None, timeout: float = 5.0) -> Tuple[Optional[int], str]:
    """(status, body) of a GET (or a JSON POST when `body` is given); (None, why) when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, reset, timed out
        reason = getattr(exc, "reason", exc)
        return None, f"{type(reason).__name__}: {reason}"


def wait_ready(server: Server, path: str = "/health_generate", deadline_s: float = 900.0,
               interval_s: float = 1.0, request_timeout_s: float = 30.0) -> Readiness:
    """Poll `path` of a server process of ours until 200, the process exits (fail fast) or `deadline_s`."""
    return poll_ready(lambda timeout: http(server.base_url + path, timeout=timeout), server.proc.poll,
                      started=server.started, deadline_s=deadline_s, interval_s=interval_s,
                      request_timeout_s=request_timeout_s)


def poll_ready(ask: Callable[[float], Tuple[Optional[int], str]], exited: Callable[[], Optional[int]], *,
               started: float, deadline_s: float = 900.0, interval_s: float = 1.0,
               request_timeout_s: float = 30.0) -> Readiness:
    """Ask (`ask(timeout)` -> (status, body)) until 200, `exited()` names an exit code, or `deadline_s`
    passes since `started` (time.monotonic()). The host's observation of a server uses this too."""
    res = Readiness(ready=False)
    end = started + deadline_s
    while True:
        now = time.monotonic()
        res.exit_code = exited()
        if res.exit_code is not None:
            break
        if now >= end:
            res.timed_out = True
            break
        code, text = ask(max(0.5, min(request_timeout_s, end - now)))
        elapsed = round(time.monotonic() - started, 2)
        if code is not None and res.seconds_to_http is None:
            res.seconds_to_http = elapsed
        res.last_answer = f"{code if code is not None else 'no answer'}: {text[:200]}"
        if code == 200:
            res.ready, res.seconds_to_ready = True, elapsed
            break
        time.sleep(max(0.0, min(interval_s, end - time.monotonic())))
    if res.exit_code is None and not res.ready:
        res.exit_code = exited()
    res.waited_s = round(time.monotonic() - started, 2)
    return res


def stop(server: Server, grace_s: float = 20.0) -> Dict[str, Any]:
    """SIGTERM the process group, SIGKILL after `grace_s`; report whether anything was left behind."""
    report: Dict[str, Any] = {"exit_code": server.proc.poll(), "signal": None}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(server.proc.pid):
            break
        report["signal"] = sig.name
        try:
            os.killpg(server.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        until = time.monotonic() + grace_s
        while time.monotonic() < until and _group_alive(server.proc.pid):
            server.proc.poll()  # reap the leader so the group can empty
            time.sleep(0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(timeout=5)
    if server.reader is not None:
        server.reader.join(timeout=5)
    report["exit_code"] = server.proc.returncode
    report["processes_left"] = _group_alive(server.proc.pid)
    report["port_still_open"] = port_open(server.port)
    report["clean"] = not report["processes_left"] and not report["port_still_open"]
    return report


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader still counts for killpg; look for any non-zombie member in /proc.
    return any(_member_alive(pid, pgid) for pid in os.listdir("/proc") if pid.isdigit()) \
        if os.path.isdir("/proc") else True


def _member_alive(pid: str, pgid: int) -> bool:
    fields = procstat.fields(pid)
    return fields is not None and len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z"


def last_traceback(lines: List[str]) -> str:
    """The last Python traceback in `lines` (log stamps removed), from its header to the exception line."""
    clean = [LOG_PREFIX.sub("", line) for line in lines]
    starts = [i for i, line in enumerate(clean) if TRACEBACK_START in line]
    if not starts:
        return ""
    block = clean[starts[-1]:]
    for j, line in enumerate(block[1:], start=1):
        text = line.strip()
        # A traceback ends at the first unindented line naming an exception.
        if not line.startswith((" ", "\t")) and EXCEPTION_LINE.match(_strip_source(text)):
            return "\n".join(block[: j + 1])
    return "\n".join(block[:60])


def _strip_source(line: str) -> str:
    """Drop a logger's prefix ('[2026-... TP0] ' or 'ERROR: ') before the exception name."""
    return re.sub(r"^(\[[^\]]*\]\s*)+|^[A-Z]+:\s+", "", line)


def failure_excerpt(server: Server, lines: int = 60) -> str:
    """What a person needs to see first: the traceback, then the last lines of the log, then (when a JIT
    compile failed) the compiler's own error and the lines around it, wherever they were in the log."""
    tail = list(server.tail)
    trace = last_traceback(tail)
    recent = "\n".join(tail[-lines:])
    text = (trace + "\n--- last log lines ---\n" + recent) if trace else recent
    whole = "\n".join(tail)
    words = jitlog.compiler_words(whole) if jitlog.jit_failed(whole) else {}
    return text[-3000:] + "\n" + jitlog.excerpt(words) if words else text
