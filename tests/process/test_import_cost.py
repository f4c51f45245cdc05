"""A start of the CLI loads the one command it runs (buildscripts/commands/__init__.py): cli.py imports every
command module, and none of them, nor the CLI, imports the docker SDK, numpy, safetensors or testcontainers at
module top. Those load where a command reaches the engine or makes a model, so that a listing or a report
starts without them, and the package installs for its users without the build-only ones. A fresh interpreter
each time: the tests' own process has imported all of them long before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("docker", "numpy", "safetensors", "testcontainers")
LOADED = f"""
import importlib, json, pkgutil, sys
import buildscripts.cli
import buildscripts.commands
named = [m.name for m in pkgutil.iter_modules(buildscripts.commands.__path__)]
for name in named:
    importlib.import_module("buildscripts.commands." + name)
dispatched = sorted(c.__name__.rsplit(".", 1)[1] for c in buildscripts.cli.COMMANDS.values())
print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules], "modules": sorted(named),
                  "dispatched": dispatched}}))
"""


def test_the_cli_and_every_command_module_import_none_of_the_heavy_libraries() -> None:
    done = subprocess.run([sys.executable, "-c", LOADED], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["heavy"] == []
    assert found["modules"] == found["dispatched"]   # every command module is one the CLI runs, and each is loaded


@pytest.mark.parametrize("argv", [["matrix"], ["report", "--help"], ["check", "--help"]])
def test_a_listing_and_the_help_start_without_them(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "buildscripts", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "buildscripts.cli" in imported   # what is read here is what that start imported
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
