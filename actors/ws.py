"""MCP over WebSocket (trio-websocket): the transport the SDK 2.3.0 no longer ships.

Wire convention of the older SDKs: subprotocol ``"mcp"``, one JSON-RPC message per
text frame. Owns the adapter between a websocket and the SDK's `SessionMessage`
streams in both directions: `websocket_client` (an upstream reached over ws) and
`serve_websocket_front` (clients connecting to the proxy over ws).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
import trio
from mcp.shared.message import SessionMessage
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, open_websocket_url, serve_websocket

logger = logging.getLogger(__name__)

SUBPROTOCOL: Final = "mcp"
QUEUE: Final = 64
"""Frames buffered per direction (trio-websocket's own default queue is 1)."""


async def _reader(ws: WebSocketConnection, send: Any) -> None:
    async with send:
        try:
            while True:
                frame = await ws.get_message()
                try:
                    message = types.jsonrpc_message_adapter.validate_json(frame, by_name=False)
                except Exception as exc:
                    await send.send(exc)
                    continue
                await send.send(SessionMessage(message))
        except ConnectionClosed:
            pass


async def _writer(ws: WebSocketConnection, receive: Any) -> None:
    async with receive:
        async for session_message in receive:
            text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await ws.send_message(text)
            except ConnectionClosed:
                return


@asynccontextmanager
async def _streams(ws: WebSocketConnection) -> AsyncIterator[tuple[Any, Any]]:
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUE)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](QUEUE)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_reader, ws, read_send)
        nursery.start_soon(_writer, ws, write_receive)
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
                                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over websocket at ``ws://host:port/``; each connection is one client."""

    async def handler(request: WebSocketRequest) -> None:
        if SUBPROTOCOL not in request.proposed_subprotocols:
            await request.reject(400, body=b"the MCP websocket subprotocol 'mcp' is required")
            return
        ws = await request.accept(subprotocol=SUBPROTOCOL)
        async with _streams(ws) as (read, write):
            await front.server.run(read, write, front.init_options)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            lambda task_status: serve_websocket(handler, host, port, ssl_context=None, max_message_size=max_message,
                                                message_queue_size=QUEUE, task_status=task_status)
        )
        task_status.started(server.port)
