"""The compatibility-matrix view: the reachable grid (SGLang version and its torch lane down, toolkit across),
the exact pins said once, other runs listed."""

from __future__ import annotations

from html.parser import HTMLParser

from buildscripts.report import grid, html, markdown, merge
from buildscripts.results import BuildResult, ImageInfo, RunResults
from tests.results_factory import finish, make_cell, make_run, three_ci_jobs, vouched

PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
APT = "sglang0.5.16-torch2.11.0-cu130-apt-bookworm"
EXCLUDED_WHY = "sglang 0.5.16 pins torch 2.11.0; lane torch2.9.1-cu128 has torch 2.9.1"


def with_other_runs() -> RunResults:
    """make_run's five cells, a host-mode run, a run in place in LXC, and a cell of another base."""
    run = make_run()
    verified = make_cell("verified")
    host = finish(verified, cell_id="host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit",
                  axes={k: v for k, v in verified.axes.items() if k != "cell"} | {"base": "host"},
                  image=ImageInfo(ref="host", id="host:/usr/bin/python3"))
    lxc = finish(verified, cell_id=f"{verified.cell_id}@lxc-gpu1",
                 image=ImageInfo(ref="lxc:lxc:gpu1", id="lxc:lxc:gpu1"),
                 build=BuildResult(status="passed", reason="in place: lxc gpu1"))
    other_base = verified.cell_id.replace("bookworm", "ubuntu24.04")
    ubuntu = finish(verified, cell_id=other_base, axes=verified.axes | {"cell": other_base, "base": "ubuntu24.04"})
    run.cells += [host, lxc, ubuntu]
    return run


def test_layout_rows_columns_slots_and_other_runs() -> None:
    view = grid.layout(with_other_runs())
    assert view.base == "bookworm"
    assert view.versions == ["0.5.16"]
    # the cell SGLang 0.5.16's pin rules out takes no slot and no row: the grid holds what can exist
    assert view.rows == [("0.5.16", "torch2.11.0-cu130")]
    assert [c.excluded for c in view.pinned] == [EXCLUDED_WHY] and view.pins() == {"0.5.16": "2.11.0"}
    assert view.toolkits == ["none", "apt", "pip", "pip-nocccl"]   # "none" (what pip brings) first
    assert len(view.slots) == 4
    assert view.at("0.5.16", "torch2.9.1-cu128", "none") is None
    places = {c.cell_id: grid.place(c) for c in view.others}
    assert places == {
        "host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit": "host mode",
        "sglang0.5.16-torch2.11.0-cu130-pip-bookworm@lxc-gpu1": "in place in an LXC container",
        "sglang0.5.16-torch2.11.0-cu130-pip-ubuntu24.04": "in a container, base ubuntu24.04",
    }


def test_arch_line_names_verified_archs_or_marks_each() -> None:
    merged = merge.merge(three_ci_jobs())
    assert grid.arch_line(merged.cell(PIP), vouched=True) == "sm_100 · sm_120"  # type: ignore[arg-type]
    assert grid.arch_line(merged.cell(APT), vouched=True) == "✓sm_100 ✕sm_120"  # type: ignore[arg-type]
    assert grid.arch_provenance(merged.cell(APT), vouched=True)[1].startswith(  # type: ignore[arg-type]
        "sm_120: failed (NVIDIA RTX PRO 6000 Blackwell · job-sm120 · runner-b")
    assert grid.arch_line(make_cell("cpu-checked"), vouched=True) == ""


def test_markdown_reachable_grid_pins_said_once_and_other_runs() -> None:
    text = markdown.table(vouched(with_other_runs()))
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| SGLang |"))
    assert header.split(" | ")[1:4] == ["torch lane", "none", "apt"]
    row = next(line for line in lines if line.startswith("| 0.5.16 |")).split(" | ")
    assert row[1] == "torch2.11.0-cu130"
    assert row[4] == "✅ verified sm_90"         # pip
    assert not any("incompatible" in line for line in lines if line.startswith("|"))
    pins = next(line for line in lines if line.startswith("Not built for linux/amd64:"))
    assert "1 pair a SGLang release with a torch it does not pin" in pins
    assert ("- `host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit` (host mode): ✅ verified sm_90 — verified on "
            "sm_90 (NVIDIA H200)") in lines
    assert any(line.startswith("- `sglang0.5.16-torch2.11.0-cu130-pip-bookworm@lxc-gpu1`") for line in lines)
    # the stage-by-stage table stays, below the matrix, with a row for every cell that can exist
    assert lines.index(header) < lines.index("## Every cell, stage by stage")
    assert sum(line.startswith("| `") for line in lines) == 7


class _Slots(HTMLParser):
    """Every td of the #compat table: (class, title, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.depth = False, 0
        self.slots: list[dict[str, str]] = []
        self.group_headers: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.inside = "compat" in (found.get("class") or "").split()
        if self.inside and tag == "td":
            self.slots.append({"class": found.get("class", ""), "title": found.get("title", ""), "text": ""})
        if self.inside and tag == "th" and found.get("scope") == "colgroup":
            self.group_headers.append((found.get("colspan", ""), ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False

    def handle_data(self, data: str) -> None:
        if self.inside and self.slots:
            self.slots[-1]["text"] += data


def test_html_matrix_shows_the_reachable_grid_and_says_the_pins_once() -> None:
    page = html.render(vouched(with_other_runs()))
    parsed = _Slots()
    parsed.feed(page)
    assert len(parsed.slots) == 4  # one version on its one lane × four toolkits
    assert not [s for s in parsed.slots if "excluded" in s["class"]]
    assert "not built for linux/amd64: 1 pair a SGLang release with a torch it does not pin" in page
    verified = next(s for s in parsed.slots if "slot-verified" in s["class"])
    assert verified["text"] == "verifiedsm_90" and "sm_90: verified (NVIDIA H200" in verified["title"]
    assert sum("empty" in s["class"] for s in parsed.slots) == 0
    assert 'id="other-runs"' in page and "in place in an LXC container" in page
    assert page.index('class="compat"') < page.index('id="matrix"')  # the detailed table stays, below
