"""`mcpvisor.actors.fronts.ws_server.serve_guarded` in-process, over loopback sockets: the crash barrier.

A session that raises (an injected failure standing for any bug in one connection's
handling) ends that connection only, with a log line; the listener keeps serving the
next client. The end-to-end tests against ``mcpvisor serve`` are in
tests/security/test_security_handshakes.py.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

from mcpvisor.actors.fronts.ws_server import serve_guarded

BOUND_S: Final = 30.0
"""Loopback only, no subprocess: a generous bound for a busy 2-core box."""


class CrashOnFirstSession:
    """Raises from the first session it serves; echoes one message in every later one."""

    def __init__(self) -> None:
        self.served = 0

    async def __call__(self, ws: WebSocketConnection) -> None:
        self.served += 1
        if self.served == 1:
            raise RuntimeError("injected failure in one session")
        await ws.send_message(await ws.get_message())


async def test_an_exception_in_one_session_ends_that_connection_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first connection's session raises: its client sees the connection close, the
    error is logged naming the client, and a second client is served (without the
    barrier the exception would end the listener, and with it the process)."""
    session = CrashOnFirstSession()
    caplog.set_level(logging.ERROR, logger="mcpvisor.actors.fronts.ws_server")
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                lambda task_status: serve_guarded(
                    session, "127.0.0.1", 0, subprotocol="mcp", max_message=1 << 20, queue=4,
                    task_status=task_status,
                )
            )
            url = f"ws://127.0.0.1:{port}/"
            async with open_websocket_url(url, subprotocols=["mcp"]) as first:
                with pytest.raises(ConnectionClosed):
                    await first.get_message()
                await first._stream.aclose()  # trio-websocket 0.12 leaves it open when the peer closed first
            async with open_websocket_url(url, subprotocols=["mcp"]) as second:
                await second.send_message("still here")
                assert await second.get_message() == "still here"
            nursery.cancel_scope.cancel()
    assert session.served == 2
    [record] = [r for r in caplog.records if "ended by an error" in r.getMessage()]
    assert "127.0.0.1:" in record.getMessage()
    assert record.getMessage().endswith(": RuntimeError")
    assert record.exc_info is not None
