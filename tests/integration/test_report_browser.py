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
from buildscripts.results import RunResults
from tests import needs
from tests.results_factory import kinds_matrix, make_cell, make_run, of_cell, vouched

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

    def evaluate(self, expression: str, *, wait: bool = False) -> Any:
        """The value of `expression`; with `wait`, of the promise it gives."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=wait)
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
    page = report.render_all(vouched(run), tmp_path / "out", env={})["html"]
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
        '.compat td.slot[data-cell="sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]');
        return [td.textContent, td.className, getComputedStyle(td).color]; })()""")
    assert slot[0] == "verifiedsm_90" and "slot-verified" in slot[1]
    assert slot[2] != "rgb(255, 255, 255)"  # readable on its light background
    # The cell an exact pin rules out takes no slot: the pin is said once under the grid.
    assert chromium.evaluate("document.querySelectorAll('.compat td.excluded').length") == 0
    assert "not built for linux/amd64: 1 pair a SGLang release with a torch it does not pin" in chromium.evaluate(
        "document.getElementById('view').textContent")
    # A click on a slot opens that cell's stages below, even when a filter had hidden its row.
    chromium.evaluate("document.querySelector('.compat td.slot-verified').click()")
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


def test_verdict_marks_render_without_an_emoji_font(chromium: DevTools, tmp_path: Path) -> None:
    """Every verdict mark is drawn from ASCII text and an SVG icon (no emoji: this machine's Chromium has no
    emoji font and drew them as empty boxes), and the icon really paints pixels on the screen."""
    page = report.render_all(vouched(with_every_verdict()), tmp_path / "out", env={})["html"]
    chromium.call("Page.enable")
    chromium.call("Page.navigate", url=page.as_uri())
    chromium.wait_for("Page.loadEventFired")
    # The verdict marks wherever they appear (matrix slots without their arch line, the badges of the stage
    # table and of the other runs): their text is the verdict word alone.
    texts = chromium.evaluate("""Array.from(document.querySelectorAll('.compat td.slot:not(.empty), .v')).map(e => {
        const c = e.cloneNode(true); c.querySelectorAll('.archs').forEach(a => a.remove());
        return c.textContent.trim(); })""")
    answer = {"CPU stages only", "fails as declared"}   # the answer's states, in words (report/common.py)
    assert set(texts) - answer == {"verified", "cpu-checked", "expected-failure", "failed", "incompatible"}, texts
    # Each badge holds an icon of a real size, not a zero-size box.
    sizes = chromium.evaluate("Array.from(document.querySelectorAll('.v')).map(b => { const r = "
                              "b.querySelector('svg.icon').getBoundingClientRect(); return [r.width, r.height]; })")
    assert sizes and all(w >= 10 and h >= 10 for w, h in sizes), sizes

    # What the screen shows where the verified slot's icon is: pixels of the icon's colour on the badge.
    box = chromium.evaluate("""(() => { const icon = document.querySelector('.compat td.slot-verified svg.icon');
        icon.scrollIntoView(); const r = icon.getBoundingClientRect();
        return {x: r.x + window.scrollX, y: r.y + window.scrollY, width: r.width, height: r.height}; })()""")
    shot = chromium.call("Page.captureScreenshot", format="png", clip={**box, "scale": 4})
    painted = chromium.evaluate(f"""new Promise(done => {{ const img = new Image(); img.onload = () => {{
        const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
        const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        const px = g.getImageData(0, 0, c.width, c.height).data; let light = 0, dark = 0;
        for (let i = 0; i < px.length; i += 4) {{ const v = px[i] + px[i + 1] + px[i + 2];
            if (v > 600) light++; else if (v < 450) dark++; }}
        done([light, dark, c.width * c.height]); }};
        img.src = 'data:image/png;base64,{shot["data"]}'; }})""", wait=True)
    light, dark, total = painted
    # The verified badge is white on dark green: a check mark is white pixels, the rest the badge's green.
    assert light > total * 0.05 and dark > total * 0.3, painted
    (tmp_path / "out" / "marks.png").write_bytes(base64.b64decode(shot["data"]))
    if os.environ.get("REPORT_SCREENSHOT"):
        full = chromium.call("Page.captureScreenshot", format="png")
        Path(os.environ["REPORT_SCREENSHOT"]).with_suffix(".marks.png").write_bytes(base64.b64decode(shot["data"]))
        Path(os.environ["REPORT_SCREENSHOT"]).with_suffix(".matrix.png").write_bytes(base64.b64decode(full["data"]))


