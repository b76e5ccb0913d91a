"""Test policy for mcpvisor.

* Every test is async under pytest-trio (``trio_mode = true``). A test that waits on
  time takes ``autojump_clock``; a test that does real I/O (subprocesses, loopback
  HTTP) bounds itself with ``trio.fail_after`` and pytest-timeout bounds all of them.
* Nothing outlives a test: every process this test session (each xdist worker on its
  own) starts inherits the ``MCPVISOR_TEST_TAG`` environment variable, and the autouse ``no_leaked_processes``
  fixture fails a test that leaves one behind (orphans reparented to init included),
  after killing it so the next test starts clean.
* Network: only 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mcpvisor.actors.fronts import sdk_load

# The MCP SDK is loaded before any test runs. The stdio front imports it in a worker thread
# the first time a message needs it, and a worker thread does not run on trio's virtual
# clock: under ``autojump_clock`` the clock would jump past every deadline while the import
# ran. What loads the SDK, and when, is tested in fresh interpreters.
sdk_load.import_sdk()

TAG_VAR = "MCPVISOR_TEST_TAG"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker tags its own children: a sibling worker's processes are not ours.
    os.environ[TAG_VAR] = uuid.uuid4().hex
TAG = os.environ.setdefault(TAG_VAR, uuid.uuid4().hex)

TESTS_DIR = Path(__file__).parent
SERVERS_DIR = TESTS_DIR / "servers"

LEAK_GRACE_S = 5.0
"""How long a test's children get to finish dying (a SIGKILLed proxy's children die by
parent-death signal, asynchronously) before they count as leaked."""


def tagged_processes() -> list[psutil.Process]:
    """Every live process, other than this one, that carries this session's tag."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["pid"] == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get(TAG_VAR) == TAG:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _describe(procs: list[psutil.Process]) -> str:
    lines = []
    for p in procs:
        try:
            lines.append(f"  pid {p.pid} ppid {p.ppid()}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            lines.append(f"  pid {p.pid}: (gone)")
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail the test if any process it started is still alive after it ends."""
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    leaked = tagged_processes()
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = tagged_processes()
    if leaked:
        text = _describe(leaked)
        for p in leaked:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                p.kill()
            except psutil.Error:
                pass
        pytest.fail(f"processes outlived the test:\n{text}")


@pytest.fixture
def python() -> str:
    """The interpreter running the tests (fixture servers run under it too)."""
    return sys.executable


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's sources once, before any test starts a process.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (it is on the CI machine) no interpreter
    writes a ``.pyc``, so every ``mcpvisor serve``, CLI run and fixture server would
    compile the proxy again from source: seconds of CPU each on a 2-core box.
    `compileall` writes them regardless; later interpreters only read them.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller did it
    import compileall
    import re

    root = TESTS_DIR.parent
    for package in ("supervisor", "actors"):
        compileall.compile_dir(root / package, quiet=1)
    # tests/conformance/node_modules (npm) ships a few Python 2 scripts: do not walk it.
    compileall.compile_dir(root / "tests", quiet=1, rx=re.compile(r"[/\\]node_modules[/\\]"))
    # bench/ holds the peers' virtualenvs under .peers: do not walk them.
    compileall.compile_dir(root / "bench", quiet=1, maxlevels=1, rx=re.compile(r"[/\\]\.peers[/\\]"))
