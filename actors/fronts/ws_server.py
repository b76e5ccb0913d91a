"""The websocket front's listener: from a TCP accept to an open websocket, bounded and crash-proof.

Owns `serve_guarded`, which replaces trio-websocket's `serve_websocket` for the front
because that one lets a client take the process down or hold descriptors for a minute:

* **a crash barrier per connection**: whatever one connection raises (a client that
  resets during the handshake makes ``accept()``/``reject()`` raise `ConnectionClosed`,
  a plain ``GET /`` reset while the library answers 400 raises it from its reader task)
  ends that connection only, with a log line; the listener keeps serving;
* **a handshake bound**: TLS, the upgrade request, the admission decision and the
  answer must all finish within ``handshake_timeout`` of the TCP accept, else the
  connection is closed and its descriptor released; a client that disconnects before
  sending a request is let go at once, not when the bound expires;
* **pending handshakes count**: ``max_sessions`` caps handshakes in progress plus open
  sessions; past it a connection is still read, to answer 503, by at most
  `OVERFLOW_HANDSHAKES` at once; beyond those it is closed unanswered, so a flood holds
  at most ``max_sessions + OVERFLOW_HANDSHAKES`` descriptors, each for at most the bound;
* **fixed views**: with ``views``, a handshake to ``/toolset/NAME`` (or with a token
  that carries a toolset) is served that toolset's view only, and one naming a toolset
  that does not exist is refused with 404 (`mcpvisor.actors.fronts.views`);
* **revoked tokens close sessions**: when the accepted credentials change (a hot reload
  removed a token), every open session is admitted again with its handshake's headers;
  one no longer admitted is closed with `REVOKED_CLOSE_CODE`. One still admitted whose
  view would now differ (its token's toolset binding changed) is closed too, with
  `REBOUND_CLOSE_CODE` and a reason naming both toolsets: a connection's tools list
  must not change under it as a side effect (2026-07-28), and the client's reconnect is
  served the new view from its first request.

The MCP side of a session (frames to SDK streams) stays in `mcpvisor.actors.fronts.ws`.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest
from wsproto import ConnectionType, WSConnection

from mcpvisor.actors import telemetry
from mcpvisor.actors.fronts.auth import Gate, Refusal
from mcpvisor.actors.fronts.views import CONNECTION_VIEW, ToolsetViews, ViewRefused, ws_toolset
from mcpvisor.actors.ws_compat import get_request, read_frames, request_host

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S: Final = 10.0
"""Default bound from TCP accept to the end of the opening handshake, TLS included
(``settings.handshakeTimeout``). trio-websocket's own default is 60 s, during which a port
scan or a half-open handshake holds a descriptor: 300 of them locked a 256-fd proxy out."""

CLOSE_TIMEOUT_S: Final = 5.0
"""The closing handshake: a peer that does not answer our close frame within this is cut
(trio-websocket's 60 s default would hold the descriptor that long)."""

OVERFLOW_HANDSHAKES: Final = 64
"""Connections past ``max_sessions`` read at once only to be answered 503 (so a client
learns why); beyond these the connection is closed unanswered."""

RECHECK_S: Final = 1.0
"""How often the accepted credentials are compared with those of the last check (one
comparison of a small mapping; the config file itself is polled once a second)."""

REVOKED_CLOSE_CODE: Final = 1008
"""RFC 6455 7.4.1 "policy violation": the session's token is no longer accepted."""
REVOKED_REASON: Final = "token no longer accepted"
MAX_CLOSE_REASON: Final = 123
"""A websocket close frame's reason is at most 123 bytes (RFC 6455 5.5.1)."""
REBOUND_CLOSE_CODE: Final = 1008
"""Policy violation, as for a revoked token: what the connection was admitted under changed."""

BUSY_STATUS: Final = 503
WARN_EVERY_S: Final = 10.0
"""A flood past the cap logs one warning per this interval, not one per connection."""


@dataclass(eq=False)
class _Session:
    """One open websocket: what admitted it, and how to end it."""

    peer: str
    headers: Mapping[str, str]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    view: str | None = None
    """The fixed view it is served (`mcpvisor.actors.fronts.views`); None: the proxy's."""
    path: str = "/"
    """The handshake's path (``/toolset/NAME`` names a view)."""
    close_code: int = 1000
    close_reason: str | None = None


def _kinds(exc: BaseException) -> str:
    """The exception's type names, a nursery's group flattened (``RuntimeError``, not ``ExceptionGroup``)."""
    if isinstance(exc, BaseExceptionGroup):
        return ", ".join(dict.fromkeys(_kinds(e) for e in exc.exceptions))
    return type(exc).__name__


def _peer(stream: trio.abc.Stream) -> str:
    """``host:port`` of the client, for log lines (never a header or a token)."""
    sock: Any = getattr(getattr(stream, "transport_stream", stream), "socket", None)
    try:
        host, port, *_ = sock.getpeername()
    except (AttributeError, OSError, ValueError, TypeError):
        return "an unknown client"
    return f"{host}:{port}"


async def _open_listeners(
    host: str, port: int, ssl_context: ssl.SSLContext | None
) -> list[trio.SocketListener] | list[trio.SSLListener[trio.SocketStream]]:
    if ssl_context is None:
        return await trio.open_tcp_listeners(port, host=host)
    return await trio.open_ssl_over_tcp_listeners(port, ssl_context, host=host, https_compatible=True)


def _bound_port(listener: trio.SocketListener | trio.SSLListener[trio.SocketStream]) -> int:
    inner = listener.transport_listener if isinstance(listener, trio.SSLListener) else listener
    assert isinstance(inner, trio.SocketListener)
    return int(inner.socket.getsockname()[1])


class _Front:
    """The per-front state: counters, open sessions, and the per-connection task."""

    def __init__(
        self,
        session: Callable[[WebSocketConnection], Awaitable[None]],
        *,
        subprotocol: str,
        gate: Gate | None,
        max_message: int,
        queue: int,
        max_sessions: int | None,
        handshake_timeout: float,
        views: ToolsetViews | None = None,
    ) -> None:
        self.session = session
        self.views = views
        self.subprotocol = subprotocol
        self.gate = gate
        self.max_message = max_message
        self.queue = queue
        self.max_sessions = max_sessions
        self.handshake_timeout = handshake_timeout
        self.held = 0
        """Handshakes in progress plus open sessions (what ``max_sessions`` caps)."""
        self.overflow = 0
        self.open: set[_Session] = set()
        self._warned_at = -WARN_EVERY_S

    def _warn_busy(self) -> None:
        now = trio.current_time()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "refusing websocket connections: %d handshakes and sessions are open (settings.maxSessions)",
                self.held,
            )

    async def connection(self, stream: trio.abc.Stream) -> None:
        """Serve one TCP connection; nothing it raises reaches the listener (crash barrier)."""
        peer = _peer(stream)
        try:
            counted = self.max_sessions is None or self.held < self.max_sessions
            if not counted:
                self._warn_busy()
                if self.overflow >= OVERFLOW_HANDSHAKES:
                    return
            if counted:
                self.held += 1
            else:
                self.overflow += 1
            try:
                await self._serve(stream, peer, counted)
            finally:
                if counted:
                    self.held -= 1
                else:
                    self.overflow -= 1
        except Exception as exc:  # one connection's failure, never the process's (issue 23)
            logger.error(
                "websocket connection from %s ended by an error (the front keeps serving): %s",
                peer, _kinds(exc), exc_info=exc,
            )
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.abc.Stream, peer: str, counted: bool) -> None:
        async with trio.open_nursery() as nursery:
            ws = WebSocketConnection(
                stream, WSConnection(ConnectionType.SERVER),
                message_queue_size=self.queue, max_message_size=self.max_message,
            )
            opened: tuple[WebSocketConnection, _Session] | None = None
            with trio.move_on_after(self.handshake_timeout) as deadline:
                opened = await self._handshake(nursery, ws, peer, counted)
            if deadline.cancelled_caught:
                logger.info(
                    "websocket handshake from %s unfinished after %g s (settings.handshakeTimeout): closed",
                    peer, self.handshake_timeout,
                )
            if opened is not None:
                await self._run(*opened)
            nursery.cancel_scope.cancel(reason="the websocket connection is over")

    async def _handshake(
        self, nursery: trio.Nursery, ws: WebSocketConnection, peer: str, counted: bool
    ) -> tuple[WebSocketConnection, _Session] | None:
        """Read the upgrade request, admit or refuse it: the open session, or None."""
        request: WebSocketRequest | None = None
        with trio.CancelScope() as waiting:

            async def read() -> None:
                # trio-websocket 0.12's server loop, minus its escapes: one task owns
                # the stream; a client gone before its request ends the wait at once.
                try:
                    await read_frames(ws)
                except ConnectionClosed:  # reset while the library answered a bad request
                    pass
                finally:
                    waiting.cancel(reason="the client went away before its upgrade request")

            nursery.start_soon(read)
            request = await get_request(ws)
        if request is None:
            logger.debug("websocket connection from %s closed before a handshake", peer)
            return None
        try:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
            # wsproto takes Host out of the header list (`request_host` reads it back).
            headers["host"] = request_host(request)
            refusal, view = await self._admit(request, headers)
            if refusal is None and not counted:
                refusal = Refusal(BUSY_STATUS, (), "Too many open sessions")
            if refusal is not None:
                await request.reject(
                    refusal.status, body=refusal.body.encode(),
                    extra_headers=[(k.encode(), v.encode()) for k, v in refusal.headers],
                )
                return None
            opened = await request.accept(subprotocol=self.subprotocol)
        except ConnectionClosed:
            logger.info("websocket handshake from %s aborted by the client", peer)
            return None
        return opened, _Session(peer, headers, view=view, path=request.path)

    async def _admit(self, request: WebSocketRequest,
                     headers: Mapping[str, str]) -> tuple[Refusal | None, str | None]:
        """The refusal of a handshake (None: admitted), and the view it is served."""
        who = None
        if self.gate is not None:
            who, refusal = await self.gate.admit(headers)
            if refusal is not None:
                return refusal, None
        if self.subprotocol not in request.proposed_subprotocols:
            return Refusal(400, (), f"the MCP websocket subprotocol '{self.subprotocol}' is required"), None
        if self.views is None:
            return None, None
        try:
            return None, self.views.choose(ws_toolset(request.path), who)
        except ViewRefused as refused:
            json_type = (("Content-Type", "application/json"),)
            return Refusal(refused.status, json_type, refused.body().decode()), None

    async def _run(self, ws: WebSocketConnection, session: _Session) -> None:
        self.open.add(session)
        view = CONNECTION_VIEW.set(session.view)  # the SDK's handlers of this connection read it
        telemetry.set_front_transport("ws")  # its spans say websocket (this task's context only)
        try:
            with session.scope:
                await self.session(ws)
        finally:
            CONNECTION_VIEW.reset(view)
            self.open.discard(session)
            with trio.move_on_after(CLOSE_TIMEOUT_S):
                await ws.aclose(code=session.close_code, reason=session.close_reason)

    async def recheck(self, credentials: Callable[[], object]) -> None:
        """Close the open sessions whose handshake a changed credential set would refuse."""
        assert self.gate is not None
        seen = credentials()
        while True:
            await trio.sleep(RECHECK_S)
            now = credentials()
            if now == seen:
                continue
            seen = now
            for session in list(self.open):
                who = None
                try:
                    who, refusal = await self.gate.admit(session.headers)
                except Exception as exc:  # cannot confirm the token: fail closed
                    logger.warning("could not check the token of a websocket session: %s", type(exc).__name__)
                    refusal = Refusal(401, (), REVOKED_REASON)
                if refusal is not None and session in self.open:
                    logger.warning("closing the websocket session from %s: its token is no longer accepted",
                                   session.peer)
                    session.close_code, session.close_reason = REVOKED_CLOSE_CODE, REVOKED_REASON
                    session.scope.cancel(reason=REVOKED_REASON)
                elif refusal is None and session in self.open:
                    self._recheck_view(session, who)

    def _recheck_view(self, session: _Session, who: AccessToken | None) -> None:
        """Close ``session`` if the view its handshake would get now is not the one it has."""
        if self.views is None:
            return
        try:
            view = self.views.choose(ws_toolset(session.path), who)
        except ViewRefused as refused:
            reason = f"the token's toolset changed: {refused.message}"
        else:
            if view == session.view:
                return
            was = repr(session.view) if session.view is not None else "all tools"
            now = repr(view) if view is not None else "all tools"
            reason = f"the token's toolset changed ({was} -> {now}); reconnect"
        reason = reason.encode()[:MAX_CLOSE_REASON].decode(errors="ignore")
        logger.warning("closing the websocket session from %s: %s", session.peer, reason)
        session.close_code, session.close_reason = REBOUND_CLOSE_CODE, reason
        session.scope.cancel(reason=reason)


