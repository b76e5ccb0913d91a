"""The house rules hold on the whole repository, tests and bench included.

ruff and mypy run here as a user (or CI) runs them: from the repository root with the
project's own settings in pyproject.toml and nothing on the command line, so a rule
broken anywhere, or a setting quietly narrowed, fails the suite and names the file and
line. Both are in the ``test`` extra, so they are there wherever the tests run.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
RUN_BOUND_S: Final = 600.0
"""Bound on one run: mypy from a cold cache on a loaded 2-core machine takes tens of seconds."""


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=RUN_BOUND_S, stdin=subprocess.DEVNULL, check=False)


def test_ruff_finds_nothing_anywhere() -> None:
    """`ruff check .` is clean: every rule, tests and bench as much as production code."""
    done = run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_with_the_project_settings_finds_nothing() -> None:
    """Plain `mypy` (its files and strictness from pyproject) is clean, and those files
    include the tests: dropping them from the settings would pass unnoticed otherwise."""
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"mcpvisor", "tests"} <= set(settings["files"]), settings["files"]
    done = run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
