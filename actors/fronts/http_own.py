"""Handshake-era HTTP sessions the front opens and serves itself, until one needs the SDK.

A client of the streamable HTTP front opens a session with ``initialize``, says
``notifications/initialized``, lists, and calls tools; the stdio front answers all of that
without the SDK (`mcpvisor.actors.fronts.stdio_own`, the fast path), and so does this one:
an ``initialize`` POSTed to ``/mcp`` on a front that needs no token opens an `OwnSession`
here, answered as the SDK answers it (the same result, a fresh ``Mcp-Session-Id``); on that
session ``notifications/initialized``, ``ping``, ``tools/list``, ``resources/list``,
``resources/templates/list`` and ``prompts/list`` are answered here, ``tools/call`` goes the
HTTP fast path's way (`mcpvisor.actors.fronts.http_fast`), the client's GET is its
notification stream (list changes, log messages, resource updates, as the SDK's transport
streams them: numbered events kept in the session's store, a keep-alive comment after 15 s
of silence, one stream per session) and ``DELETE`` ends it. Each answer is the SDK's event
stream, byte for byte: a priming event for a 2025-11-25 client, the answer as one numbered
event, both kept in the session's event store.

Anything else on the session (any other method, a GET resuming a broken stream with
``Last-Event-ID``, a request that fails a check the SDK makes, a 2026-07-28 request on it)
hands it over first (`OwnSessions.hand_over`): the SDK is loaded if it is not
(`mcpvisor.actors.fronts.http_sdk`), a transport is registered under the session's id in the
SDK's session manager with the session's own event store, and the client's ``initialize``
(and ``notifications/initialized``, if it came) is replayed into it, its answer dropped, so
the SDK's session is the one the client opened; then the request goes to the SDK, which
serves that session from then on. A notification stream open then stays open and carries
the SDK transport's own from then on (the transport serves a GET of the session for it).
A session is handed over once; requests on it that arrive meanwhile wait for it.

The session limit (``maxSessions``) counts these sessions with the SDK's, and one idle for
``sessionIdleTimeout`` (no request, no call in flight) is forgotten, as the SDK forgets its
own: its id then answers 404 and the client opens a new one.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.core.vocabulary import DEFAULT_TIMEOUT_S, HTTP_PATH
from mcpvisor.actors.eras import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from mcpvisor.actors.errors import UpstreamError
from mcpvisor.actors.fronts.fastask import SERVER_REQUEST_PREFIX
from mcpvisor.actors.fronts.replay import sse_event
from mcpvisor.actors.fronts.stdio_own import REPLAY_ID
from mcpvisor.actors.messages import Reply

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.asgi import Message, Scope
    from mcpvisor.actors.fronts.clients import ClientRegistry
    from mcpvisor.actors.fronts.http_exchange import HttpSession
    from mcpvisor.actors.fronts.http_sdk import SdkApp
    from mcpvisor.actors.fronts.replay import ReplayBudget, SessionEvents
    from mcpvisor.actors.fronts.stdio_own import OwnAnswers

logger = logging.getLogger(__name__)

__all__ = ["OwnSession", "OwnSessions", "OwnStream"]

SESSION_HEADER: Final = b"mcp-session-id"
VERSION_HEADER: Final = b"mcp-protocol-version"
GET_STREAM: Final = "_GET_stream"
"""The stream a session's notification stream keeps its events under (the SDK's key, so the
SDK's transport replays them to a client that comes back with ``Last-Event-ID``)."""
STREAM_BUFFER: Final = 64
"""Events queued for a notification stream whose client reads slowly (the client registry
bounds each notification's wait)."""
MIN_SWEEP_S: Final = 1.0
"""The shortest period between two looks for idle sessions."""


