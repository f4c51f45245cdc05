"""`uv pip compile`, for the image's Python and platform rather than the host's.

uv does the resolving (we never hand-roll it). It runs in a scratch folder with fixed file names,
so that the `# via -r requirements.in` annotations it writes are the same on every machine.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import proc

UV_HINT = "install uv (https://docs.astral.sh/uv/): `pip install uv`"
TIMEOUT_S = 900.0
NETWORK_SIGNS = ("Failed to fetch", "Request failed", "error sending request", "dns error", "timed out")


@dataclass(frozen=True)
class Target:
    """The interpreter and wheel platform of the image (not of this host)."""

    python: str
    platform: str


@dataclass(frozen=True)
class Resolution:
    ok: bool
    body: str            # the requirements file uv wrote (no header), empty on failure
    error: str           # uv's explanation, on failure
    seconds: float

    @property
    def network_failure(self) -> bool:
        return not self.ok and any(sign in self.error for sign in NETWORK_SIGNS)


def uv_version() -> str:
    done = proc.run([proc.which("uv", hint=UV_HINT), "--version"], timeout=60)
    match = re.search(r"uv (\S+)", done.output)
    return match[1] if match else "unknown"


def compile_requirements(
    requirements: Sequence[str],
    target: Target,
    *,
    constraints: Sequence[str] = (),
    prefer: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> Resolution:
    """Resolve `requirements` with hashes; `constraints` are `name==version` lines.

    `prefer` is an earlier lock whose pins uv keeps where they still fit (no --upgrade), which is
    what keeps a re-lock after an unrelated matrix change from moving every version.
    """
    uv = proc.which("uv", hint=UV_HINT)
    with tempfile.TemporaryDirectory(prefix="lock-") as scratch:
        work = Path(scratch)
        (work / "requirements.in").write_text("\n".join(requirements) + "\n")
        argv = [
            uv, "pip", "compile", "requirements.in", "--output-file", "requirements.txt",
            "--python-version", target.python, "--python-platform", target.platform,
            "--generate-hashes", "--no-header", "--quiet",
        ]
        if constraints:
            (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
            argv += ["--constraint", "constraints.txt"]
        if prefer is not None and prefer.is_file():
            shutil.copyfile(prefer, work / "requirements.txt")
        done = proc.run(argv, cwd=work, env=dict(env or {}), log=log, timeout=TIMEOUT_S)
        output = work / "requirements.txt"
        if done.ok and output.is_file():
            return Resolution(True, output.read_text(), "", done.duration_s)
    reason = "timed out" if done.timed_out else _explain(done.output)
    return Resolution(False, "", reason, done.duration_s)


def _explain(output: str) -> str:
    """uv's error and its causes, on one line each, without the noise before them."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("error")), 0)
    text = " ".join(line.strip() for line in lines[start:] if not line.startswith("$ "))
    return text[:900] or "uv failed without a message"
