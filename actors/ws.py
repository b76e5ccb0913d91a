"""MCP over WebSocket (trio-websocket): the transport the SDK 2.3.0 no longer ships.

Wire convention of the older SDKs: subprotocol ``"mcp"``, one JSON-RPC message per
text frame. Owns the adapter between a websocket and the SDK's `SessionMessage`
streams in both directions: `websocket_client` (an upstream reached over ws) and
`serve_websocket_front` (clients connecting to the proxy over ws), which admits a
handshake only through the same `mcpvisor.actors.fronts.auth.Gate` the HTTP front's rules come from,
caps the number of connections (``settings.maxSessions``: 503 beyond it, existing ones
unaffected) and closes a connection idle for ``settings.sessionIdleTimeout`` with
nothing in flight.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
import trio
from mcp.shared.message import SessionMessage
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    open_websocket_url,
    serve_websocket,
)

from mcpvisor.actors.fronts.auth import Gate

logger = logging.getLogger(__name__)

SUBPROTOCOL: Final = "mcp"
QUEUE: Final = 64
"""Frames buffered per direction (trio-websocket's own default queue is 1)."""

IDLE_CLOSE_CODE: Final = 1001
"""RFC 6455 7.4.1 "going away": the server ends an idle session."""


class _Activity:
    """Requests read but not yet answered on one connection, and when it last moved."""

    def __init__(self) -> None:
        self.pending: set[Any] = set()
        self.moved = trio.Event()

    def touch(self) -> None:
        self.moved.set()
        self.moved = trio.Event()


async def _reader(ws: WebSocketConnection, send: Any, activity: _Activity | None = None) -> None:
    async with send:
        try:
            while True:
                frame = await ws.get_message()
                try:
                    message = types.jsonrpc_message_adapter.validate_json(frame, by_name=False)
                except Exception as exc:
                    await send.send(exc)
                    continue
                if activity is not None:
                    if isinstance(message, types.JSONRPCRequest):
                        activity.pending.add(message.id)
                    activity.touch()
                await send.send(SessionMessage(message))
        except ConnectionClosed:
            pass


async def _writer(ws: WebSocketConnection, receive: Any, activity: _Activity | None = None) -> None:
    async with receive:
        async for session_message in receive:
            message = session_message.message
            if activity is not None:
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    activity.pending.discard(message.id)
                activity.touch()
            text = message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await ws.send_message(text)
            except ConnectionClosed:
                return


async def _close_when_idle(ws: WebSocketConnection, activity: _Activity, idle_s: float) -> None:
    """Close ``ws`` once it has had nothing in flight and no frame either way for ``idle_s``."""
    while True:
        with trio.move_on_after(idle_s) as scope:
            await activity.moved.wait()
        if scope.cancelled_caught and not activity.pending:
            logger.info("closing a websocket session idle for %.0f s", idle_s)
            await ws.aclose(code=IDLE_CLOSE_CODE, reason="idle")
            return


@asynccontextmanager
async def _streams(ws: WebSocketConnection, *, idle_s: float | None = None) -> AsyncIterator[tuple[Any, Any]]:
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUE)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](QUEUE)
    activity = _Activity() if idle_s is not None else None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_reader, ws, read_send, activity)
        nursery.start_soon(_writer, ws, write_receive, activity)
        if activity is not None and idle_s is not None:
            nursery.start_soon(_close_when_idle, ws, activity, idle_s)
        try:
            yield read_receive, write_send
        finally:
            nursery.cancel_scope.cancel()
            read_receive.close()
            write_send.close()


@asynccontextmanager
async def websocket_client(url: str, *, headers: Mapping[str, str] | None = None,
                           max_message: int) -> AsyncIterator[tuple[Any, Any]]:
    """Connect to an MCP server over ws:// or wss:// and yield SDK streams."""
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    async with open_websocket_url(url, subprotocols=[SUBPROTOCOL], extra_headers=extra,
                                  max_message_size=max_message, message_queue_size=QUEUE) as ws:
        async with _streams(ws) as streams:
            yield streams


async def serve_websocket_front(front: Any, host: str, port: int, *, max_message: int,
                                gate: Gate | None = None, ssl_context: ssl.SSLContext | None = None,
                                max_sessions: int | None = None, idle_timeout: float | None = None,
                                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over websocket at ``ws(s)://host:port/``; each connection is one client.

    Args:
        gate: who may connect (token, Host, Origin); None admits everyone (tests only).
        ssl_context: serve ``wss://``.
        max_sessions: connections open at once; one more is refused with 503 while the
            others keep working.
        idle_timeout: close a connection with nothing in flight and no frame for this long.
    """
    open_sessions = 0

    async def handler(request: WebSocketRequest) -> None:
        nonlocal open_sessions
        if gate is not None:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
            # wsproto takes Host out of the headers into the request event; trio-websocket
            # has no public accessor for it (checked: trio-websocket 0.12).
            headers["host"] = request._event.host
            _who, refusal = await gate.admit(headers)
            if refusal is not None:
                await request.reject(refusal.status, body=refusal.body.encode(),
                                     extra_headers=[(k.encode(), v.encode()) for k, v in refusal.headers])
                return
        if SUBPROTOCOL not in request.proposed_subprotocols:
            await request.reject(400, body=b"the MCP websocket subprotocol 'mcp' is required")
            return
        if max_sessions is not None and open_sessions >= max_sessions:
            logger.warning("refusing a websocket session: %d are open (settings.maxSessions)", max_sessions)
            await request.reject(503, body=b"Too many open sessions")
            return
        open_sessions += 1
        try:
            ws = await request.accept(subprotocol=SUBPROTOCOL)
            async with _streams(ws, idle_s=idle_timeout) as (read, write):
                await front.server.run(read, write, front.init_options)
        finally:
            open_sessions -= 1

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            lambda task_status: serve_websocket(handler, host, port, ssl_context=ssl_context,
                                                max_message_size=max_message, message_queue_size=QUEUE,
                                                task_status=task_status)
        )
        task_status.started(server.port)
