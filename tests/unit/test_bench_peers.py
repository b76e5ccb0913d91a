"""Which interpreter the bench installs a Python peer with (bench/peers.py).

magg needs Python 3.12; a machine with pyenv has a ``python3.12`` shim on PATH for every
installed version, which only runs while that version is active ("command not found"
otherwise). The bench skipped magg on such a machine, though the build was right there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpvisor.bench.peers import find_python


def _script(path: Path, status: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexit {status}\n")
    path.chmod(0o755)
    return path


def test_an_inactive_pyenv_shim_is_passed_over_for_the_build_itself(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _script(tmp_path / "shims" / "python3.99", 127)  # pyenv: python3.99: command not found
    build = _script(tmp_path / "home" / ".pyenv" / "versions" / "3.99.1" / "bin" / "python3.99", 0)
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_python((3, 99)) == str(build)


def test_an_interpreter_on_path_that_runs_is_taken_and_none_is_none(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = _script(tmp_path / "bin" / "python3.99", 0)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_python((3, 99)) == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_python((3, 99)) is None
