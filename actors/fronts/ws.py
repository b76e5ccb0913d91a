"""The websocket front: clients connecting to the proxy over websocket (subprotocol
``"mcp"``, one JSON-RPC message per text frame; the upstream half is
`mcpvisor.actors.link.ws`).

Owns `serve_websocket_front`, which admits a handshake only through the same
`mcpvisor.actors.fronts.auth.Gate` the HTTP front's rules come from, caps the number of
connections (``settings.maxSessions``, handshakes in progress included: 503 beyond it,
existing ones unaffected) and closes a connection idle for ``settings.sessionIdleTimeout``
with nothing in flight. Accepting connections (crash barrier, handshake bound, revoked
tokens) is `mcpvisor.actors.fronts.ws_server`'s; each client frame is checked here before
the SDK sees it, as on stdio.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
import trio
from mcp.shared.message import SessionMessage
from msgspec import UNSET
from trio_websocket import ConnectionClosed, WebSocketConnection

from mcpvisor.actors import wire
from mcpvisor.actors.fronts.auth import Gate
from mcpvisor.actors.fronts.frames import Refusal, decode_client_frame, duplicate_id, request_refusal
from mcpvisor.actors.fronts.outbox import CLIENT_STALL_S
from mcpvisor.actors.fronts.views import ToolsetViews
from mcpvisor.actors.fronts.ws_server import HANDSHAKE_TIMEOUT_S, serve_guarded
from mcpvisor.actors.link.ws import QUEUE, SUBPROTOCOL, read_frames

logger = logging.getLogger(__name__)


IDLE_CLOSE_CODE: Final = 1001
"""RFC 6455 7.4.1 "going away": the server ends an idle session."""
INTERNAL_ERROR_CLOSE_CODE: Final = 1011
"""RFC 6455 7.4.1: the server met a condition that prevented it from serving the connection."""
CLOSE_TIMEOUT_S: Final = 1.0
"""Bound on the closing handshake after a connection failed (docs/style.md rule 16)."""

SHUTDOWN_CLOSE_CODE: Final = 1001
"""RFC 6455 7.4.1 "going away": the proxy is stopping."""

SHUTDOWN_WRITE_S: Final = 1.0
"""At shutdown, how long a connection's last answers and its close frame may take to
send: the MCP SDK's bound on its own shutdown error write (``_SHUTDOWN_WRITE_TIMEOUT``)."""

SHUTDOWN_POLL_S: Final = 0.02
"""At shutdown, how often the front looks whether its last connection has closed."""


class _Activity:
    """Requests read but not yet answered on one connection, and when it last moved."""

    def __init__(self) -> None:
        self.pending: set[Any] = set()
        self.moved = trio.Event()

    def touch(self) -> None:
        self.moved.set()
        self.moved = trio.Event()


async def _front_reader(ws: WebSocketConnection, send: Any, activity: _Activity) -> None:
    """A client's frames into the SDK; what cannot be served is answered here, as on stdio."""
    async with send:
        try:
            while True:
                frame = await ws.get_message()
                data = frame.encode() if isinstance(frame, str) else frame
                try:
                    message = _front_frame(data, activity)
                except Exception:
                    # Crash barrier: one frame that breaks its handling ends only itself.
                    logger.exception("websocket front: failed to handle a frame")
                    message = _internal_error(data)
                if isinstance(message, Refusal):
                    await ws.send_message(wire.encode(message.body()).decode())
                elif message is not None:
                    activity.touch()
                    await send.send(message)
        except ConnectionClosed:
            pass


def _front_frame(data: bytes, activity: _Activity) -> SessionMessage | Refusal | None:
    """What to do with one client frame: forward it, answer it, or drop it (a malformed
    notification or response: MCP, the receiver MUST NOT answer a notification)."""
    env = decode_client_frame(data)
    if isinstance(env, Refusal):
        return env
    refusal = request_refusal(env)
    if refusal is not None:
        return refusal
    rid = env.id
    is_request = env.method is not UNSET and rid is not UNSET
    if is_request and rid in activity.pending:
        return duplicate_id(rid)  # type: ignore[arg-type]  # a request's id: neither None nor UNSET
    try:
        message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except Exception:
        if is_request:
            return Refusal(rid, wire.INVALID_REQUEST, "invalid request: malformed message")  # type: ignore[arg-type]
        return None
    if isinstance(message, types.JSONRPCRequest):
        activity.pending.add(message.id)
    elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
        # MCP cancellation: the SDK does not answer a cancelled request, so its id is free again.
        cancelled = (message.params or {}).get("requestId")
        if isinstance(cancelled, int | str):
            activity.pending.discard(cancelled)
    return SessionMessage(message)


def _internal_error(data: bytes) -> Refusal | None:
    """The answer to a frame whose handling failed: an error if it was a readable request."""
    env = decode_client_frame(data)
    if isinstance(env, Refusal) or env.method is UNSET or env.id is UNSET or env.id is None:
        return None
    return Refusal(env.id, wire.INTERNAL_ERROR, "internal error while handling this request")


