"""The README and docs/ as a reader follows them: every relative link leads to a file that exists, and the
exit-code page names every FatalError with its code (buildscripts/errors.py is the one source)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import buildscripts
from buildscripts import errors

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_exists(page: Path) -> None:
    missing = [t for t in _relative_links(page) if not (page.parent / t.split("#", 1)[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to what does not exist: {missing}"


def test_the_readme_links_to_every_docs_page() -> None:
    readme = ROOT / "README.md"
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in _relative_links(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link to: {unlinked}"


def _fatal_errors(cls: type[errors.FatalError]) -> list[type[errors.FatalError]]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _fatal_errors(child))]


def _import_every_module() -> None:
    """Every module of the package, so that every FatalError subclass is known whatever else this process ran
    (not the probe, standard library only and without one; not the scripts that run when imported)."""
    for found in pkgutil.walk_packages(buildscripts.__path__, "buildscripts."):
        name = found.name
        if not name.startswith("buildscripts.probe") and name.rsplit(".", 1)[-1] not in ("__main__", "enter_sandbox"):
            importlib.import_module(name)


def test_the_exit_code_page_names_every_fatal_error() -> None:
    page = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    found = {name: int(code) for code, name in re.findall(r"^\| (\d+) \| `(\w+)` \|", page, flags=re.MULTILINE)}
    _import_every_module()
    wanted = {cls.__name__: cls.exit_code for cls in _fatal_errors(errors.FatalError)}
    assert found == wanted
