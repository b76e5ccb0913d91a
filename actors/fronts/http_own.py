"""Handshake-era HTTP sessions the front opens and serves itself, until one needs the SDK.

A client of the streamable HTTP front opens a session with ``initialize``, says
``notifications/initialized``, lists, and calls tools; the stdio front answers all of that
without the SDK (`mcpvisor.actors.fronts.stdio_own`, the fast path), and so does this one:
an ``initialize`` POSTed to ``/mcp`` on a front that needs no token opens an `OwnSession`
here, answered as the SDK answers it (the same result, a fresh ``Mcp-Session-Id``); on that
session ``notifications/initialized``, ``ping``, ``tools/list``, ``resources/list``,
``resources/templates/list`` and ``prompts/list`` are answered here, ``tools/call`` goes the
HTTP fast path's way (`mcpvisor.actors.fronts.http_fast`) and ``DELETE`` ends it. Each answer
is the SDK's event stream, byte for byte: a priming event for a 2025-11-25 client, the
answer as one numbered event, both kept in the session's event store.

Anything else on the session (any other method, a GET for its notification stream, a
request that fails a check the SDK makes, a 2026-07-28 request on it) hands it over
first (`OwnSessions.hand_over`): the SDK is loaded if it is not
(`mcpvisor.actors.fronts.http_sdk`), a transport is registered under the session's id in the
SDK's session manager with the session's own event store, and the client's ``initialize``
(and ``notifications/initialized``, if it came) is replayed into it, its answer dropped, so
the SDK's session is the one the client opened; then the request goes to the SDK, which
serves that session from then on. A session is handed over once; requests on it that
arrive meanwhile wait for it.

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
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.core.vocabulary import HTTP_PATH
from mcpvisor.actors.eras import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from mcpvisor.actors.fronts.replay import RETRY_MS
from mcpvisor.actors.fronts.stdio_own import LISTS, REPLAY_ID, OwnAnswers

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.asgi import Message, Receive, Scope, Send
    from mcpvisor.actors.fronts.auth import HostRules, Verifier
    from mcpvisor.actors.fronts.clients import ClientRegistry
    from mcpvisor.actors.fronts.frames import Refusal
    from mcpvisor.actors.fronts.front import Front
    from mcpvisor.actors.fronts.http import FrameGuard
    from mcpvisor.actors.fronts.http_sdk import SdkApp
    from mcpvisor.actors.fronts.replay import ReplayBudget, SessionEvents

logger = logging.getLogger(__name__)

__all__ = ["OwnRequests", "OwnSession", "OwnSessions"]

SESSION_HEADER: Final = b"mcp-session-id"
VERSION_HEADER: Final = b"mcp-protocol-version"
MIN_SWEEP_S: Final = 1.0
"""The shortest period between two looks for idle sessions."""
ANSWERED: Final = frozenset({"ping", *LISTS})
"""The requests an own session's answers come from here (`OwnAnswers`)."""
PASSED_ON: Final = frozenset({"tools/call", "notifications/cancelled"})
"""What the HTTP fast path takes on an own session (and what it does not take is handed over)."""
PRIMING_SINCE: Final = "2025-11-25"
"""The first revision whose clients read a priming event (older ones would choke on it)."""
DEFAULT_VERSION: Final = "2025-03-26"
"""The version a request without the header is taken to speak (the SDK's default)."""
SSE_HEADERS: Final = ((b"content-type", b"text/event-stream"),
                      (b"cache-control", b"no-cache, no-transform"), (b"connection", b"keep-alive"),
                      (b"x-accel-buffering", b"no"), (b"mcpvisor-path", b"own"))
"""An event stream's headers, as the SDK's transport sends them (and which path answered)."""
_TOO_MANY: Final = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Too many open sessions"}}'
"""The SDK's answer to a new session beyond the limit (with HTTP 503)."""


