"""The HTTP front's own path for ``tools/call``: the stdio fast path's routing, over HTTP.

Every request to the streamable HTTP front used to go through Starlette and the SDK's
session manager (a transport, memory streams, pydantic and the SDK server's dispatcher
per request: about 2 ms of CPU). `HttpFast` is an ASGI layer in front of that app. A
POST to ``/mcp`` (or a toolset's view, ``/mcp/toolset/NAME``) whose body is a
``tools/call`` request is served here:

* checked once: Host and Origin (the front's rules), ``Content-Type`` and ``Accept``, the
  bearer token (the front's verifier and required scopes), the view the URL or token
  chooses, and the ``Mcp-Session-Id`` against the SDK's own session store (the session
  exists and was opened with the same credential) or, for a 2026-07-28 request, the
  envelope and routing headers as the SDK classifies them (no session at all);
* routed as the stdio fast path routes (`mcpvisor.actors.fronts.fastpath.FastPath`, one
  `_Exchange` per request sharing its session's tables): the snapshot's plan, the id and
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

import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from msgspec import UNSET, Raw

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.bridge import CAPABILITY_OF
from mcpvisor.actors.errors import ProxyError, UpstreamError, error_data
from mcpvisor.actors.fronts.asgi import Message, Receive, Scope, Send, read_body
from mcpvisor.actors.fronts.fastpath import SERVER_REQUEST_PREFIX, FastPath, settle_reply
from mcpvisor.actors.fronts.frames import Refusal, decode_client_frame, request_refusal
from mcpvisor.actors.fronts.limits import MAX_IN_FLIGHT
from mcpvisor.actors.fronts.outbox import CLIENT_OUTBOX, CLIENT_STALL_S
from mcpvisor.actors.fronts.views import HTTP_TOOLSET_PREFIX, ViewRefused
from mcpvisor.actors.harness import ClientSession
from mcpvisor.actors.messages import Reply

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.auth import HostRules, Verifier
    from mcpvisor.actors.fronts.fastcall import FastCall
    from mcpvisor.actors.fronts.http import FrameGuard
    from mcpvisor.actors.fronts.replay import SessionEvents
    from mcpvisor.actors.fronts.sdk import Front
    from mcpvisor.actors.fronts.views import ToolsetViews
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

__all__ = ["PATH_HEADER", "HttpFast", "HttpFastStatistics"]

App = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH_HEADER: Final = b"mcpvisor-path"
"""Response header of a call this layer served (value ``fast``): which path answered."""
_MCP_PATH: Final = "/mcp"
_SESSION: Final = b"mcp-session-id"
_VERSION: Final = b"mcp-protocol-version"
_PARAM_PREFIX: Final = b"mcp-param-"
_RESPONSE_PREFIX: Final = b'{"jsonrpc":"2.0","id":'
"""How every final frame a call sends begins (a result or an error; notifications name a method)."""
_ERROR_AT: Final = b',"error":{'
HEADERS_GRACE_S: Final = 0.005
"""How long a handshake-era call's SSE headers wait for its answer, so that a quick answer
leaves with them in one write (a slow call's headers go out then, as the SDK's would)."""
_PRIMING_SINCE: Final = "2025-11-25"
"""The first revision whose clients read a priming event (older ones would choke on it)."""
_DEFAULT_VERSION: Final = "2025-03-26"
"""The version a handshake-era request without the header is taken to speak (the spec's default)."""
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
                       (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no"), (PATH_HEADER, b"fast")]
_JSON_HEADERS: Final = [(b"content-type", b"application/json"), (PATH_HEADER, b"fast")]
_ACCEPTED: Final = 202
_OK: Final = 200
_error_code = msgspec.json.Decoder(wire.Envelope)


@dataclass(frozen=True, slots=True)
class HttpFastStatistics:
    """What the HTTP fast path has served so far (for tests and bench/)."""

    fast_calls: int
    """``tools/call`` requests answered here."""
    passed_calls: int
    """``tools/call`` requests handed to the SDK (a check failed, or the plan needs the SDK)."""
    in_flight: int


class _NoSession(ClientSession):
    """A 2026-07-28 call's session: none (the journal records no session for it, as on the
    SDK path; a session-scoped server's shared instance serves it)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self.label = None  # type: ignore[assignment]


class _Session:
    """The fast path's side of one handshake-era HTTP session: its calls in flight by the
    client's id, the requests sent to it on an upstream's behalf, what it declared."""

    __slots__ = ("calls", "capabilities", "client", "ids", "requests", "session_id")

    def __init__(self, session_id: str, capabilities: dict[str, Any]) -> None:
        self.session_id = session_id
        self.calls: dict[int | str, FastCall] = {}
        self.requests: dict[str, Reply[Any]] = {}
        self.capabilities = capabilities
        self.client = ClientSession(session_id)
        """The journal's label for this session's calls (the SDK path labels them the same)."""
        self.ids = 0


class HttpFast:
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

    def __init__(self, app: App, front: Front, *, manager: Any, rules: HostRules, verifier: Verifier | None,
                 required_scopes: tuple[str, ...], views: ToolsetViews | None, guard: FrameGuard,
                 nursery: trio.Nursery, max_body: int, anonymous: str, limit: int = MAX_IN_FLIGHT) -> None:
        self.app = app
        self.front = front
        self.backend = front.backend
        self.manager = manager
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
        self.stamp = Raw(wire.encode(dict(front.server.server_info_stamp)))
        self.sessions: dict[str, _Session] = {}
        self.parked: dict[str, FastCall] = {}
        """2026-07-28 calls between their legs, by ``requestState`` (no session holds them)."""
        self.modern_calls: set[FastCall] = set()
        self._capabilities: dict[str, dict[str, Any]] = {}
        """What each session's client declared in ``initialize``, by session id."""
        self.fast_calls = 0
        self.passed_calls = 0
        self.modern_session = _NoSession()
        self._header_cache: tuple[Snapshot, frozenset[str]] | None = None
        self._anonymous_token: Any = None
        self._matched: tuple[Any, Any] | None = None

    def statistics(self) -> HttpFastStatistics:
        return HttpFastStatistics(self.fast_calls, self.passed_calls, self.in_flight())

    # --- the drain's view (`mcpvisor.actors.fronts.drain.FastCalls`) --------------------------
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
        ours = isinstance(path, str) and (path == _MCP_PATH or path.startswith(HTTP_TOOLSET_PREFIX))
        if scope.get("type") != "http" or scope.get("method") != "POST" or not ours:
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive, self.max_body)
        if body is None:
            await self.app(scope, replay, send)
            return
        env = decode_client_frame(body)
        if isinstance(env, Refusal) or request_refusal(env) is not None or env.jsonrpc != "2.0":
            await self.app(scope, replay, send)  # the SDK's frame checks answer it
            return
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
        await self.app(scope, replay, send)

    # --- checks ---------------------------------------------------------------------------
    async def _admit(self, scope: Scope, headers: Mapping[bytes, bytes]) -> tuple[bool, Any]:
        """Host, Origin, Content-Type, Accept and token as the SDK's app checks them: (passed, who)."""
        host = headers.get(b"host")
        origin = headers.get(b"origin")
        if not self.rules.host_ok(host.decode("latin-1") if host is not None else None):
            return False, None
        if origin is not None and not self.rules.origin_ok(origin.decode("latin-1")):
            return False, None
        ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip()
        if ctype != b"application/json":
            return False, None
        if not _accepts_both(headers.get(b"accept", b"")):
            return False, None
        verifier = self.verifier
        if verifier is None:
            return True, None
        from mcp.server.auth.provider import AccessToken

        from mcpvisor.actors.fronts.auth import bearer_token

        if not verifier.guarding():
            if self._anonymous_token is None:
                self._anonymous_token = AccessToken(token="", client_id=self.anonymous, scopes=[])
            return True, self._anonymous_token
        auth = headers.get(b"authorization")
        token = bearer_token(auth.decode("latin-1") if auth is not None else None)
        who = await verifier.verify_token(token) if token is not None else None
        if who is None or (who.expires_at is not None and who.expires_at < time.time()):
            return False, None
        if any(s not in who.scopes for s in self.required_scopes):
            return False, None
        return True, who

    def _header_tools(self, snap: Snapshot | None) -> frozenset[str]:
        """The tools of ``snap`` (None: the proxy's) whose input schema maps an argument to an
        ``Mcp-Param-*`` header (``x-mcp-header``): the SDK checks those headers against the
        arguments. Kept for the latest snapshot only."""
        snapshot = snap if snap is not None else self.backend.router.snapshot
        cached = self._header_cache
        if cached is not None and cached[0] is snapshot:
            return cached[1]
        from mcp.shared.inbound import X_MCP_HEADER_KEY

        marker = X_MCP_HEADER_KEY.encode()

        def maps_headers(tool: Mapping[str, Any]) -> bool:
            try:
                return marker in msgspec.json.encode(tool.get("inputSchema"))
            except (TypeError, msgspec.EncodeError):
                return True  # unreadable here: the SDK decides

        names = frozenset(str(t.get("name")) for t in snapshot.tools_list if maps_headers(t))
        self._header_cache = (snapshot, names)
        return names

    def _view(self, scope: Scope, who: Any) -> tuple[bool, Snapshot | None]:
        """The view the request gets (its snapshot; None: the proxy's), or False to pass it on."""
        path: str = scope["path"]
        url_toolset = path[len(HTTP_TOOLSET_PREFIX):].rstrip("/") if path != _MCP_PATH else None
        views = self.views
        if views is None:
            return url_toolset is None, None
        try:
            name = views.choose(url_toolset, who)
        except ViewRefused:
            return False, None
        if name is None:
            return True, None
        snap = views.snapshot(name)
        return snap is not None, snap

    def _owner_matches(self, owner: Any, who: Any) -> bool:
        """Whether ``who`` is the principal that opened the session (the SDK's own test). The
        last credential that matched an owner is remembered: an open front's anonymous
        client and a static token are the same object request after request."""
        if who is None:
            return owner is None
        last = self._matched
        if last is not None and last[0] is owner and last[1] is who:
            return True
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context

        if owner == authorization_context(AuthenticatedUser(who)):
            self._matched = (owner, who)
            return True
        return False

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
        version_raw = headers.get(_VERSION)
        version = version_raw.decode("latin-1") if version_raw is not None else None
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        session: _Session | None = None
        events: SessionEvents | None = None
        transport: Any = None
        if modern:
            name = _classified(body, raw_headers) if wire.MODERN_MARKER in body else None
            if name is None or name in self._header_tools(snap):
                return False  # a tool whose arguments map to Mcp-Param headers: the SDK checks them
        else:
            sid_raw = headers.get(_SESSION)
            if sid_raw is None:
                return False
            from mcpvisor.actors.sdk_compat import event_store_of, http_session

            sid = sid_raw.decode("latin-1")
            found = http_session(self.manager, sid)
            if found is None or found[0].is_terminated or not self._owner_matches(found[1], who):
                return False
            transport = found[0]
            session = self.sessions.get(sid)
            if session is None:
                caps = self._capabilities.get(sid)
                if caps is None:
                    return False  # initialize did not go by here: the SDK knows this client
                session = self.sessions[sid] = _Session(sid, caps)
            key = str(rid)
            if rid in session.calls or key in self.guard.in_flight_ids(sid):
                return False  # the SDK path answers the duplicate id
            store = event_store_of(transport)
            if store is not None and _at_least(version or _DEFAULT_VERSION, _PRIMING_SINCE):
                events = store
        exchange = _Exchange(self, send, session, modern, snap, transport, events, str(rid))
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

    def _adopt_parked(self, env: wire.Envelope, exchange: _Exchange) -> None:
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
        await _accepted(send)
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
        await _accepted(send)
        if not call.fast.release(call.front_id, call):
            return True
        if call.parked is not None:
            call.parked.cancel()
        from mcpvisor.actors.harness import CancelledByClient

        call.note(CancelledByClient("cancelled by the client"))
        await call.cancel(cancel.reason if isinstance(cancel.reason, str) else "cancelled")
        exchange = call.fast
        if isinstance(exchange, _Exchange):
            exchange.finish()  # MCP cancellation: the request is not answered; its stream ends
        return True

    def _session_of(self, scope: Scope) -> _Session | None:
        """The fast path's tables of the request's session, once its checks pass as the SDK's would."""
        headers = dict(scope.get("headers") or ())
        sid = headers.get(_SESSION)
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
            if message.get("type") == "http.response.start" and message.get("status") == _OK:
                for name, value in message.get("headers") or ():
                    if name.lower() == _SESSION:
                        sid = value.decode("latin-1")
                        captured[sid] = caps
                        self._forget_closed()
            await send(message)

        return watching

    def _forget_closed(self) -> None:
        """Drop what is kept of sessions the SDK has closed (on each new session: bounded)."""
        from mcpvisor.actors.sdk_compat import http_session

        for sid in [s for s in self._capabilities if http_session(self.manager, s) is None]:
            self._capabilities.pop(sid, None)
            session = self.sessions.get(sid)
            if session is not None and not session.calls and not session.requests:
                del self.sessions[sid]


class _Exchange(FastPath):
    """One POSTed ``tools/call`` as the stdio fast path's connection: its routing and its
    calls' host (`mcpvisor.actors.fronts.fastcall.CallHost`), writing to this request's response.

    It shares the session's tables (calls in flight, requests to the client) so a client's
    cancel, answers and duplicate ids are seen across its requests; the stdio connection's
    constructor is not run (the tables come from the session, the rest from the front).
    """

    def __init__(self, fast: HttpFast, send: Send, session: _Session | None, modern: bool,
                 snapshot: Snapshot | None, transport: Any, events: SessionEvents | None,
                 stream_id: str) -> None:
        front = fast.front
        self.http = fast
        self.backend = fast.backend
        self.drain = None
        self.log_level = lambda: front.log_level
        self.nursery = fast.nursery
        self.ready = True
        self.era = None if modern else "legacy"
        self.stamp = fast.stamp
        self._envelopes = {}
        self._fitted = None
        self._ids = itertools.count(1)
        self.parked = fast.parked
        self.sess = session
        if session is not None:
            self.calls = session.calls
            self.requests = session.requests
            self.client_capabilities = session.capabilities
            self.session = session.client
        else:
            self.calls = {}
            self.requests = {}
            self.client_capabilities = {}
            self.session = fast.modern_session
        self._snapshot = snapshot
        self._send = send
        self._transport = transport
        self._events = events
        self._stream_id = stream_id
        self._modern = modern
        self.started = False
        self.closed = False
        self.finished = False
        """The call's answer is queued (or the call ended unanswered): nothing more is sent."""
        self.detached = False
        """The client's stream broke and can be resumed: frames go to the event store."""
        self._queue: deque[tuple[bytes, bool]] = deque()
        self._wake = trio.Event()
        self._written = 0
        self._watching = False
        self.dropped = 0
        self.trace_headers: dict[str, str] | None = None
        self.protocol_version: str | None = None
        """The request's ``MCP-Protocol-Version`` (its spans say it; set while tracing)."""

    # --- routing: what differs from a stdio connection ----------------------------------------
    def trace_origin(self) -> tuple[Mapping[str, str] | None, str, str | None]:
        return self.trace_headers, "http", self.sess.session_id if self.sess is not None else None

    def snapshot(self) -> Snapshot:
        return self._snapshot if self._snapshot is not None else self.backend.router.snapshot

    def session_instance(self, server: str) -> Upstream | None:
        return None  # a session-scoped server: the SDK path's (its session owns the instance)

    def client_capable(self, method: str) -> bool:
        needed = CAPABILITY_OF.get(method)
        return needed is None or needed in self.client_capabilities

    async def ask_client(self, method: str, params: dict[str, Any] | None,
                         max_time: Callable[[], float]) -> dict[str, Any]:
        """Send the handshake-era client ``method`` on this call's stream; its answer comes
        as a POST (`HttpFast._client_response`)."""
        session = self.sess
        if session is None:
            raise UpstreamError(wire.INTERNAL_ERROR, f"no session to send {method} to")
        session.ids += 1
        rid = f"{SERVER_REQUEST_PREFIX}h{session.ids}"
        reply: Reply[dict[str, Any]] = Reply()
        session.requests[rid] = reply
        try:
            self._emit(wire.request_frame(rid, method, params), final=False)
            with trio.fail_after(max_time()):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT, f"the client did not answer {method}") from None
        finally:
            session.requests.pop(rid, None)

    # --- the response ------------------------------------------------------------------------
    # The upstream's reader task hands frames over with `send` (never waits, so a client that
    # stops reading cannot stall an upstream); this request's own task writes them (`wait`).
    async def send(self, frame: bytes) -> None:
        self._emit(frame, final=frame.startswith(_RESPONSE_PREFIX))

    def _emit(self, frame: bytes, *, final: bool) -> None:
        if self.finished:
            return
        data = frame[:-1] if frame.endswith(b"\n") else frame
        if final:
            self.finished = True  # nothing after the answer
        elif len(self._queue) >= CLIENT_OUTBOX:
            self.dropped += 1  # progress and log messages are advisory
            if not self._watching:
                self._watching = True
                self.nursery.start_soon(self._watchdog)
            return
        if self.detached:
            self._after_break(data, final)
            return
        self._queue.append((data, final))
        self._wake.set()

    def finish(self) -> None:
        """The call ends unanswered (the client cancelled it): end the stream."""
        self.finished = True
        self._wake.set()

    async def refuse(self, rid: int | str, limit: int) -> None:
        """Over the session's in-flight cap: the SDK's error, at once."""
        frame = wire.error_frame(rid, wire.TOO_MANY_IN_FLIGHT,
                                 f"too many requests in flight on this session (limit {limit}); "
                                 "wait for some to finish",
                                 {"error": "too_many_requests_in_flight", "limit": limit})
        self._emit(frame, final=True)
        await self._deliver_all()

    async def wait(self, receive: Receive) -> None:
        """Write the call's frames until its answer; a client that disconnects first has the
        call cancelled upstream (unless its stream can be resumed: the call then runs on for
        the resume), one that takes no frame for `CLIENT_STALL_S` is disconnected."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, receive, nursery.cancel_scope)
            answered = False
            if not self._modern:
                # A quick answer goes out with the headers' priming event in one write.
                if not self._queue and not self.finished:
                    with trio.move_on_after(HEADERS_GRACE_S):
                        await self._wake.wait()
                try:
                    answered = await self._open_sse(self._queue.popleft() if self._queue else None)
                except Exception:  # the connection closed under the write: as a disconnect
                    logger.debug("HTTP fast path: the client left before its stream opened", exc_info=True)
                    await self._gone()
                    answered = True
            if not answered:
                await self._deliver_all()
            nursery.cancel_scope.cancel()

    async def _deliver_all(self) -> None:
        while not self.detached:
            if not self._queue:
                if self.finished:
                    break
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            data, final = self._queue.popleft()
            try:
                await self._deliver(data, final)
            except Exception:  # the connection closed under the write: as a disconnect
                logger.debug("HTTP fast path: the client left mid-stream", exc_info=True)
                if final:
                    self._queue.appendleft((data, final))
                await self._gone()
                return
            self._written += 1
            if final:
                return
        if self.started and not self.closed and not self.detached:
            await self._write(b"", more=False)  # cancelled by the client: no answer, the stream ends

    async def _deliver(self, data: bytes, final: bool) -> None:
        if not self.started:
            if not self._modern:
                await self._open_sse()
            elif final:
                await self._json(data)
                return
            else:
                self.started = True
                await self._send({"type": "http.response.start", "status": _OK, "headers": _SSE_HEADERS})
        await self._write(self._event(data), more=not final)

    async def _open_sse(self, first: tuple[bytes, bool] | None = None) -> bool:
        """Start a handshake-era call's SSE response, with its priming event when resumable
        and ``first`` (a queued frame) in the same write. True: that frame was the answer."""
        if self.started:
            return False
        self.started = True
        headers = list(_SSE_HEADERS)
        if self.sess is not None:
            headers.append((_SESSION, self.sess.session_id.encode("latin-1")))
        await self._send({"type": "http.response.start", "status": _OK, "headers": headers})
        body = b""
        if self._events is not None:
            from mcpvisor.actors.fronts.replay import RETRY_MS

            number = self._events.store_raw(self._stream_id, None)
            body = b"id: %s\r\ndata: \r\nretry: %d\r\n\r\n" % (number.encode(), RETRY_MS)
        final = False
        if first is not None:
            body += self._event(first[0])
            final = first[1]
        if body:
            await self._write(body, more=not final)
        if first is not None:
            self._written += 1
        return final

    def _event(self, data: bytes) -> bytes:
        """``data`` as one SSE event, numbered and kept when the stream can be resumed."""
        if self._events is not None:
            number = self._events.store_raw(self._stream_id, data)
            return b"id: %s\r\nevent: message\r\ndata: %s\r\n\r\n" % (number.encode(), data)
        return b"event: message\r\ndata: %s\r\n\r\n" % data

    async def _json(self, data: bytes) -> None:
        status = _OK
        if data.find(_ERROR_AT, 0, 256) >= 0:
            from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS

            try:
                error = wire.decode_error(_error_code.decode(data).error)  # type: ignore[arg-type]
                status = ERROR_CODE_HTTP_STATUS.get(error.code, _OK)
            except (wire.DecodeError, wire.ValidationError, msgspec.DecodeError, TypeError):
                status = _OK
        self.started = True
        self.closed = True
        headers = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": data})

    async def _write(self, body: bytes, *, more: bool) -> None:
        self.closed = not more
        await self._send({"type": "http.response.body", "body": body, "more_body": more})

    async def _watchdog(self) -> None:
        """The queue is full: the client is reading slowly or not at all. The server's
        socket writes cannot be interrupted, so the stall is seen here: no frame written
        for `CLIENT_STALL_S` while frames wait."""
        while not self.finished or self._queue:
            seen = self._written
            await trio.sleep(CLIENT_STALL_S)
            if self._written == seen and self._queue and not self.detached:
                await self._stalled()
                return
            if len(self._queue) < CLIENT_OUTBOX:
                break
        self._watching = False

    async def _stalled(self) -> None:
        """The client took nothing for `CLIENT_STALL_S`: cancel its calls, end its session."""
        session = self.sess
        calls = [c for c in (session.calls if session is not None else self.calls).values()]
        label = session.session_id if session is not None else "a 2026-07-28 client"
        logger.warning("client %s took no message for %.0f s: disconnecting it and cancelling its %d call(s)",
                       label, CLIENT_STALL_S, len(calls))
        self.finished = True
        self._queue.clear()
        for call in calls:
            if call.fast.release(call.front_id, call):
                # In the front's nursery: the link sends the cancel when its writer can,
                # however long the upstream's stdin stays full.
                self.nursery.start_soon(call.cancel, "the client stopped reading")
        if self._transport is not None:
            with trio.move_on_after(CLIENT_STALL_S):
                await self._transport.terminate()

    def _after_break(self, data: bytes, final: bool) -> None:
        """The client's stream broke: keep the event for its ``Last-Event-ID`` and hand it to
        the stream it resumed on, if it has come back."""
        assert self._events is not None
        from mcp.server.streamable_http import EventMessage
        from mcp_types import jsonrpc_message_adapter

        from mcpvisor.actors.sdk_compat import resumed_stream

        number = self._events.store_raw(self._stream_id, data)
        stream = resumed_stream(self._transport, self._stream_id)
        if stream is None:
            return
        message = jsonrpc_message_adapter.validate_json(data, by_name=False)
        try:
            stream.send_nowait(EventMessage(message, number))
            if final:
                stream.close()
        except Exception:  # full or closed: the client has what the event store keeps
            logger.debug("HTTP fast path: the resumed stream took no more", exc_info=True)

    async def _watch(self, receive: Receive, scope: trio.CancelScope) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        if self.finished and not self._queue:
            return
        await self._gone()
        scope.cancel()

    async def _gone(self) -> None:
        """The client disconnected before the answer was written."""
        if self._events is not None and not self._modern:
            self.detached = True  # resumable: the rest is kept for the client's Last-Event-ID
            while self._queue:
                self._after_break(*self._queue.popleft())
            return
        self._queue.clear()
        for front_id, call in list(self.calls.items()):
            if call.fast is self and self.release(front_id, call):
                self.nursery.start_soon(call.cancel, "client disconnected")  # outlives this request
        self.finished = True


async def _accepted(send: Send) -> None:
    await send({"type": "http.response.start", "status": _ACCEPTED,
                "headers": [(b"content-length", b"0"), (PATH_HEADER, b"fast")]})
    await send({"type": "http.response.body", "body": b""})


def _accepts_both(accept: bytes) -> bool:
    """The ``Accept`` header admits both JSON and an event stream (as the SDK requires)."""
    json = sse = False
    for part in accept.split(b","):
        media = part.split(b";", 1)[0].strip().lower()
        if media in (b"*/*", b"application/json", b"application/*"):
            json = True
        if media in (b"*/*", b"text/event-stream", b"text/*"):
            sse = True
    return json and sse


def _at_least(version: str, since: str) -> bool:
    return version >= since  # ISO dates compare as strings


def _classified(body: bytes, headers: Any) -> str | None:
    """The tool a 2026-07-28 request names, if the SDK would serve it: routing headers not
    repeated, its envelope and headers consistent (the SDK answers the others with its own
    errors); None otherwise."""
    from mcp.shared.inbound import (
        InboundLadderRejection,
        classify_inbound_request,
        find_duplicated_routing_header,
    )

    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
    if find_duplicated_routing_header(pairs) is not None:
        return None
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if isinstance(classify_inbound_request(decoded, headers=dict(pairs)), InboundLadderRejection):
        return None
    params = decoded.get("params") if isinstance(decoded, dict) else None
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None

