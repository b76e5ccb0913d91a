"""The CLI ends quietly when the user ends it: Ctrl-C, or a reader that stops reading.

Real ``python -m mcpvisor`` processes: what is checked is the process's own exit status
and what it leaves on stderr. A regression shows as a Python traceback (an exception
group holding ``KeyboardInterrupt``, a ``BrokenPipeError``) on the user's terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from mcpvisor.cli import EXIT_CLOSED_PIPE

PY = sys.executable
STEP_BOUND_S = 60.0
"""One CLI run on a loaded 2-core machine."""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_") or k == "MCPVISOR_TEST_TAG"}
    env.update(MCPVISOR_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path), NO_COLOR="1")
    return env


def _read_until(stream: IO[str], needle: str) -> list[str]:
    """Lines of ``stream`` up to and including the first that holds ``needle`` (fails at EOF)."""
    seen: list[str] = []
    for line in stream:
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never came; the process wrote:\n{''.join(seen)}")


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A real ``mcpvisor serve`` over stdio with no servers, registered in the state dir."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    argv = [PY, "-m", "mcpvisor", "serve", "--config", str(config)]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=_env(tmp_path)) as proc:
        try:
            assert proc.stderr is not None
            _read_until(proc.stderr, "serving MCP over stdio")  # after its control socket is registered
            yield proc
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the client went away: the proxy stops
            try:
                proc.wait(STEP_BOUND_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_dashboard_without_a_traceback(tmp_path: Path, proxy: subprocess.Popen[str],
                                                        stop: signal.Signals) -> None:
    """`mcpvisor dashboard` says "Ctrl-C stops it": Ctrl-C ends it with status 0 and no
    traceback (trio raised the interrupt out of the server's nursery as an exception group,
    which the CLI printed as ~20 lines of traceback); so does SIGTERM, as a service
    manager stops it (it used to die of the signal)."""
    argv = [PY, "-m", "mcpvisor", "dashboard", "--no-open", "--port", "0"]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=_env(tmp_path)) as dash:
        try:
            assert dash.stderr is not None
            _read_until(dash.stderr, "Ctrl-C stops it")
            dash.send_signal(stop)
            try:
                _, rest = dash.communicate(timeout=STEP_BOUND_S)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{stop.name} did not stop it in {STEP_BOUND_S:g} s") from None
            assert dash.returncode == 0, rest
        finally:
            if dash.poll() is None:
                dash.kill()
                dash.wait()
    assert "Traceback" not in rest, rest
    assert "KeyboardInterrupt" not in rest, rest


@pytest.mark.parametrize("args", [("mcp", "list", "--format", "json"), ("mcp", "list")])
def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`mcpvisor ... | head` where head has already gone: no BrokenPipeError traceback on
    stderr, and an exit status a script can tell from success (not 0)."""
    config = tmp_path / "mcpvisor.json"
    servers = {f"s{i}": {"command": "true", "enabled": False, "description": "x" * 40} for i in range(50)}
    config.write_text(json.dumps({"mcpServers": servers}))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails with EPIPE
    try:
        done = subprocess.run([PY, "-m", "mcpvisor", *args, "--config", str(config)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                              timeout=STEP_BOUND_S, check=False)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode != 0
    if args[-1] == "json":  # plain writes; rich's tables end with its own status 1
        assert done.returncode == EXIT_CLOSED_PIPE
