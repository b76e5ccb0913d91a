"""``mcpvisor mcp add`` on a disk that refuses the write says so in one line (issue 23 item 14).

It used to print a traceback. Two real failures, no mocks: the config's write hits the
file size limit (``RLIMIT_FSIZE``, what a full disk does to a write midway: the kernel
refuses the bytes), and the config's directory cannot be created (a file is in the way).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PY, REAL_IO_BOUND_S

BEFORE = '{"mcpServers": {}}\n'


def mcp_add(config: Path, *, max_file_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # in the child, before exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a killed process
        if max_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [PY, "-m", "mcpvisor", "mcp", "add", "--config", str(config), "git", "--", "uvx", "mcp-server-git"],
        capture_output=True,
        text=True,
        timeout=REAL_IO_BOUND_S,
        check=False,
        preexec_fn=limit,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def test_a_write_the_disk_refuses_is_one_line_and_the_config_stays_intact(tmp_path: Path) -> None:
    """The write fails midway: exit 1, one ``mcpvisor: error:`` line naming the file and
    what to do, no traceback, the old config byte for byte, no temporary file left."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(BEFORE)
    done = mcp_add(config, max_file_bytes=len(BEFORE))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mcpvisor: error: cannot write {config}: ")
    assert "space" in lines[0]
    assert config.read_text() == BEFORE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcpvisor.json"]  # no temp file left


def test_a_directory_that_cannot_be_created_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A file where the config's directory should be: exit 1, one line naming the config."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    config = blocker / "mcpvisor.json"
    done = mcp_add(config)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert f"cannot write {config}" in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_a_read_only_directory_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A directory the user may not write: exit 1, one line saying it is not writable."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done = mcp_add(locked / "mcpvisor.json")
    finally:
        locked.chmod(0o755)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "not writable" in done.stderr
