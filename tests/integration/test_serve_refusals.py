"""What ``mcpvisor serve`` refuses before it starts anything: a port in use, a config it
cannot read at all.

Real ``python -m mcpvisor serve`` processes on 127.0.0.1. Each config holds a server
whose start would leave a file behind, so "nothing was spawned" is a fact the test reads
from disk, not a log line it hopes for.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mcpvisor.cli import EXIT_USAGE

PY = sys.executable
STEP_BOUND_S = 60.0
"""One CLI run on a loaded 2-core machine."""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_") or k == "MCPVISOR_TEST_TAG"}
    env.update(MCPVISOR_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path))
    return env


def _tattletale(tmp_path: Path) -> tuple[dict[str, object], Path]:
    """A server entry that writes a file the moment it is spawned, and that file."""
    mark = tmp_path / "spawned"
    entry: dict[str, object] = {"command": "sh", "args": ["-c", f"touch {mark}; exec cat"]}
    return entry, mark


def _serve(tmp_path: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "mcpvisor", "serve", "--config", str(config), *extra],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_env(tmp_path),
                          timeout=STEP_BOUND_S, check=False)


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_a_busy_port_is_one_line_and_exit_2_before_any_server_starts(tmp_path: Path, transport: str) -> None:
    """A second proxy on a busy port: one line naming the port and the host, exit 2, and
    no server spawned (it used to spawn every server, then print ~100 lines of exception
    group ending in "Address already in use", exit 1, seconds later)."""
    entry, mark = _tattletale(tmp_path)
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({"mcpServers": {"tattle": entry}, "settings": {"exposure": "all"}}))
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _serve(tmp_path, config, "--transport", transport, "--port", str(port))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.splitlines() == [
        f"mcpvisor: port {port} on 127.0.0.1 is already in use (another mcpvisor? see mcpvisor status)"
    ]
    assert not mark.exists()


def test_a_misspelt_servers_key_is_exit_2_naming_the_file_and_the_key(tmp_path: Path) -> None:
    """"mcpServer" instead of "mcpServers": exit 2 with the file, the key and the close
    match, and nothing spawned (it was only a warning, and the proxy ran with no servers)."""
    entry, mark = _tattletale(tmp_path)
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({"mcpServer": {"tattle": entry}}))
    done = _serve(tmp_path, config)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f'{config}: unknown top-level key "mcpServer" (did you mean "mcpServers"?)' in done.stderr
    assert not mark.exists()