class OwnClient:
    """An own session in the client registry (`mcpvisor.actors.fronts.clients`): counted among
    the connected clients, its broadcasts (list changes, log messages, resource updates) sent
    on its notification stream (`OwnStream`) and kept in its event store, as the SDK's
    transport keeps them. While that stream is open it is asked what a server asks outside
    any call (a ``roots/list`` as the server starts), as the SDK's session would be; its
    answer comes back as a POST, taken by the HTTP fast path."""

    def __init__(self, session: OwnSession) -> None:
        self.session_id = session.session_id
        self.exit_stack = ExitStack()
        self._session = session

    @property
    def client_capabilities(self) -> Any:
        """What the client declared, while it has a stream to be asked on (None: none open)."""
        session = self._session
        return session.answers.capabilities() if session.stream is not None else None

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        await self._stream(wire.notification_frame(method, params)[:-1])

    async def _stream(self, frame: bytes) -> None:
        """``frame`` on the session's notification stream, numbered and kept in its store
        (kept even while no stream is open, as the SDK's transport keeps it)."""
        session = self._session
        number = session.events.store_raw(GET_STREAM, frame)
        if session.stream is not None:
            await session.stream.put(sse_event(number, frame))

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Ask the client ``method`` on its notification stream; its answer (a POST) settles
        the reply the session's tables hold, bounded like a call's quiet time."""
        session = self._session
        if session.stream is None or session.tables is None:
            raise UpstreamError(wire.INTERNAL_ERROR, f"the client has no open stream to send {method} on")
        tables = session.tables(session.session_id)
        tables.ids += 1
        rid = f"{SERVER_REQUEST_PREFIX}g{tables.ids}"
        reply: Reply[dict[str, Any]] = Reply()
        tables.requests[rid] = reply
        try:
            asked = dict(params) if params is not None else None
            await self._stream(wire.request_frame(rid, method, asked)[:-1])
            with trio.fail_after(DEFAULT_TIMEOUT_S):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT, f"the client did not answer {method}") from None
        finally:
            tables.requests.pop(rid, None)


class OwnStream:
    """An own session's notification stream (its client's GET): the events waiting to be written."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[bytes | None](STREAM_BUFFER)
        self.relay: tuple[Any, Scope] | None = None
        """Once the session is handed over: the SDK's transport and the GET to ask it for its
        stream with, which this stream carries on (the client keeps its connection)."""

    async def put(self, event: bytes) -> None:
        try:
            await self._send.send(event)
        except trio.ClosedResourceError:
            pass  # the stream ended meanwhile: the event is in the store

    def end(self) -> None:
        """End the stream once what is queued is written (the session was handed over or closed)."""
        try:
            self._send.send_nowait(None)
        except (trio.WouldBlock, trio.ClosedResourceError):
            self._send.close()

    def hand_over(self, transport: Any, scope: Scope) -> None:
        """Carry the SDK transport's stream from now on, once what is queued is written."""
        self.relay = (transport, scope)
        self._send.close()

    async def next(self) -> bytes | None:
        """The next event to write; None: the stream ends."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None


class OwnSession:
    """One session the front opened: the handshake it answered, for the SDK if it ever needs it."""

    __slots__ = ("answers", "client", "closed", "events", "headers", "last_active", "lock", "owner", "scope",
                 "session_id", "stream", "tables", "transport", "version")

    def __init__(self, session_id: str, answers: OwnAnswers, owner: Any, scope: Scope,
                 events: SessionEvents) -> None:
        self.session_id = session_id
        self.answers = answers
        self.owner = owner
        """Who opened it, as the front's checks named them (None: the front checks no token)."""
        self.scope = {k: scope.get(k) for k in ("scheme", "http_version", "client", "server")}
        dropped = (SESSION_HEADER, b"content-length")
        self.headers: list[tuple[bytes, bytes]] = [
            (k, v) for k, v in scope.get("headers") or () if k.lower() not in dropped
        ]
        """The ``initialize`` request's headers (Host, Origin, Accept...), for its replay."""
        assert answers.initialize is not None
        requested = answers.initialize.get("protocolVersion")
        self.version = requested if isinstance(requested, str) and requested in HANDSHAKE_PROTOCOL_VERSIONS \
            else LATEST_HANDSHAKE_VERSION
        """The version the front agreed with the client."""
        self.events = events
        self.stream: OwnStream | None = None
        """Its client's notification stream while one is open (at most one, as the SDK's)."""
        self.tables: Callable[[str], HttpSession] | None = None
        """The HTTP fast path's tables of a session (requests sent to its client among them)."""
        self.client = OwnClient(self)
        self.last_active = trio.current_time()
        self.transport: Any = None
        """The SDK's transport of the session, once handed over."""
        self.lock = trio.Lock()
        self.closed = False

    def replayed_initialize(self) -> bytes:
        """The client's ``initialize`` as the SDK's session reads it at the hand-over: under an
        id of its own (`REPLAY_ID`), so nothing of it mixes with the client's own requests."""
        return wire.request_frame(REPLAY_ID, "initialize", self.answers.initialize)[:-1]

    async def terminate(self) -> None:
        """End the session (its client stopped reading an answer): as the SDK's transport
        ends one, its id answers 404 from now on."""
        self.closed = True
        self.client.exit_stack.close()
        if self.stream is not None:
            self.stream.end()
        if self.transport is not None:
            await self.transport.terminate()


