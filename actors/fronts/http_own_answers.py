"""How the HTTP front answers the sessions it opens itself (`mcpvisor.actors.fronts.http_own`).

Owns `OwnRequests`, a base class of `HttpFast` (`mcpvisor.actors.fronts.http_fast`): which
requests open or belong to an own session, the checks the SDK's app would make first (no
token needed, Host and Origin, a handshake-era version, and for a POST its ``Content-Type``
and ``Accept``), the answers themselves as the SDK's transport writes them (an event stream
with a priming event and one numbered event; 202 for a notification; 200 with an empty body
for ``DELETE``; 409 for a second notification stream; 503 past the session limit), the
session's notification stream, and `_pass`, which hands a session over before the SDK's app
gets one of its requests. A base class rather than an object `HttpFast` holds, so its
request handling calls these as its own methods, as it calls its checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.core.vocabulary import HTTP_PATH
from mcpvisor.actors.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcpvisor.actors.fronts.http_checks import HttpChecks, accepts_events
from mcpvisor.actors.fronts.http_own import (
    SESSION_HEADER,
    VERSION_HEADER,
    OwnSession,
    OwnSessions,
    OwnStream,
)
from mcpvisor.actors.fronts.replay import primed, priming_event, sse_event
from mcpvisor.actors.fronts.stdio_own import LISTS, OwnAnswers

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.asgi import Message, Receive, Scope, Send
    from mcpvisor.actors.fronts.frames import Refusal
    from mcpvisor.actors.fronts.front import Front
    from mcpvisor.actors.fronts.http import FrameGuard

logger = logging.getLogger("mcpvisor.actors.fronts.http_own")

__all__ = ["OwnRequests", "answer_refusal"]

ANSWERED: Final = frozenset({"ping", *LISTS})
"""The requests an own session's answers come from here (`OwnAnswers`)."""
PASSED_ON: Final = frozenset({"tools/call", "notifications/cancelled"})
"""What the HTTP fast path takes on an own session (and what it does not take is handed over)."""
SSE_HEADERS: Final = ((b"content-type", b"text/event-stream"),
                      (b"cache-control", b"no-cache, no-transform"), (b"connection", b"keep-alive"),
                      (b"x-accel-buffering", b"no"), (b"mcpvisor-path", b"own"))
"""An event stream's headers, as the SDK's transport sends them (and which path answered)."""
_TOO_MANY: Final = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Too many open sessions"}}'
"""The SDK's answer to a new session beyond the limit (with HTTP 503)."""

_CONFLICT: Final = (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
                    b'"message":"Conflict: Only one SSE stream is allowed per session"}}')
"""The SDK's answer to a second notification stream on one session (with HTTP 409)."""


