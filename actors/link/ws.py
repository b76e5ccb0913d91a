"""An upstream reached over websocket (trio-websocket): the transport the SDK 2.3.0 no
longer ships.

Wire convention of the older SDKs: subprotocol ``"mcp"``, one JSON-RPC message per text
frame. Owns `websocket_client`, the adapter between one websocket and the SDK's
`SessionMessage` streams, and the frame pump both halves share (`read_frames`); the
server half, clients connecting to the proxy over websocket, is
`mcpvisor.actors.fronts.ws`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
import trio
from mcp.shared.message import SessionMessage
from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

SUBPROTOCOL: Final = "mcp"
QUEUE: Final = 64
"""Frames buffered per direction between a websocket and the SDK's streams."""


async def read_frames(ws: WebSocketConnection, send: Any) -> None:
    """A peer's frames into the SDK's session (which reports the malformed ones)."""
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


async def _write_frames(ws: WebSocketConnection, receive: Any) -> None:
    async with receive:
        async for session_message in receive:
            text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await ws.send_message(text)
            except ConnectionClosed:
                return


@asynccontextmanager
async def websocket_client(url: str, *, headers: Mapping[str, str] | None = None,
                           max_message: int) -> AsyncIterator[tuple[Any, Any]]:
    """Connect to an MCP server over ws:// or wss:// and yield SDK streams."""
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    async with open_websocket_url(url, subprotocols=[SUBPROTOCOL], extra_headers=extra,
                                  max_message_size=max_message, message_queue_size=QUEUE) as ws:
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUE)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](QUEUE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_frames, ws, read_send)
            nursery.start_soon(_write_frames, ws, write_receive)
            try:
                yield read_receive, write_send
            finally:
                nursery.cancel_scope.cancel()
                read_receive.close()
                write_send.close()