class OwnClient:
    """An own session in the client registry (`mcpvisor.actors.fronts.clients`): counted among
    the connected clients. It has no notification stream (a GET hands the session over), so it
    takes no broadcast and no request outside its calls (it declares no capability there)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.exit_stack = ExitStack()
        self.client_capabilities: Any = None

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        return None

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        raise RuntimeError("this HTTP session has no stream to send a request on")


class OwnSession:
    """One session the front opened: the handshake it answered, for the SDK if it ever needs it."""

    __slots__ = ("answers", "client", "closed", "events", "headers", "last_active", "lock", "owner", "scope",
                 "session_id", "transport", "version")

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
        self.client = OwnClient(session_id)
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
        self.handed_over = 0

    def __len__(self) -> int:
        return len(self.sessions)

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
        self.sessions[session_id] = session
        self.clients.track_own(session.client)
        return session

    def close(self, session: OwnSession) -> None:
        """Forget ``session`` (its client ended it, or it sat idle)."""
        session.closed = True
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        session.client.exit_stack.close()

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
            self.handed_over += 1
            if self.sessions.get(session.session_id) is session:
                del self.sessions[session.session_id]
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
    def _scope(session: OwnSession, headers: list[tuple[bytes, bytes]], extra: dict[str, Any]) -> Scope:
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "POST",
                "path": HTTP_PATH, "raw_path": HTTP_PATH.encode(), "query_string": b"", "root_path": "",
                "headers": [*session.headers, *headers], "state": {}, **session.scope, **extra}

    async def expire(self) -> None:
        """Forget sessions idle for ``idle_timeout``, until cancelled."""
        if self.idle_timeout is None or not math.isfinite(self.idle_timeout):
            return
        period = max(self.idle_timeout / 4, MIN_SWEEP_S)
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            for session in list(self.sessions.values()):
                if self.busy(session.session_id):
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


async def answer_json(send: Send, session_id: str, body: bytes, status: int = 200) -> None:
    """An answer as the SDK's transport sends a JSON one: the session's id in a header."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (SESSION_HEADER, session_id.encode("latin-1"))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def answer_events(send: Send, session: OwnSession, rid: int | str, frame: bytes, version: str) -> None:
    """``frame``, the answer to request ``rid``, as the SDK's transport streams it: a priming
    event (an id, ``retry:``) for a client of 2025-11-25 or later, then the answer as a
    numbered event, both kept in the session's event store under the request's stream."""
    stream = str(rid)
    body = b""
    if version >= PRIMING_SINCE:  # ISO dates compare as strings
        number = session.events.store_raw(stream, None)
        body = b"id: %s\r\ndata: \r\nretry: %d\r\n\r\n" % (number.encode(), RETRY_MS)
    number = session.events.store_raw(stream, frame)
    body += b"id: %s\r\nevent: message\r\ndata: %s\r\n\r\n" % (number.encode(), frame)
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


class OwnRequests:
    """The requests of own sessions, as `HttpFast` (a subclass) takes them (see the module doc)."""

    own: OwnSessions | None
    front: Front
    app: Callable[[Scope, Receive, Send], Any]
    rules: HostRules
    verifier: Verifier | None
    _anonymous_who: Any
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
        if scope.get("path") != HTTP_PATH or not self._open_to_all():
            return False
        host = headers.get(b"host")
        origin = headers.get(b"origin")
        if not self.rules.host_ok(host.decode("latin-1") if host is not None else None):
            return False
        if origin is not None and not self.rules.origin_ok(origin.decode("latin-1")):
            return False
        version = headers.get(VERSION_HEADER)
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            return False
        if not post:
            return True
        from mcpvisor.actors.fronts.http_checks import accepts_both

        ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip()
        return ctype == b"application/json" and accepts_both(headers.get(b"accept", b""))

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
                                        version.decode("latin-1") if version is not None else DEFAULT_VERSION)
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
                            requested if isinstance(requested, str) else DEFAULT_VERSION)
        if self.front.on_served is not None:
            self.front.on_served("initialize", started, trio.current_time(), None)
        return True

    async def _own_other(self, scope: Scope, send: Send) -> bool:
        """A GET or DELETE: a DELETE of an own session ends it here (200, as the SDK's); a
        GET (its notification stream) hands it over. False: the SDK's app serves it."""
        session = self._own_session(scope)
        if session is None or scope.get("method") != "DELETE":
            return False
        if not self._plain(scope, dict(scope.get("headers") or ()), post=False):
            return False
        assert self.own is not None
        self.own.close(session)
        await answer_json(send, session.session_id, b"")
        return True


async def answer_refusal(send: Send, refusal: Refusal) -> None:
    """``refusal`` as the frame checks answer it: HTTP 400 and a JSON-RPC error."""
    body = wire.encode(refusal.body())
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
