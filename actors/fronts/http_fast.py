"""The HTTP front's own path for ``tools/call``: the stdio fast path's routing, over HTTP.

Every request to the streamable HTTP front used to go through Starlette and the SDK's
session manager (a transport, memory streams, pydantic and the SDK server's dispatcher
per request: about 2 ms of CPU). `HttpFast` is an ASGI layer in front of that app. A
POST to ``/mcp`` (or a toolset's view, ``/mcp/toolset/NAME``) whose body is a
``tools/call`` request is served here:

* checked once (`mcpvisor.actors.fronts.http_checks`): Host and Origin (the front's
  rules), ``Content-Type`` and ``Accept``, the bearer token (the front's verifier and
  required scopes), the view the URL or token chooses, and the ``Mcp-Session-Id`` against
  the SDK's own session store (the session exists and was opened with the same
  credential) or, for a 2026-07-28 request, the envelope and routing headers as the SDK
  classifies them (no session at all);
* routed as the stdio fast path routes (`mcpvisor.actors.fronts.fastpath.FastPath`, one
  `HttpExchange` per request sharing its session's tables): the snapshot's plan, the id and
  progress token rewritten, the upstream's bytes streamed back through `FastCall`
  (progress, log messages, ``input_required`` rounds, errors, retries as on stdio);
* answered as the SDK answers: a handshake-era request gets an SSE stream opened with a
  priming event and numbered events kept in the session's event store (a client whose
  stream breaks comes back with ``Last-Event-ID``, and what the call sends after the
  break reaches it); a 2026-07-28 request gets JSON, or SSE once a notification comes
  first, with the HTTP status the SDK maps each error code to;
* a handshake-era client's answers to requests sent on an upstream's behalf (sampling,
  elicitation, roots) and its ``notifications/cancelled`` for a call served here are
  taken here too (202); a client that disconnects mid-call has the call cancelled
  upstream, unless its stream can be resumed (the call then runs on for the resume).

Anything else, and any request this layer cannot take (a check fails: the SDK then
refuses it with its own status and body; a management tool, a load, a wait for start-up,
a server not ready or not on stdio, a session-scoped server, ``Mcp-Param-*`` headers,
the drain, the fast path turned off), goes to the SDK's app unchanged, the body replayed
as it was read. docs/hotpath.md lists what falls back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from msgspec import UNSET, Raw

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcpvisor.actors.errors import ProxyError, error_data
from mcpvisor.actors.fronts.asgi import Message, Receive, Scope, Send, read_body
from mcpvisor.actors.fronts.fastask import SERVER_REQUEST_PREFIX, settle_reply
from mcpvisor.actors.fronts.frames import Refusal, decode_client_frame, request_refusal
from mcpvisor.actors.fronts.http_checks import MCP_PATH, AnonymousClient, classified
from mcpvisor.actors.fronts.http_exchange import (
    PATH_HEADER,
    SESSION_HEADER,
    HttpExchange,
    HttpSession,
    ModernSession,
    accepted,
)
from mcpvisor.actors.fronts.http_keep_alive import KeepAlive
from mcpvisor.actors.fronts.http_own import VERSION_HEADER
from mcpvisor.actors.fronts.http_own_answers import OwnRequests
from mcpvisor.actors.fronts.limits import MAX_IN_FLIGHT
from mcpvisor.actors.fronts.replay import primed
from mcpvisor.actors.fronts.views import HTTP_TOOLSET_PREFIX

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.auth import HostRules, Verifier
    from mcpvisor.actors.fronts.fastcall import FastCall
    from mcpvisor.actors.fronts.front import Front
    from mcpvisor.actors.fronts.http import FrameGuard
    from mcpvisor.actors.fronts.http_own import OwnSessions
    from mcpvisor.actors.fronts.http_sdk import SdkApp
    from mcpvisor.actors.fronts.replay import SessionEvents
    from mcpvisor.actors.fronts.views import ToolsetViews

logger = logging.getLogger(__name__)

__all__ = ["PATH_HEADER", "HttpFast", "HttpFastStatistics"]

App = Callable[[Scope, Receive, Send], Awaitable[None]]

_PARAM_PREFIX: Final = b"mcp-param-"


@dataclass(frozen=True, slots=True)
class HttpFastStatistics:
    """What the HTTP fast path has served so far (for tests and bench/)."""

    fast_calls: int
    """``tools/call`` requests answered here."""
    passed_calls: int
    """``tools/call`` requests handed to the SDK (a check failed, or the plan needs the SDK)."""
    in_flight: int


class HttpFast(OwnRequests):
    """The ASGI layer in front of the SDK's streamable-HTTP app (see the module doc).

    Args:
        app: the SDK's app (with the front's other layers), for everything not served here.
        front: the shared SDK front (its backend, drain, serverInfo, log level).
        manager: the SDK's session manager: the session store checked per request.
        rules, verifier, required_scopes: the checks the SDK's app makes before its session
            manager (a request failing one is passed to the SDK, which refuses it).
        views: the toolset views, when the front has them.
        guard: the frame checks of the SDK path, whose ids in flight are shared (a call
            here and one there may not reuse an id on one session).
        nursery: where calls' background work runs (retries, sends from a failure).
        anonymous: the client id the front gives a request while no token is required.
    """

    def __init__(self, app: App, front: Front, *, sdk: SdkApp, own: OwnSessions | None, rules: HostRules,
                 verifier: Verifier | None, required_scopes: tuple[str, ...], views: ToolsetViews | None,
                 guard: FrameGuard, nursery: trio.Nursery, max_body: int, anonymous: str,
                 limit: int = MAX_IN_FLIGHT) -> None:
        self.app = app
        self.front = front
        self.backend = front.backend
        self.sdk = sdk
        self.own = own
        self.rules = rules
        self.verifier = verifier
        self.required_scopes = required_scopes
        self.views = views
        self.guard = guard
        self.nursery = nursery
        self.max_body = max_body
        self.anonymous = anonymous
        """Who a request on an open front is, as the SDK's session checks know it."""
        self.limit = limit
        self.stamp = Raw(wire.encode(dict(front.server_info_stamp)))
        self.sessions: dict[str, HttpSession] = {}
        self.parked: dict[str, FastCall] = {}
        """2026-07-28 calls between their legs, by ``requestState`` (no session holds them)."""
        self.modern_calls: set[FastCall] = set()
        self._capabilities: dict[str, dict[str, Any]] = {}
        """What each session's client declared in ``initialize``, by session id."""
        self.fast_calls = 0
        self.passed_calls = 0
        self.modern_session = ModernSession()
        self.keep_alive = KeepAlive(nursery)
        """The one timer that keeps every silent SSE answer of this path alive."""
        self._header_cache: tuple[Snapshot, frozenset[str]] | None = None
        self._anonymous_token: Any = None
        self._anonymous_who = AnonymousClient(anonymous)
        self._matched: tuple[Any, Any] | None = None

    def statistics(self) -> HttpFastStatistics:
        return HttpFastStatistics(self.fast_calls, self.passed_calls, self.in_flight())

    # --- the drain's view (`mcpvisor.actors.fronts.drain.FastCalls`) --------------------------
    def tables(self, session_id: str) -> HttpSession:
        """The fast path's tables of a handshake-era session (made if it has none now)."""
        session = self.sessions.get(session_id)
        if session is None:
            declared = self._capabilities.get(session_id, {})
            session = self.sessions[session_id] = HttpSession(session_id, declared)
        return session

    def has_calls(self, session_id: str) -> bool:
        """Whether the session has calls in flight here (an own session is not idle then)."""
        session = self.sessions.get(session_id)
        return session is not None and bool(session.calls)

    def in_flight(self) -> int:
        return sum(len(s.calls) for s in self.sessions.values()) + len(self.modern_calls)

    async def shut_down(self, error: ProxyError) -> None:
        """The proxy is stopping: answer every call in flight with ``error``, cancel it upstream."""
        body = error_data(error)
        calls = [c for s in self.sessions.values() for c in s.calls.values()] + list(self.modern_calls)
        for call in calls:
            if not call.fast.release(call.front_id, call):
                continue
            call.note(error)
            if call.parked is not None:
                call.parked.cancel()
            with trio.move_on_after(1.0, shield=True):
                frame = wire.error_frame(call.front_id, body["code"], body["message"], body["data"])
                await call.fast.send(frame)
            with trio.move_on_after(1.0, shield=True):
                await call.cancel(error.message)

    # --- ASGI ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        ours = isinstance(path, str) and (path == MCP_PATH or path.startswith(HTTP_TOOLSET_PREFIX))
        if scope.get("type") != "http" or not ours:
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "POST":
            if not await self._own_other(scope, receive, send):
                await self._pass(scope, receive, send)
            return
        body, replay = await read_body(receive, self.max_body)
        if body is None:
            await self._pass(scope, replay, send)
            return
        env = decode_client_frame(body)
        if isinstance(env, Refusal) or request_refusal(env) is not None or env.jsonrpc != "2.0":
            await self._pass(scope, replay, send)  # the SDK's frame checks answer it
            return
        if self.own is not None and await self._own_post(scope, replay, send, env, body):
            return
        if not self.sdk.built and (not self._open_to_all() or body.find(wire.MODERN_MARKER) >= 0):
            # What follows checks a token or a 2026-07-28 envelope with the SDK's own code:
            # loaded off the loop first (`mcpvisor.actors.fronts.http_sdk`).
            await self.sdk.ready()
        method = env.method
        if method == "tools/call":
            if await self._call(scope, receive, send, env, body):
                return
            self.passed_calls += 1
        elif method is UNSET:
            if await self._client_response(scope, send, env):
                return
        elif method == "notifications/cancelled":
            if await self._client_cancel(scope, send, env):
                return
        elif method == "initialize":
            await self.app(scope, replay, self._watch_initialize(send, env))
            return
        await self._pass(scope, replay, send)

    # --- tools/call -------------------------------------------------------------------------
    async def _call(self, scope: Scope, receive: Receive, send: Send, env: wire.Envelope,
                    body: bytes) -> bool:
        if self.front.drain.draining or env.params is UNSET:
            return False
        rid = env.id
        if rid is UNSET or rid is None:
            return False
        raw_headers = scope.get("headers") or ()
        headers = dict(raw_headers)
        if any(k.startswith(_PARAM_PREFIX) for k in headers):
            return False  # Mcp-Param-* headers are checked against the tool's schema by the SDK
        ok, who = await self._admit(scope, headers)
        if not ok:
            return False
        ok, snap = self._view(scope, who)
        if not ok:
            return False
        version_raw = headers.get(VERSION_HEADER)
        version = version_raw.decode("latin-1") if version_raw is not None else None
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        session: HttpSession | None = None
        events: SessionEvents | None = None
        transport: Any = None
        if modern:
            name = classified(body, raw_headers) if body.find(wire.MODERN_MARKER) >= 0 else None
            if name is None or name in self._header_tools(snap):
                return False  # a tool whose arguments map to Mcp-Param headers: the SDK checks them
        else:
            sid_raw = headers.get(SESSION_HEADER)
            if sid_raw is None:
                return False
            sid = sid_raw.decode("latin-1")
            own = self.own.get(sid) if self.own is not None else None
            if own is not None and own.transport is None:
                if who is not own.owner:
                    return False  # handed to the SDK, which refuses it as it would
                own.last_active = trio.current_time()
                transport = own
                store = own.events
            else:
                if self.sdk.manager is None:
                    return False  # no session the SDK holds (it answers this one 404)
                from mcpvisor.actors.sdk_compat import event_store_of, http_session

                found = http_session(self.sdk.manager, sid)
                if found is None or found[0].is_terminated or not self._owner_matches(found[1], who):
                    return False
                transport = found[0]
                store = event_store_of(transport)
            session = self.sessions.get(sid)
            if session is None:
                caps = self._capabilities.get(sid)
                if caps is None:
                    return False  # initialize did not go by here: the SDK knows this client
                session = self.sessions[sid] = HttpSession(sid, caps)
            key = str(rid)
            if rid in session.calls or key in self.guard.in_flight_ids(sid):
                return False  # the SDK path answers the duplicate id
            if store is not None and primed(version):
                events = store
        exchange = HttpExchange(self, send, session, modern, snap, transport, events, str(rid))
        if telemetry.tracer is not None:  # a traceparent header is the parent where _meta names none
            exchange.protocol_version = version
            exchange.trace_headers = {
                key: value.decode("latin-1")
                for key in telemetry.TRACE_KEYS
                if (value := headers.get(key.encode())) is not None
            }
        if modern and b'"requestState"' in body:
            self._adopt_parked(env, exchange)
        if session is not None and len(session.calls) >= self.limit:
            await exchange.refuse(rid, self.limit)
            self.fast_calls += 1
            return True
        try:
            taken = await exchange.client_request(env, body)
        except Exception:
            logger.exception("HTTP fast path: failed to route a call")
            taken = False
        if not taken and not exchange.finished:
            return False  # nothing was sent upstream: the SDK serves it
        self.fast_calls += 1
        call = exchange.calls.get(rid)
        if modern and call is not None:
            self.modern_calls.add(call)
        claimed: set[str] | None = None
        if session is not None:
            claimed = self.guard.in_flight_ids(session.session_id)
            claimed.add(str(rid))
        try:
            await exchange.wait(receive)
        finally:
            if call is not None:
                self.modern_calls.discard(call)
            if claimed is not None:
                claimed.discard(str(rid))
            if session is not None and not session.calls and not session.requests:
                self.sessions.pop(session.session_id, None)
        return True

    def _adopt_parked(self, env: wire.Envelope, exchange: HttpExchange) -> None:
        """A 2026-07-28 client's next leg of a parked call: its answers go out on this request."""
        try:
            params = wire.decode_raw_map(env.params)  # type: ignore[arg-type]
            state = msgspec.json.decode(params["requestState"])
        except (KeyError, wire.DecodeError, wire.ValidationError, msgspec.DecodeError):
            return
        call = self.parked.get(state) if isinstance(state, str) else None
        if call is not None:
            call.fast = exchange

    # --- a handshake-era client's other traffic about calls served here ------------------------
    async def _client_response(self, scope: Scope, send: Send, env: wire.Envelope) -> bool:
        rid = env.id
        if type(rid) is not str or not rid.startswith(SERVER_REQUEST_PREFIX):
            return False
        session = self._session_of(scope)
        if session is None:
            return False
        reply = session.requests.pop(rid, None)
        if reply is None:
            return False
        settle_reply(reply, env)
        await accepted(send)
        return True

    async def _client_cancel(self, scope: Scope, send: Send, env: wire.Envelope) -> bool:
        if env.params is UNSET:
            return False
        session = self._session_of(scope)
        if session is None:
            return False
        try:
            cancel = wire.decode_cancel(env.params)
        except (wire.DecodeError, wire.ValidationError):
            return False
        call = session.calls.get(cancel.requestId) if cancel.requestId is not None else None
        if call is None:
            return False
        await accepted(send)
        if not call.fast.release(call.front_id, call):
            return True
        if call.parked is not None:
            call.parked.cancel()
        from mcpvisor.actors.harness import CancelledByClient

        call.note(CancelledByClient("cancelled by the client"))
        await call.cancel(cancel.reason if isinstance(cancel.reason, str) else "cancelled")
        exchange = call.fast
        if isinstance(exchange, HttpExchange):
            exchange.finish()  # MCP cancellation: the request is not answered; its stream ends
        return True

    def _session_of(self, scope: Scope) -> HttpSession | None:
        """The fast path's tables of the request's session, once its checks pass as the SDK's would."""
        headers = dict(scope.get("headers") or ())
        sid = headers.get(SESSION_HEADER)
        session = self.sessions.get(sid.decode("latin-1")) if sid is not None else None
        if session is None or not self.rules.host_ok((headers.get(b"host") or b"").decode("latin-1")):
            return None
        return session

    def _watch_initialize(self, send: Send, env: wire.Envelope) -> Send:
        """``send`` for an ``initialize`` POST: keep what the client declared under the
        session id the SDK gives it (the client's capabilities decide which requests an
        upstream may send it on this path)."""
        caps: dict[str, Any] = {}
        if env.params is not UNSET:
            try:
                declared = wire.decode_dict(env.params).get("capabilities")
            except (wire.DecodeError, wire.ValidationError):
                declared = None
            caps = declared if isinstance(declared, dict) else {}
        captured = self._capabilities

        async def watching(message: Message) -> None:
            if message.get("type") == "http.response.start" and message.get("status") == HTTPStatus.OK:
                for name, value in message.get("headers") or ():
                    if name.lower() == SESSION_HEADER:
                        sid = value.decode("latin-1")
                        captured[sid] = caps
                        self._forget_closed()
            await send(message)

        return watching

    def _forget_closed(self) -> None:
        """Drop what is kept of sessions closed since (on each new session: bounded), the
        front's own and the SDK's."""
        manager = self.sdk.manager
        own = self.own

        def closed(sid: str) -> bool:
            if own is not None and own.get(sid) is not None:
                return False
            if manager is None:
                return True
            from mcpvisor.actors.sdk_compat import http_session  # the SDK is built

            return http_session(manager, sid) is None

        for sid in [s for s in self._capabilities if closed(s)]:
            self._capabilities.pop(sid, None)
            session = self.sessions.get(sid)
            if session is not None and not session.calls and not session.requests:
                del self.sessions[sid]
