"""The control socket's fallback directory is never reached through a planted symlink (issue 23 item 13).

When the state directory's socket path is too long and there is no ``$XDG_RUNTIME_DIR``,
the proxy falls back to ``$TMPDIR/mcpvisor-<uid>`` (``/tmp`` by default), a name anyone
on the machine can plant first. A real ``mcpvisor serve`` runs with ``TMPDIR`` pointing
at a test directory where that name is a symlink to a directory of the test's; the
proxy must refuse it with a clear log line, leave the target's mode alone, and serve.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, flaky, http_client
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write

pytestmark = pytest.mark.slow

LONG_NAME = "s" * 120
"""A state directory whose ``run/<pid>.sock`` is longer than a unix socket path may be."""


async def test_a_planted_fallback_dir_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """The symlink's target keeps mode 0755 (it used to be chmodded to 0700 and get our
    socket), the log says why the control socket is not available naming the path, and
    the proxy serves its clients all the same."""
    tmpdir = tmp_path / "tmp"
    target = tmp_path / "victim"
    tmpdir.mkdir()
    target.mkdir()
    target.chmod(0o755)
    planted = tmpdir / f"mcpvisor-{os.getuid()}"
    planted.symlink_to(target)
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}})
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "MCPVISOR_TOKEN")}
    env["TMPDIR"] = str(tmpdir)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config, "--transport", "http", "--port", "0", "--state-dir", str(tmp_path / LONG_NAME), env=env
        ) as proxy:
            line = await proxy.wait_log("control socket not available")
            assert str(planted) in line
            assert "symbolic link" in line
            async with http_client() as http:
                assert (await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)).status_code == 200
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert list(target.iterdir()) == []
    assert planted.is_symlink()
