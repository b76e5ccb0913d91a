"""Starting a network front: refused beyond loopback without a token, allowed loopback-only.

Each test runs ``mcpvisor serve`` as a user would (a subprocess, real sockets). A bind
beyond loopback here uses 0.0.0.0 only to check the start decision; nothing connects
to it from outside this machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, flaky
from tests.security.proxy import run_serve, running_proxy, write

pytestmark = pytest.mark.slow

TOKEN = "s3cr3t-token-0123456789abcdef"


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_a_non_loopback_bind_without_a_token_stops_with_exit_2_and_says_how_to_set_one(
    tmp_path: Path, transport: str
) -> None:
    """Binding every interface with nothing guarding it must not start (a regression would
    serve every tool to the network: issue 12, point 1)."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}})
    done = run_serve(
        config, "--transport", transport, "--host", "0.0.0.0", "--port", "0", env={"MCPVISOR_TOKEN": ""}
    )
    assert done.returncode == 2, done.stderr
    assert "without a token" in done.stderr
    for how in ("settings.authToken", "$MCPVISOR_TOKEN", "--token-file", "--insecure-no-auth"):
        assert how in done.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """Like ssh with a private key: a token file readable by group or others is not used."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}})
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    done = run_serve(config, "--transport", "http", "--port", "0", "--token-file", str(token_file))
    assert done.returncode == 2
    assert "chmod 600" in done.stderr
    assert TOKEN not in done.stderr


async def test_insecure_no_auth_serves_beyond_loopback_and_warns_at_start(tmp_path: Path) -> None:
    """--insecure-no-auth is the explicit way to serve a trusted network without a token;
    every start says so in the log."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            "ws",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--insecure-no-auth",
            env={"MCPVISOR_TOKEN": ""},
        ) as proxy:
            assert any("WITHOUT authentication" in line and "WARNING" in line for line in proxy.log), (
                proxy.text()
            )


async def test_a_private_token_file_guards_the_front(tmp_path: Path) -> None:
    """``--token-file`` with mode 600: its token opens a websocket session, nothing else does."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}})
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    from tests.security.test_security_tokens import ws_handshake

    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            "ws",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--token-file",
            str(token_file),
            env={"MCPVISOR_TOKEN": ""},
        ) as proxy:
            url = f"ws://127.0.0.1:{proxy.port}/"
            assert await ws_handshake(url, {}) == 401
            assert await ws_handshake(url, {"Authorization": f"Bearer {TOKEN}"}) == 101
    assert TOKEN not in proxy.text()
