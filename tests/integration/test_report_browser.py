"""The HTML report in a real headless Chromium, driven over the DevTools protocol.

Loads the page from a file:// URL, fails on any console error or uncaught exception, checks the
rendered compatibility matrix (a verdict, an excluded slot greyed with its reason as title) and the
stage-by-stage table, clicks a filter, a row and a slot, and saves a screenshot next to the page.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildscripts import report
from tests import needs
from tests.results_factory import make_run

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--remote-allow-origins=*", "--window-size=1400,1000",
)


class DevTools:
    """A minimal DevTools client: send commands, collect events (console errors, exceptions)."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in self.events):
                return
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            self.events.append(json.loads(self.ws.recv()))
        raise AssertionError(f"no {method} within {timeout}s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", "")[:500])
        return found


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[DevTools]:
    binary = shutil.which("chromium-browser") or needs.tool("chromium", "apt-get install chromium")
    profile = tmp_path / "profile"
    stderr_log = tmp_path / "chromium.log"
    with stderr_log.open("wb") as stderr:
        proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    client = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = stderr_log.read_text(errors="replace")[-2000:]
                pytest.fail(f"chromium did not open its DevTools port: {tail}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        client = DevTools(pages[0]["webSocketDebuggerUrl"])
        yield client
    finally:
        if client is not None:
            client.ws.close()
        # The whole process group: chromium's helper processes go with it.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue


def test_html_report_renders_filters_and_drills_down(chromium: DevTools, tmp_path: Path) -> None:
    run = make_run()
    page = report.render_all(run, tmp_path / "out", env={})["html"]
    for domain in ("Runtime", "Log", "Page"):
        chromium.call(f"{domain}.enable")
    chromium.call("Page.navigate", url=page.as_uri())
    chromium.wait_for("Page.loadEventFired")

    rows = chromium.evaluate("document.querySelectorAll('tr.cell-row').length")
    assert rows == len(run.cells)
    verified = chromium.evaluate(
        "Array.from(document.querySelectorAll('tr.cell-row')).filter(r => r.dataset.verdict === 'verified')"
        ".map(r => r.cells[r.cells.length - 1].textContent)")
    assert verified == ["NVIDIA H200 (sm_90), in a container: all GPU stages"]
    # The log excerpt holds a <script> tag: it must show as text, not run or become an element.
    assert chromium.evaluate("document.querySelectorAll('script').length") == 1
    assert "<script>alert" in chromium.evaluate("document.body.textContent")

    # Filter by verdict = failed: exactly one row stays visible and the counter says so.
    chromium.evaluate("""(() => { const s = document.getElementById('f-verdict');
        s.value = 'failed'; s.dispatchEvent(new Event('change')); })()""")
    visible = chromium.evaluate("Array.from(document.querySelectorAll('tr.cell-row'))"
                                ".filter(r => !r.hidden).map(r => r.dataset.verdict)")
    assert visible == ["failed"]
    assert chromium.evaluate("document.getElementById('shown').textContent") == "1"

    # Click the row: its drill-down opens with the failure class, hint and log excerpt.
    chromium.evaluate("document.querySelector('tr.cell-row:not([hidden])').click()")
    detail = chromium.evaluate("document.querySelector('tr.detail:not([hidden])').textContent")
    assert "nvcc-arch-unsupported" in detail
    assert "use a CUDA toolkit >= 12.8 for sm_120a" in detail
    assert "Unsupported gpu architecture" in detail
    assert "not run on a GPU" in detail

    # The compatibility matrix above: a slot's verdict and archs, an excluded slot greyed with its reason.
    slot = chromium.evaluate("""(() => { const td = document.querySelector(
        '#compat td.slot[data-cell="sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]');
        return [td.textContent, td.className, getComputedStyle(td).color]; })()""")
    assert slot[0] == "✅ verifiedsm_90" and "slot-verified" in slot[1]
    assert slot[2] != "rgb(255, 255, 255)"  # readable on its light background
    excluded = chromium.evaluate("""(() => { const td = document.querySelector('#compat td.excluded');
        const box = td.getBoundingClientRect();
        return [td.textContent, td.title, getComputedStyle(td).color, box.width > 0 && box.height > 0]; })()""")
    assert excluded[0] == "🚫 incompatible" and excluded[3]
    assert "sglang 0.5.16 pins torch 2.11.0; lane torch2.9.1-cu128 has torch 2.9.1" in excluded[1]
    assert excluded[2] == "rgb(140, 149, 159)"  # greyed
    assert chromium.evaluate("document.querySelectorAll('#compat th[scope=colgroup]').length") == 2
    # A click on a slot opens that cell's stages below, even when a filter had hidden its row.
    chromium.evaluate("document.querySelector('#compat td.slot-verified').click()")
    opened = chromium.evaluate("Array.from(document.querySelectorAll('tr.detail:not([hidden]) h3'))"
                               ".map(h => h.textContent)")
    assert "sglang0.5.16-torch2.11.0-cu130-pip-bookworm" in opened
    assert chromium.evaluate("document.getElementById('shown').textContent") == str(len(run.cells))

    shot = chromium.call("Page.captureScreenshot", format="png")
    png = base64.b64decode(shot["data"])
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    (tmp_path / "out" / "compat.png").write_bytes(png)
    if os.environ.get("REPORT_SCREENSHOT"):  # to look at it by hand
        Path(os.environ["REPORT_SCREENSHOT"]).write_bytes(png)
    assert chromium.errors() == []


def test_html_report_has_no_external_resources(tmp_path: Path) -> None:
    text = report.html.render(make_run())
    for needle in ("http://", "https://", "src=", "href=", "@import", "url("):
        assert needle not in text, needle
