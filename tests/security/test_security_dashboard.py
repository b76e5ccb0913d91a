"""The dashboard's API does not read a huge body, and ``mcpvisor dashboard`` is not open to
anyone when the proxy wants a token (issue 23 item 14).

Both against real processes over real sockets: a ``mcpvisor serve --transport http`` (its
dashboard at ``/``), and a ``mcpvisor dashboard`` in front of a running proxy's control
socket.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Final

import pytest
import trio

from tests.helpers import PY, REAL_IO_BOUND_S, flaky, http_client
from tests.security.proxy import STOP_BOUND_S, running_proxy, write

pytestmark = pytest.mark.slow

HUGE: Final = 200 * 1024 * 1024
"""What a client offers to send: 200 MB."""
CHUNK: Final = 64 * 1024
TOKEN: Final = "dashboard-guard-token-0123456789ab"


def dashboard_token(state: Path) -> str:
    return (state / "dashboard-token").read_text().strip()


async def response_head(stream: trio.SocketStream, got: trio.Event, head: list[bytes]) -> None:
    """Read until the response head is complete (or the server closes); set ``got``."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    except trio.BrokenResourceError:
        pass
    head.append(data)
    got.set()


async def test_the_api_refuses_a_huge_streamed_body_with_413_without_reading_it(tmp_path: Path) -> None:
    """A chunked 200 MB POST to ``/api/servers`` (no Content-Length, so it must be counted as
    it arrives) gets 413 while the client is still sending: the client gets to send only
    what socket buffers hold, a small fraction of the 200 MB. A declared 200 MB
    Content-Length is refused at once. The proxy serves on afterwards."""
    state = tmp_path / "state"
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}})
    env = {k: v for k, v in os.environ.items() if k != "MCPVISOR_TOKEN"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config, "--transport", "http", "--port", "0", "--state-dir", str(state), env=env
        ) as proxy:
            auth = f"Authorization: Bearer {dashboard_token(state)}\r\n"
            host = f"Host: 127.0.0.1:{proxy.port}\r\n"
            async with await trio.open_tcp_stream("127.0.0.1", proxy.port) as stream:
                await stream.send_all(
                    (f"POST /api/servers HTTP/1.1\r\n{host}{auth}Content-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n").encode()
                )
                got = trio.Event()
                head: list[bytes] = []
                sent = 0
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(response_head, stream, got, head)
                    chunk = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
                    try:
                        while not got.is_set() and sent < HUGE:
                            await stream.send_all(chunk)
                            sent += CHUNK
                    except trio.BrokenResourceError:
                        pass
                    await got.wait()
            assert head[0].startswith(b"HTTP/1.1 413"), head[0][:200]
            assert sent < HUGE // 4, sent
            async with await trio.open_tcp_stream("127.0.0.1", proxy.port) as stream:
                await stream.send_all(
                    (f"POST /api/servers HTTP/1.1\r\n{host}{auth}Content-Type: application/json\r\n"
                     f"Content-Length: {HUGE}\r\n\r\n{{").encode()
                )
                got = trio.Event()
                head = []
                await response_head(stream, got, head)
            assert head[0].startswith(b"HTTP/1.1 413"), head[0][:200]
            async with http_client() as http:
                status = await http.get(proxy.url.removesuffix("/mcp") + "/api/status")
                assert status.status_code == 200


async def test_mcpvisor_dashboard_wants_the_login_to_read_when_the_proxy_has_a_token(tmp_path: Path) -> None:
    """A proxy configured with ``settings.authToken``: the ``mcpvisor dashboard`` in front of
    it answers 401 to a read without a token (it used to show every server to anyone on
    the machine), and 200 with the dashboard login or the proxy's own token."""
    state = tmp_path / "state"
    config = write(
        tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}, "settings": {"authToken": TOKEN}}
    )
    env = {k: v for k, v in os.environ.items() if k != "MCPVISOR_TOKEN"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config, "--transport", "http", "--port", "0", "--state-dir", str(state), env=env
        ):
            dashboard = await trio.lowlevel.open_process(
                [PY, "-m", "mcpvisor", "dashboard", "--state-dir", str(state), "--port", "0", "--no-open"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                assert dashboard.stderr is not None
                text = b""
                while (found := re.search(rb"at (http://127\.0\.0\.1:\d+)/", text)) is None:
                    chunk = await dashboard.stderr.receive_some(4096)
                    assert chunk, text.decode()
                    text += chunk
                api = found[1].decode() + "/api/status"
                async with http_client() as http:
                    assert (await http.get(api)).status_code == 401
                    login = {"Authorization": f"Bearer {dashboard_token(state)}"}
                    assert (await http.get(api, headers=login)).status_code == 200
                    configured = {"Authorization": f"Bearer {TOKEN}"}
                    assert (await http.get(api, headers=configured)).status_code == 200
            finally:
                dashboard.send_signal(signal.SIGINT)
                with trio.move_on_after(STOP_BOUND_S):
                    await dashboard.wait()
                if dashboard.returncode is None:
                    dashboard.kill()
                    await dashboard.wait()
