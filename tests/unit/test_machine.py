"""Bringing up the machine before `nox -s build` / `nox -s tests` (buildscripts/machine.py), with the needs
and the installer replaced: what is installed where, and the one line shown where nothing is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildscripts import machine, proc
from buildscripts.commands import setup as setup_command
from buildscripts.errors import ConfigError, EngineError, ToolMissingError
from buildscripts.workspace import Workspace
from tests.commands import call


class Flag:
    def __init__(self, present: bool) -> None:
        self.value = present

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def needs(monkeypatch: pytest.MonkeyPatch) -> dict[str, Flag]:
    flags = {"engine": Flag(False), "debootstrap": Flag(True), "chromium": Flag(True)}
    build = (machine.Need("a running Docker engine", flags["engine"], "start it", engine=True),
             machine.Need("debootstrap", flags["debootstrap"], "apt-get install debootstrap"))
    monkeypatch.setattr(machine, "BUILD", build)
    monkeypatch.setattr(machine, "NEEDS", {"build": build,
                                           "tests": (*build, machine.Need("Chromium", flags["chromium"], "chromium"))})
    return flags


@pytest.fixture
def debian_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "can_install", lambda env: "turned off" if env.get(machine.NO_SETUP_ENV) else None)


def test_nothing_missing_installs_nothing(needs: dict[str, Flag], debian_root: None, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    needs["engine"].value = True
    monkeypatch.setattr(proc, "run", lambda *a, **k: pytest.fail("nothing to install"))
    assert call(setup_command, [], Workspace.at(tmp_path), {}) == 0


def test_on_debian_as_root_the_installer_brings_up_what_is_missing(
        needs: dict[str, Flag], debian_root: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[list[str]] = []

    def install(argv: list[str], **kwargs: object) -> proc.Completed:
        ran.append(list(argv))
        needs["engine"].value = True          # the installer started the engine
        return proc.Completed(tuple(argv), 0, "== starting dockerd", 1.0, False)

    monkeypatch.setattr(proc, "run", install)
    assert call(setup_command, ["--for", "build"], Workspace.at(tmp_path), {}) == 0
    assert ran == [["bash", str(tmp_path / ".ci" / "install-engine")]]
    shown = capsys.readouterr()
    assert "`nox -s build` needs a running Docker engine: installing and starting them" in shown.out + shown.err


def test_an_installer_that_leaves_something_missing_is_an_error(
        needs: dict[str, Flag], debian_root: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "run", lambda argv, **k: proc.Completed(tuple(argv), 1, "E: no network", 1.0, False))
    with pytest.raises(ToolMissingError, match="exited 1 and this machine still lacks a running Docker engine") as err:
        call(setup_command, [], Workspace.at(tmp_path), {})
    assert "E: no network" in str(err.value)


def test_elsewhere_build_stops_with_the_line_that_fixes_it(needs: dict[str, Flag], debian_root: None,
                                                          tmp_path: Path) -> None:
    needs["debootstrap"].value = False
    with pytest.raises(ToolMissingError, match=r"needs a running Docker engine, debootstrap, and it installs "
                                               r"nothing here \(turned off\)") as err:
        call(setup_command, [], Workspace.at(tmp_path), {machine.NO_SETUP_ENV: "1"})
    assert err.value.hint == "a running Docker engine: start it; debootstrap: apt-get install debootstrap"


def test_only_the_engine_missing_is_an_engine_error(needs: dict[str, Flag], debian_root: None, tmp_path: Path) -> None:
    with pytest.raises(EngineError):
        call(setup_command, [], Workspace.at(tmp_path), {machine.NO_SETUP_ENV: "1"})


def test_tests_warn_and_go_on_except_under_ci(needs: dict[str, Flag], debian_root: None, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    env = {machine.NO_SETUP_ENV: "1"}
    assert call(setup_command, ["--for", "tests"], Workspace.at(tmp_path), env) == 0
    shown = capsys.readouterr()
    assert "the tests that need them are skipped" in shown.out + shown.err
    with pytest.raises(EngineError):
        call(setup_command, ["--for", "tests"], Workspace.at(tmp_path), {**env, "CI": "true"})


def test_who_may_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(machine, "is_debian", lambda: True)
    assert machine.can_install({}) == "not root"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert machine.can_install({}) is None
    assert machine.can_install({"DOCKER_HOST": "tcp://ci:2376"}) == "DOCKER_HOST names another engine (tcp://ci:2376)"
    assert machine.can_install({machine.NO_SETUP_ENV: "1"}) == f"{machine.NO_SETUP_ENV}=1"
    with pytest.raises(ConfigError, match="SGLANG_IMAGES_NO_SETUP='yes' is neither 0 nor 1"):
        machine.can_install({machine.NO_SETUP_ENV: "yes"})
    monkeypatch.setattr(machine, "is_debian", lambda: False)
    assert machine.can_install({}) == "not a Debian system"


def test_debian_is_told_from_its_derivatives(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    assert machine.is_debian(release)
    release.write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    assert not machine.is_debian(release)
    assert not machine.is_debian(tmp_path / "absent")


def test_an_installer_that_fails_on_what_this_command_does_not_need_is_a_warning(
        needs: dict[str, Flag], debian_root: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def install(argv: list[str], **kwargs: object) -> proc.Completed:
        needs["engine"].value = True      # the engine came up; something else it installs failed
        return proc.Completed(tuple(argv), 1, "could not download chromium", 1.0, False)

    monkeypatch.setattr(proc, "run", install)
    assert call(setup_command, ["--for", "build"], Workspace.at(tmp_path), {}) == 0
