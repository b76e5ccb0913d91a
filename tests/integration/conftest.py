"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.pg import postgres  # noqa: F401  (one throw-away PostgreSQL per session, for every module)

REPO: Final = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT_S: Final = 60.0
"""How long a spawned helper process may take to finish after it was killed."""


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Start ``python -c SCRIPT args...`` importing this checkout; kill leftovers at teardown."""
    procs: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=PROCESS_TIMEOUT_S)