async def answer_json(send: Send, session_id: str, body: bytes, status: int = 200) -> None:
    """An answer as the SDK's transport sends a JSON one: the session's id in a header."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (SESSION_HEADER, session_id.encode("latin-1"))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def answer_events(send: Send, session: OwnSession, rid: int | str, frame: bytes,
                        version: str | None) -> None:
    """``frame``, the answer to request ``rid``, as the SDK's transport streams it: a priming
    event (an id, ``retry:``) for a client of 2025-11-25 or later (``version``; None: the
    request named none), then the answer as a numbered event, both kept in the session's
    event store under the request's stream."""
    stream = str(rid)
    body = b""
    if primed(version):
        body = priming_event(session.events.store_raw(stream, None))
    body += sse_event(session.events.store_raw(stream, frame), frame)
    headers = [*SSE_HEADERS, (SESSION_HEADER, session.session_id.encode("latin-1")),
               (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def accepted_json(send: Send, session_id: str) -> None:
    """202, as the SDK's transport accepts a notification or a response."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"0"),
               (SESSION_HEADER, session_id.encode("latin-1"))]
    await send({"type": "http.response.start", "status": 202, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def answer_refusal(send: Send, refusal: Refusal) -> None:
    """``refusal`` as the frame checks answer it: HTTP 400 and a JSON-RPC error."""
    body = wire.encode(refusal.body())
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class OwnRequests(HttpChecks):
    """The requests of own sessions, as `HttpFast` (a subclass) takes them (see the module doc),
    checked with the checks it makes of every request (`HttpChecks`)."""

    own: OwnSessions | None
    front: Front
    app: Callable[[Scope, Receive, Send], Any]
    _capabilities: dict[str, dict[str, Any]]
    guard: FrameGuard

    def _forget_closed(self) -> None: ...

    def _own_session(self, scope: Scope) -> OwnSession | None:
        """The own session the request names, not yet handed over (None: none)."""
        if self.own is None:
            return None
        for key, value in scope.get("headers") or ():
            if key == SESSION_HEADER:
                session = self.own.get(value.decode("latin-1"))
                return session if session is not None and session.transport is None else None
        return None

    async def _pass(self, scope: Scope, receive: Receive, send: Send,
                    session: OwnSession | None = None) -> None:
        """Hand the request to the SDK's app, its own session handed over first."""
        if session is None:
            session = self._own_session(scope)
        if session is not None and self.own is not None:
            await self.own.hand_over(session)
        await self.app(scope, receive, send)

    def _open_to_all(self) -> bool:
        """The front requires no token now (a hot reload may add one: the SDK checks it then)."""
        return self.verifier is None or not self.verifier.guarding()

    def _plain(self, scope: Scope, headers: Mapping[bytes, bytes], *, post: bool) -> bool:
        """The request passes what the SDK's app would check before serving a session's
        request: no token needed, the Host and Origin rules, a handshake-era version (or none),
        and for a POST the JSON ``Content-Type`` and an ``Accept`` of JSON and event streams."""
        if scope.get("path") != HTTP_PATH or not self._open_to_all() or not self._host_ok(headers):
            return False
        version = headers.get(VERSION_HEADER)
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            return False
        return not post or self._post_ok(headers)

    async def _own_post(self, scope: Scope, receive: Receive, send: Send, env: wire.Envelope,
                        body: bytes) -> bool:
        """A POST that opens an own session or is on one: True when answered here (or handed
        over and passed on), False for the fast path's and the SDK's."""
        assert self.own is not None
        headers = dict(scope.get("headers") or ())
        sid = headers.get(SESSION_HEADER)
        if sid is None:
            if env.method == "initialize" and env.id is not UNSET:
                return await self._own_initialize(scope, send, env, body, headers)
            return False
        session = self.own.get(sid.decode("latin-1"))
        if session is None or session.transport is not None:
            return False
        session.last_active = trio.current_time()
        method = env.method
        rid = env.id
        if self._plain(scope, headers, post=True):
            if method == "notifications/initialized" and rid is UNSET:
                session.answers.note_initialized(env)
                await accepted_json(send, session.session_id)
                return True
            if rid is not UNSET and rid is not None and method in ANSWERED:
                if str(rid) in self.guard.in_flight_ids(session.session_id):
                    from mcpvisor.actors.fronts.frames import duplicate_id

                    await answer_refusal(send, duplicate_id(rid))
                    return True
                started = trio.current_time()
                frame = session.answers.answer(method, env, body)
                if frame is not None:
                    version = headers.get(VERSION_HEADER)
                    await answer_events(send, session, rid, frame[:-1],
                                        version.decode("latin-1") if version is not None else None)
                    if self.front.on_served is not None:
                        self.front.on_served(method, started, trio.current_time(), None)
                    return True
            if method in PASSED_ON or method is UNSET:
                return False  # the fast path's; what it does not take comes back through `_pass`
        await self._pass(scope, receive, send, session)
        return True

    async def _own_initialize(self, scope: Scope, send: Send, env: wire.Envelope, body: bytes,
                              headers: Mapping[bytes, bytes]) -> bool:
        assert self.own is not None
        if not self._plain(scope, headers, post=True):
            return False
        if self.own.full():
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"%d" % len(_TOO_MANY))]})
            await send({"type": "http.response.body", "body": _TOO_MANY})
            return True
        started = trio.current_time()
        answers = OwnAnswers(self.front)
        frame = answers.answer("initialize", env, body)
        if frame is None:
            return False  # params the SDK answers itself (with its error), tracing, the drain
        who = self._anonymous_who if self.verifier is not None else None
        self._forget_closed()
        session = self.own.open(answers, who, scope)
        caps = (answers.initialize or {}).get("capabilities")
        self._capabilities[session.session_id] = caps if isinstance(caps, dict) else {}
        requested = (answers.initialize or {}).get("protocolVersion")
        await answer_events(send, session, env.id, frame[:-1],  # type: ignore[arg-type]
                            requested if isinstance(requested, str) else None)
        if self.front.on_served is not None:
            self.front.on_served("initialize", started, trio.current_time(), None)
        return True

    async def _own_other(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """A GET or DELETE of an own session: its notification stream, its end (200, as the
        SDK's). False: the SDK's app serves it (a GET resuming a broken stream, with
        ``Last-Event-ID``, hands the session over first)."""
        session = self._own_session(scope)
        if session is None:
            return False
        headers = dict(scope.get("headers") or ())
        if not self._plain(scope, headers, post=False):
            return False
        assert self.own is not None
        method = scope.get("method")
        if method == "DELETE":
            self.own.close(session)
            await answer_json(send, session.session_id, b"")
            return True
        if method != "GET" or b"last-event-id" in headers or not accepts_events(headers.get(b"accept", b"")):
            return False
        session.last_active = trio.current_time()
        if session.stream is not None:
            await answer_json(send, session.session_id, _CONFLICT, status=409)
            return True
        await _serve_stream(session, receive, send)
        return True


async def _serve_stream(session: OwnSession, receive: Receive, send: Send) -> None:
    """A session's notification stream, as the SDK's transport serves one: the headers, then
    each event as it comes (numbered, kept in the session's store), a keep-alive comment
    after `KEEP_ALIVE_S` of silence, until the client leaves or the session ends. Once the
    session is handed over, the stream carries the SDK transport's own (`_relay`)."""
    from mcpvisor.actors.fronts.http_keep_alive import KEEP_ALIVE_S, ping_comment

    stream = session.stream = OwnStream()
    headers = [*SSE_HEADERS, (SESSION_HEADER, session.session_id.encode("latin-1"))]
    left = False
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        async with trio.open_nursery() as nursery:
            gone = trio.Event()

            async def watch() -> None:
                nonlocal left
                while (await receive()).get("type") != "http.disconnect":
                    pass
                left = True
                gone.set()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            while True:
                event: bytes | None = b""
                with trio.move_on_after(KEEP_ALIVE_S):
                    event = await stream.next()
                if event is None:
                    break
                await send({"type": "http.response.body", "body": event or ping_comment(), "more_body": True})
            if stream.relay is not None:
                await _relay(*stream.relay, send, gone)
            nursery.cancel_scope.cancel()
        if not left:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # the connection closed under a write: the client left
        logger.debug("HTTP session %s: its notification stream broke", session.session_id, exc_info=True)
    finally:
        if session.stream is stream:
            session.stream = None


async def _relay(transport: Any, scope: Scope, send: Send, gone: trio.Event) -> None:
    """Carry the SDK transport's notification stream on the client's open one: the transport
    serves ``scope`` (a GET of the session) as if the client had sent it, and what it writes
    goes to the client, until the client leaves (``gone``) or the transport ends its stream."""

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def relayed(message: Message) -> None:
        if message.get("type") == "http.response.start":
            if message.get("status") != 200:
                raise RuntimeError(f"the SDK refused the session's stream (HTTP {message.get('status')})")
            return
        body = message.get("body", b"")
        if body:
            await send({"type": "http.response.body", "body": body, "more_body": True})

    await transport.handle_request(scope, receive, relayed)