def with_every_verdict() -> RunResults:
    """The five kinds of cell of `make_run`, and a host-mode run listed under "other runs"."""
    run = make_run()
    host = run.cells[0].model_copy(update={"cell_id": "host-h200", "axes": {}})
    return run.model_copy(update={"cells": [*run.cells, host]})


def test_html_report_has_no_external_resources(tmp_path: Path) -> None:
    text = report.html.render(vouched(make_run()))
    for needle in ("http://", "https://", "src=", "href=", "@import", "url("):
        assert needle not in text, needle


@pytest.mark.parametrize(("width", "height", "name"), [(390, 844, "phone"), (1440, 900, "desktop")])
def test_the_page_and_its_view_by_gpu_fit_a_phone_and_a_desktop(chromium: DevTools, tmp_path: Path, width: int,
                                                                  height: int, name: str) -> None:
    """At a phone's width nothing but the wide tables' own boxes scrolls sideways; at both widths the view by GPU
    says per arch what was verified (by digest, with its check command) and where nothing ran yet."""
    run = make_run()
    verified = run.cells[0].model_copy(update={"promoted": {"registry.example/sglang-images": "sha256:" + "cd" * 32}})
    arm = next(c for c in kinds_matrix().cells if c.id == "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64")
    run = run.model_copy(update={"cells": [verified, *run.cells[1:], of_cell(make_cell("cpu-checked"), arm)]})
    page = report.render_all(vouched(run), tmp_path / "out", env={})["html"]
    chromium.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=width < 600)
    for domain in ("Runtime", "Log", "Page"):
        chromium.call(f"{domain}.enable")
    chromium.call("Page.navigate", url=page.as_uri())
    chromium.wait_for("Page.loadEventFired")
    assert chromium.evaluate("document.documentElement.scrollWidth") <= width
    # the answer first: per platform and arch the tag, its state there, the check command
    answer = chromium.evaluate("""Array.from(document.querySelectorAll('#answer tbody tr')).map(r =>
        [r.dataset.platform, r.dataset.arch, r.dataset.state, r.cells[3].textContent, r.cells[5].textContent])""")
    assert ["linux/amd64", "sm_90", "verified", "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm90",
            f"nox -s check -- registry.example/sglang-images@sha256:{'cd' * 32} --arch sm_90a"] in answer
    assert ["linux/arm64", "sm_121", "cpu-only", "sglang-images:0.5.23-torch2.14.1-cu130-pip", "—"] in answer
    assert chromium.evaluate("document.getElementById('answer').getBoundingClientRect().top") < \
        chromium.evaluate("document.querySelector('table.compat').getBoundingClientRect().top")
    # the arm64 cell in its platform's grid, not among the other runs
    assert chromium.evaluate(f"""document.querySelectorAll('table.compat[data-platform="linux/arm64"] '
        + 'td.slot[data-cell="{arm.id}"]').length""") == 1
    assert arm.id not in chromium.evaluate("(document.getElementById('other-runs') || {textContent: ''}).textContent")
    text = chromium.evaluate("document.body.textContent")
    assert not [c for c in text if ord(c) >= 0x1F000 or c in "❔🔓🔏🧭🗣🕰✅"], "no emoji: no font draws them here"
    rows = chromium.evaluate("""Array.from(document.querySelectorAll('#by-gpu tbody tr[data-arch]')).map(r =>
        [r.dataset.platform, r.dataset.arch, r.cells[2].textContent])""")
    by_arch = {arch: text for platform, arch, text in rows if platform == "linux/amd64"}
    assert list(by_arch) == ["sm_90", "sm_100", "sm_103", "sm_120"]   # GB10 (sm_121) is arm64's: its own rows
    assert [arch for platform, arch, _ in rows if platform == "linux/arm64"] == ["sm_90", "sm_100", "sm_103", "sm_121"]
    assert by_arch["sm_90"].startswith("registry.example/sglang-images@sha256:cdcd")
    assert f"nox -s check -- registry.example/sglang-images@sha256:{'cd' * 32} --arch sm_90a" in by_arch["sm_90"]
    assert by_arch["sm_100"] == "nothing has run on this GPU yet"
    box = chromium.evaluate("(() => { const r = document.getElementById('by-gpu').parentElement"
                            ".getBoundingClientRect(); return [r.left, r.right]; })()")
    assert box[0] >= 0 and box[1] <= width
    shot = chromium.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    png = base64.b64decode(shot["data"])
    assert png.startswith(b"\x89PNG")
    (tmp_path / "out" / f"{name}.png").write_bytes(png)
    if os.environ.get("REPORT_SCREENSHOT"):
        Path(os.environ["REPORT_SCREENSHOT"]).with_suffix(f".{name}.png").write_bytes(png)
    assert chromium.errors() == []
