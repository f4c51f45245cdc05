"""Host mode decides from what the verifier knows (verify/apart.py): the interpreter path and import path it hands
on and what it can stat, never what the code under test says. No process is started here (a unit test cannot):
the interpreter under test is never asked anything."""

from __future__ import annotations

import os
from pathlib import Path

from buildscripts import workspace
from buildscripts.verify import apart
from buildscripts.verify.access import Who
from buildscripts.verify.treewalk import Budget

WHO = Who(61999, 61999)


def interpreter(prefix: Path, target: Path | None = None, home: Path | None = None) -> Path:
    """`prefix`/bin/python, a link to `target` (a venv) or a file; with a pyvenv.cfg naming `home`."""
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    if target is not None:
        python.symlink_to(target)
    else:
        python.write_text("#!/bin/sh\necho '[]'\n")   # what it would say of its path is never asked
    if home is not None:
        (prefix / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n")
    return python


def test_an_environment_of_its_own_is_apart(tmp_path: Path) -> None:
    mine = tmp_path / "verifier" / "lib" / "site-packages"
    mine.mkdir(parents=True)
    python = interpreter(tmp_path / "under-test")
    assert apart.why_shared(str(python), [], own=[mine], standard=set()) is None
    assert apart.why_shared(str(python), [str(tmp_path / "elsewhere")], own=[mine], standard=set()) is None


def test_a_handed_import_path_that_meets_the_verifiers_is_shared(tmp_path: Path) -> None:
    mine = tmp_path / "verifier" / "site-packages"
    (mine / "pkg").mkdir(parents=True)
    python = interpreter(tmp_path / "under-test")
    for handed in (mine, mine / "pkg", tmp_path / "verifier"):   # the same, inside it, holding it
        why = apart.why_shared(str(python), ["", str(handed)], own=[mine], standard=set())
        assert why is not None and str(mine) in why and str(handed.resolve()) in why


def test_a_venv_on_the_verifiers_base_shares_its_site_folders_whatever_pyvenv_cfg_says(tmp_path: Path) -> None:
    """The interpreter resolves into the base the verifier imports site packages from: the code under test may
    have been installed there (a --system-site-packages venv), and its pyvenv.cfg can say otherwise."""
    base = tmp_path / "usr"
    base_python = interpreter(base)
    site = base / "lib" / "python3" / "dist-packages"
    site.mkdir(parents=True)
    venv = interpreter(tmp_path / "venv", target=base_python)
    assert "dist-packages" in str(apart.why_shared(str(venv), [], own=[site], standard=set()))
    copied = interpreter(tmp_path / "copies", home=base / "bin")            # --copies: only pyvenv.cfg says the base
    assert "dist-packages" in str(apart.why_shared(str(copied), [], own=[site], standard=set()))


def test_the_verifiers_own_folder_is_not_excused() -> None:
    """The probe travels as a copy, so the package's folder (installed: a site-packages of the verifier's
    dependencies, which a user may share with the environment under test) is judged like any folder it imports."""
    assert workspace.PROJECT_ROOT.resolve() not in apart.standard_folders()


def test_the_standard_library_is_not_shared(tmp_path: Path) -> None:
    base = tmp_path / "base"
    python = interpreter(base)
    stdlib = base / "lib" / "python3.11"
    stdlib.mkdir(parents=True)
    assert apart.why_shared(str(python), [], own=[stdlib], standard={stdlib}) is None


def tree(root: Path) -> Path:
    site = root / "site-packages"
    (site / "pkg" / "sub").mkdir(parents=True)
    (site / "pkg" / "sub" / "mod.py").write_text("")
    (site / "a.pth").write_text("")
    for folder in (root, site, site / "pkg", site / "pkg" / "sub"):
        folder.chmod(0o755)
    return site


def test_a_verifier_the_identity_cannot_write_to_is_apart(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = tree(tmp_path)
    assert apart.why_writable(WHO, folders=[site]) is None


def test_anything_below_an_import_folder_the_identity_may_write_is_found(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = tree(tmp_path)
    (site / "pkg" / "sub" / "mod.py").chmod(0o666)
    why = apart.why_writable(WHO, folders=[site])
    assert why is not None and str(site / "pkg" / "sub" / "mod.py") in why
    (site / "pkg" / "sub" / "mod.py").chmod(0o644)
    (site / "a.pth").chmod(0o646)
    assert str(site / "a.pth") in str(apart.why_writable(WHO, folders=[site]))


def test_what_python_cannot_import_and_the_runs_own_folder_are_not_looked_at(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = tree(tmp_path)
    (site / "not-a-package").mkdir(mode=0o777)
    (site / "not-a-package").chmod(0o777)
    (site / "runs").mkdir()
    (site / "runs" / "home").mkdir()
    (site / "runs" / "home").chmod(0o777)                         # the identity's own folder, below the project
    (site / "runs").chmod(0o755)
    assert apart.why_writable(WHO, folders=[site], keep=[site / "runs" / "home"]) is None
    assert "home" in str(apart.why_writable(WHO, folders=[site]))


def test_a_folder_on_the_way_counts_unless_it_is_sticky(tmp_path: Path) -> None:
    tmp_path.chmod(0o1777)
    site = tree(tmp_path / "v")
    assert apart.why_writable(WHO, folders=[site]) is None      # sticky: only root may move v, which root owns
    tmp_path.chmod(0o777)
    why = apart.why_writable(WHO, folders=[site])
    assert why is not None and f"{tmp_path} (on the way to" in why
    tmp_path.chmod(0o755)


def test_a_verifier_too_big_to_look_at_whole_is_not_apart(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = tree(tmp_path)
    why = apart.why_writable(WHO, folders=[site], budget=Budget(2, 2))
    assert why is not None and "not looked at whole" in why and os.path.exists(site)