async def _writer(ws: WebSocketConnection, receive: Any, activity: _Activity | None = None,
                  stalled: Callable[[], None] | None = None) -> None:
    async with receive:
        async for session_message in receive:
            message = session_message.message
            if activity is not None:
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    activity.pending.discard(message.id)
                activity.touch()
            text = message.model_dump_json(by_alias=True, exclude_unset=True)
            with trio.move_on_after(CLIENT_STALL_S) as bound:
                try:
                    await ws.send_message(text)
                except ConnectionClosed:
                    return
            if bound.cancelled_caught:
                # A peer that reads nothing must not hold the session (and every
                # message queued for it) open: end it, as the outbox does for HTTP.
                logger.warning("closing a websocket peer that read nothing for %.0f s", CLIENT_STALL_S)
                if stalled is not None:
                    stalled()
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
async def _streams(ws: WebSocketConnection, *, front: bool = False, idle_s: float | None = None,
                   end: trio.Event | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streams over ``ws``. Once ``end`` is set (the proxy drained its requests)
    reading stops, as if the client had left; what the SDK still writes is sent, then
    the connection is closed with 1001."""
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUE)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](QUEUE)
    activity = _Activity() if front else None
    written = trio.Event()

    async def read(task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            if activity is not None:
                await _front_reader(ws, read_send, activity)
            else:
                await read_frames(ws, read_send)

    async def write() -> None:
        try:
            # A stalled writer closes the session's read side: the SDK's loop then ends
            # as at EOF and cancels the requests in flight.
            await _writer(ws, write_receive, activity, read_receive.close)
        finally:
            written.set()

    async with trio.open_nursery() as nursery:
        reading = await nursery.start(read)
        nursery.start_soon(write)
        if activity is not None and idle_s is not None:
            nursery.start_soon(_close_when_idle, ws, activity, idle_s)
        if end is not None:
            nursery.start_soon(_cancel_when_set, end, reading)
        try:
            yield read_receive, write_send
        finally:
            if end is not None and end.is_set():
                with trio.move_on_after(SHUTDOWN_WRITE_S):
                    await written.wait()
                    await ws.aclose(code=SHUTDOWN_CLOSE_CODE, reason="mcpvisor is shutting down")
            nursery.cancel_scope.cancel()
            read_receive.close()
            write_send.close()


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel(reason="mcpvisor is shutting down")


async def _serve_connection(front: Any, ws: WebSocketConnection, idle_s: float | None,
                            end: trio.Event | None) -> None:
    """Serve one accepted connection; whatever fails in it ends only it (crash barrier)."""
    try:
        async with _streams(ws, front=True, idle_s=idle_s, end=end) as (read, write):
            await front.server.run(read, write, front.init_options)
    except Exception:
        logger.exception("websocket front: a connection failed; closing it")
        with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            await ws.aclose(code=INTERNAL_ERROR_CLOSE_CODE, reason="internal error")


async def serve_websocket_front(front: Any, host: str, port: int, *, max_message: int,
                                gate: Gate | None = None, ssl_context: ssl.SSLContext | None = None,
                                max_sessions: int | None = None, idle_timeout: float | None = None,
                                handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
                                credentials: Callable[[], object] | None = None,
                                views: ToolsetViews | None = None,
                                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over websocket at ``ws(s)://host:port/``; each connection is one client.

    Connections are accepted by `mcpvisor.actors.fronts.ws_server.serve_guarded`: what one connection
    raises ends that connection only, and a handshake must finish within
    ``handshake_timeout``.

    Args:
        gate: who may connect (token, Host, Origin); None admits everyone (tests only).
        ssl_context: serve ``wss://``.
        max_sessions: handshakes in progress plus open connections; one more is refused
            with 503 while the others keep working.
        idle_timeout: close a connection with nothing in flight and no frame for this long.
        handshake_timeout: from TCP accept to the handshake answered (TLS included).
        credentials: the tokens in force; when they change, open connections whose token
            ``gate`` no longer accepts are closed (code 1008).
        views: serve ``/toolset/NAME`` (and toolset-bound tokens) a fixed view
            (`mcpvisor.actors.fronts.views`).
    """

    drain = getattr(front, "drain", None)
    open_sessions = 0

    async def session(ws: WebSocketConnection) -> None:
        nonlocal open_sessions
        open_sessions += 1
        try:
            await _serve_connection(front, ws, idle_timeout, drain.done if drain is not None else None)
        finally:
            open_sessions -= 1

    async def close_after_drain(scope: trio.CancelScope) -> None:
        """The proxy drained its requests: return once every connection has closed."""
        assert drain is not None
        await drain.done.wait()
        while open_sessions:  # noqa: ASYNC110 - bounded by the caller's cancel; runs once, at shutdown
            await trio.sleep(SHUTDOWN_POLL_S)
        scope.cancel(reason="mcpvisor is shutting down")

    async with trio.open_nursery() as nursery:
        if drain is not None:
            nursery.start_soon(close_after_drain, nursery.cancel_scope)
        await serve_guarded(
            session, host, port, subprotocol=SUBPROTOCOL, max_message=max_message, queue=QUEUE, gate=gate,
            ssl_context=ssl_context, max_sessions=max_sessions, handshake_timeout=handshake_timeout,
            credentials=credentials, views=views, task_status=task_status,
        )