async def serve_guarded(
    session: Callable[[WebSocketConnection], Awaitable[None]],
    host: str,
    port: int,
    *,
    subprotocol: str,
    max_message: int,
    queue: int,
    gate: Gate | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_sessions: int | None = None,
    handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
    credentials: Callable[[], object] | None = None,
    views: ToolsetViews | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept websocket connections at ``host:port`` and run ``session(ws)`` for each admitted one.

    Args:
        session: serves one open websocket; when it returns (or is cancelled because the
            session's token was revoked) the connection is closed within `CLOSE_TIMEOUT_S`.
        subprotocol: the one a client must propose (400 otherwise).
        gate: who may connect; None admits everyone (tests only).
        max_sessions: handshakes in progress plus open sessions; past it, 503.
        handshake_timeout: from TCP accept to the handshake's answer sent.
        credentials: returns the credentials in force; when its value changes, open
            sessions are admitted again by ``gate`` and those refused are closed.
        views: the fixed views: ``/toolset/NAME`` and toolset-bound tokens are served
            theirs (`mcpvisor.actors.fronts.views`).

    ``task_status.started`` receives the port bound (the first listener's, for ``port=0``).
    Runs until cancelled; no connection's error ends it.
    """
    front = _Front(
        session, subprotocol=subprotocol, gate=gate, max_message=max_message, queue=queue,
        max_sessions=max_sessions, handshake_timeout=handshake_timeout, views=views,
    )
    listeners = await _open_listeners(host, port, ssl_context)
    async with trio.open_nursery() as nursery:
        if gate is not None and credentials is not None:
            nursery.start_soon(front.recheck, credentials)
        await nursery.start(trio.serve_listeners, front.connection, listeners)
        task_status.started(_bound_port(listeners[0]))