class OwnSessions:
    """The sessions the front opened and has not handed over, and their hand-over.

    Args:
        sdk: the SDK's app, built on first need.
        clients: the client registry (an open session is a connected client).
        budget: the front's replay budget (each session's events are its own).
        max_sessions: the limit on open sessions, the SDK's included.
        idle_timeout: how long a session may sit without a request (None: for ever).
        prefix: what every session id begins with (a replica's name and a dot), or "".
        busy: whether the session still has calls in flight (it is not idle then).
    """

    def __init__(self, sdk: SdkApp, clients: ClientRegistry, budget: ReplayBudget, *, max_sessions: int,
                 idle_timeout: float | None, prefix: str, busy: Callable[[str], bool]) -> None:
        self.sdk = sdk
        self.clients = clients
        self.budget = budget
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.prefix = prefix
        self.busy = busy
        self.sessions: dict[str, OwnSession] = {}
        self.tables: Callable[[str], HttpSession] | None = None
        """The HTTP fast path's tables of a session (set by the fast path)."""

    def get(self, session_id: str) -> OwnSession | None:
        """The open session ``session_id`` (None: not one of these, or closed)."""
        session = self.sessions.get(session_id)
        if session is not None and session.closed:
            del self.sessions[session_id]
            return None
        return session

    def full(self) -> bool:
        """Whether a new session would pass the limit (the SDK's sessions counted too)."""
        manager = self.sdk.manager
        from_sdk = 0
        if manager is not None:
            from mcpvisor.actors.sdk_compat import http_transports

            from_sdk = len(http_transports(manager))
        return len(self.sessions) + from_sdk >= self.max_sessions

    def open(self, answers: OwnAnswers, owner: Any, scope: Scope) -> OwnSession:
        """A new session for the ``initialize`` request ``scope``, which ``answers`` answered."""
        session_id = f"{self.prefix}{uuid.uuid4().hex}"
        session = OwnSession(session_id, answers, owner, scope, self.budget.session())
        session.tables = self.tables
        self.sessions[session_id] = session
        self.clients.track_own(session.client)
        return session

    def close(self, session: OwnSession) -> None:
        """Forget ``session`` (its client ended it, or it sat idle)."""
        session.closed = True
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        session.client.exit_stack.close()
        if session.stream is not None:
            session.stream.end()

    async def hand_over(self, session: OwnSession) -> bool:
        """Make ``session`` the SDK's (see the module doc); False if the SDK could not take it
        (it then answers the session's requests as one it does not know)."""
        async with session.lock:
            if session.transport is not None:
                return True
            if session.closed:
                return False
            try:
                await self.sdk.ready()
                session.transport = await self._adopt(session)
            except Exception:
                logger.exception("HTTP session %s: could not hand it to the MCP SDK", session.session_id)
                self.close(session)
                return False
            if self.sessions.get(session.session_id) is session:
                del self.sessions[session.session_id]
            if session.stream is not None:
                # The client's notification stream stays open, carrying the SDK transport's
                # from now on (what the SDK's session is sent outside a request).
                listen = [(b"accept", b"text/event-stream"),
                          (SESSION_HEADER, session.session_id.encode("latin-1")),
                          (VERSION_HEADER, session.version.encode("latin-1"))]
                session.stream.hand_over(session.transport, self._scope(session, listen, {}, method="GET"))
            return True

    async def _adopt(self, session: OwnSession) -> Any:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
        from mcp.server.auth.provider import AccessToken
        from starlette.authentication import AuthCredentials

        from mcpvisor.actors.sdk_compat import adopt_http_session

        extra: dict[str, Any] = {}
        owner = None
        if session.owner is not None:
            token = AccessToken(token="", client_id=session.owner.client_id, scopes=[])
            user = AuthenticatedUser(token)
            extra = {"user": user, "auth": AuthCredentials([])}
            owner = authorization_context(user)
        # The SDK's session is tracked by the registry from the replayed handshake on.
        session.client.exit_stack.close()
        opened = _Replayed(session.replayed_initialize())
        transport = await adopt_http_session(self.sdk.manager, session.session_id, owner, session.events,
                                             self._scope(session, [], extra), opened.receive, opened.send)
        if opened.status is None or opened.status >= 400:
            raise RuntimeError(f"the SDK answered the replayed initialize with status {opened.status}")
        if session.answers.initialized:
            note = _Replayed(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
            ids = [(SESSION_HEADER, session.session_id.encode("latin-1")),
                   (VERSION_HEADER, session.version.encode("latin-1"))]
            await transport.handle_request(self._scope(session, ids, extra), note.receive, note.send)
        return transport

    @staticmethod
    def _scope(session: OwnSession, headers: list[tuple[bytes, bytes]], extra: dict[str, Any], *,
               method: str = "POST") -> Scope:
        if method == "GET":  # its own Accept
            kept = [(k, v) for k, v in session.headers if k.lower() not in (b"accept", b"content-type")]
        else:
            kept = session.headers
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": method,
                "path": HTTP_PATH, "raw_path": HTTP_PATH.encode(), "query_string": b"", "root_path": "",
                "headers": [*kept, *headers], "state": {}, **session.scope, **extra}

    async def expire(self) -> None:
        """Forget sessions idle for ``idle_timeout``, until cancelled."""
        if self.idle_timeout is None or not math.isfinite(self.idle_timeout):
            return
        period = max(self.idle_timeout / 4, MIN_SWEEP_S)
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            for session in list(self.sessions.values()):
                if session.stream is not None or self.busy(session.session_id):
                    session.last_active = now
                elif now - session.last_active >= self.idle_timeout:
                    logger.info("HTTP session %s idle for %g s: forgotten", session.session_id,
                                self.idle_timeout)
                    self.close(session)


class _Replayed:
    """A replayed request's ``receive`` and ``send``: its body once, its answer dropped."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.status: int | None = None
        self._sent = False

    async def receive(self) -> Message:
        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(self, message: Message) -> None:
        if message.get("type") == "http.response.start":
            self.status = message.get("status")
