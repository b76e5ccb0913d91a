"""The lean tool-call path: ``tools/call`` as bytes from a stdio client to a stdio upstream.

Owns, for one front connection (`FastPath`):

* the classifier's verdict for ``tools/call`` requests, their cancellations and the
  client's replies to requests the proxy minted (everything else goes to the SDK);
* the gate: a call takes this path only after the connection's handshake is done (the
  client sent ``notifications/initialized`` and the SDK's ``initialize`` reply has
  gone into the writer), or when it carries the 2026-07-28 envelope, so a pipelined call never
  overtakes the ``initialize`` reply (docs/hotpath.md, "Init-gate bug");
* the rewrite: the tool's name replaced in ``params`` (decoded as ``dict[str, Raw]``,
  so arguments and unknown keys such as ``inputResponses`` travel as they came), the
  id and the progress token swapped for the upstream's, the era adapted where the
  client and the upstream speak different ones;
* the connection's side of each call in flight: its `FastCall` (`mcpvisor.actors.fronts.fastcall`:
  the answer, retries, mid-call traffic and the ``input_required`` bridge) by client
  id, the parked calls by ``requestState``, and the requests sent to the client on an
  upstream's behalf (`FastPath.ask_client`, from `mcpvisor.actors.fronts.fastask`).

Which upstream tool a call reaches is the call's plan (`mcpvisor.actors.core.plan`), the one
every caller executes: this path takes a routed tool, a compound tool's subtool call and
the tool ``use_tool`` names (arguments checked) as that tool's direct call. Any other
plan (a management tool, a lazy server to load, start-up to wait for, a refusal), and a
call this path cannot take (server not ready, not a stdio upstream, malformed params),
goes to the SDK front, which executes the same plan; so turning the path off
(``settings.fastPath: false``) changes cost, not behaviour.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Container, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from msgspec import UNSET, Raw

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.bridge import STATE_PREFIX
from mcpvisor.actors.core.catalog import Snapshot, ToolRoute
from mcpvisor.actors.core.lifecycle import WAITABLE, State
from mcpvisor.actors.core.plan import CallRoute, plan_call
from mcpvisor.actors.core.vocabulary import STDIO_TRANSPORTS
from mcpvisor.actors.eras import ENVELOPE_KEYS, fit_capabilities, is_modern_version, verbose_of
from mcpvisor.actors.errors import ProxyError, UpstreamError, error_data
from mcpvisor.actors.fastspans import FastTrace
from mcpvisor.actors.framing import FrameWriter, StreamBroken
from mcpvisor.actors.fronts.fastask import ClientAsks
from mcpvisor.actors.fronts.fastcall import FastCall
from mcpvisor.actors.fronts.fastwait import HandBack, WaitingCalls
from mcpvisor.actors.fronts.frames import MAX_JSON_DEPTH, nesting_exceeds
from mcpvisor.actors.harness import RUN_META_KEY, CancelledByClient, ClientSession
from mcpvisor.actors.link.stdio import StdioLink
from mcpvisor.actors.messages import Reply
from mcpvisor.actors.wire import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.drain import Drain
    from mcpvisor.actors.fronts.sdk import Backend
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

MAX_RAW_NAMES: Final = 4096
_RAW_NAMES: dict[str, Raw] = {}
"""Upstream tool names as the JSON strings a forwarded call carries, encoded once (every front)."""
CLIENT_GONE_CANCEL_S: Final = 1.0
"""Bound on each courtesy cancel sent upstream when a client disconnects mid-call
(docs/style.md rule 16: every shielded wait is bounded)."""

_str = msgspec.json.Decoder(str)
_token = msgspec.json.Decoder(int | str)
_CALL_HEAD: Final = b'{"jsonrpc":"2.0","id":'
_CALL_PARAMS: Final = b',"method":"tools/call","params":'
_CALL_END: Final = b"}\n"
_READY: Final = State.READY


class PlainRoute(msgspec.Struct):
    """Where a connection's plain calls of one tool go, as `FastPath.take` found it for a
    snapshot (`FastPath.take_line` uses it while the snapshot stays the catalog's)."""

    snapshot: Snapshot
    route: ToolRoute
    up: Upstream
    original: Raw
    """The upstream's name of the tool, as the JSON string the call carries upstream."""
    link: StdioLink
    """The link last found to be a handshake-era stdio one (a restart makes a new link)."""


class FastPath(ClientAsks):
    """The byte-level ``tools/call`` path of one stdio front connection."""

    def __init__(self, backend: Backend, writer: FrameWriter, nursery: trio.Nursery,
                 server_info: Mapping[str, Any], session: ClientSession,
                 log_level: Callable[[], str | None] = lambda: None, drain: Drain | None = None,
                 hand_back: HandBack | None = None) -> None:
        self.backend = backend
        self.drain = drain
        """The proxy's drain: while it runs, calls go to the SDK, which refuses them."""
        self.log_level = log_level
        self.writer = writer
        self.try_send: Callable[[bytes], bytes | memoryview | None] = writer.try_write
        """Write a frame now if that needs no wait (`CallHost.try_send`): the writer's own
        method, one call fewer on every answer."""
        self.nursery = nursery
        self.calls: dict[int | str, FastCall] = {}
        self.waiting = WaitingCalls(nursery, self._after_wait, hand_back, self.send)
        """Calls waiting for their starting server (`mcpvisor.actors.fronts.fastwait`)."""
        self.requests: dict[str, Reply[Any]] = {}
        self.parked: dict[str, FastCall] = {}
        """Calls parked between a 2026-07-28 client's legs, by their ``requestState``."""
        self.ready = False
        """The init gate is open: handshake-era calls may take this path."""
        self._initialize_id: int | str | None = None
        self._initialize_answered = False
        self._initialized_read = False
        self.era: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.protocol_version: str | None = None
        """The version the handshake-era client asked for (a span's ``mcp.protocol.version``)."""
        self._ids = itertools.count(1)
        self._catalog: Any = getattr(backend.router, "core", backend.router)
        """What holds the catalog's latest ``snapshot`` (the router's core; read as an
        attribute, not through the router's property, on every plain call)."""
        self._plain: dict[str, PlainRoute] | None = {}
        """`take_line`'s routes by tool name (None: a connection that keeps none)."""
        self.stamp = Raw(wire.encode(dict(server_info)))
        self._envelopes: dict[int, Raw] = {}
        self._fitted: tuple[tuple[int, bool, bytes], Raw] | None = None
        self.view: Snapshot | None = None
        """The snapshot this connection's calls are routed by when it is bound to one (an
        HTTP request for a toolset's URL); None: the proxy's catalog as it is now."""
        self.session = session
        """This connection's session: the key of its instances of session-scoped servers
        (the same object the SDK path uses for the connection, `Front.serve_connection`)
        and the label the journal records."""

    # --- the tables a call asks about (`mcpvisor.actors.fronts.fastcall.CallHost`) -----------
    def holds(self, front_id: int | str, call: FastCall) -> bool:
        return self.calls.get(front_id) is call

    def hold(self, front_id: int | str, call: FastCall) -> None:
        self.calls[front_id] = call

    def release(self, front_id: int | str, call: FastCall) -> bool:
        if self.calls.get(front_id) is call:
            del self.calls[front_id]
            return True
        return False

    def park(self, token: str, call: FastCall) -> None:
        self.parked[token] = call

    def unpark(self, token: str) -> None:
        self.parked.pop(token, None)

    def repark(self, old: str, new: str, call: FastCall) -> None:
        if self.parked.pop(old, None) is call:
            self.parked[new] = call

    # --- what the connection tells us ---------------------------------------------------
    def observe(self, env: wire.Envelope) -> None:
        """See the handshake go by on its way to the SDK (it stays the SDK's to answer)."""
        method = env.method
        if method == "initialize" and env.id is not UNSET:
            self.era = "legacy"
            self._initialize_id = env.id
            if env.params is not UNSET:
                try:
                    params = wire.decode_dict(env.params)
                except (wire.DecodeError, wire.ValidationError):
                    return
                caps = params.get("capabilities")
                self.client_capabilities = caps if isinstance(caps, dict) else {}
                version = params.get("protocolVersion")
                self.protocol_version = version if isinstance(version, str) else None
        elif method == "notifications/initialized":
            self._initialized_read = True
            self.ready = self._initialize_answered

    def sdk_answered(self, response_id: int | str) -> None:
        """The SDK's successful reply to ``response_id`` is now written or queued in the writer.

        Opens the init gate once that reply is the one to ``initialize`` and the client
        has sent ``notifications/initialized``: reading the notification is not enough,
        since the SDK may still be working on ``initialize`` and a quick upstream's
        answer to a pipelined call would then reach the client first.
        """
        if self._initialize_id is not None and response_id == self._initialize_id:
            self._initialize_answered = True
            self.ready = self._initialized_read

    def owns(self, request_id: int | str) -> bool:
        return request_id in self.calls or request_id in self.waiting.scopes

    # --- what a call sees (the HTTP fast path, `mcpvisor.actors.fronts.http_fast`, overrides these)
    def snapshot(self) -> Snapshot:
        """What this connection's calls are routed by: its `view`, else the proxy's catalog."""
        return self.view if self.view is not None else self.backend.router.snapshot

    def session_instance(self, server: str) -> Upstream | None:
        """This connection's own instance of the session-scoped ``server``, started for it if it
        had none (None: the call takes the SDK path, which starts or waits for it)."""
        return self.backend.upstream_for(server, self.session)

    # --- requests -------------------------------------------------------------------------
    async def client_request(self, env: wire.Envelope, line: bytes, *, waited: bool = False) -> bool:
        """Take a ``tools/call`` if it can go the fast way (or wait for its starting server to
        go that way, unless it ``waited`` already); False hands it to the SDK."""
        taken = self.take(env, line, waited=waited)
        if type(taken) is bool:
            return taken
        await taken
        return True

    def take_line(self, line: bytes, now: float, held: Container[int | str]) -> bool | Awaitable[None] | None:
        """The stdio reader's lane for one client frame, with no coroutine made: a
        ``tools/call`` taken (True, or the wait for its write, to be awaited at once) or
        declined (False: the SDK's). None: no such call (something else, a duplicate id, a
        frame too deep or malformed): the reader handles ``line`` from the start. ``held``:
        the ids of the connection's requests the SDK serves.

        The busiest kind of call takes fewer steps than `take`: a handshake-era
        connection's call with no ``_meta`` (no progress token, no trace context) of a tool
        routed to a ready handshake-era stdio server, while nothing traces and nothing
        drains. Its route is the one `take` found for the same snapshot (`PlainRoute`),
        checked against the server's state and link; anything else is `take`'s.
        """
        # `nesting_exceeds`'s first test: deeper frames are the reader's to refuse.
        if line.count(b"{") + line.count(b"[") > MAX_JSON_DEPTH and nesting_exceeds(line):
            return None
        try:
            call = wire.decode_call(line)  # the envelope and the params in one decode
        except (wire.DecodeError, wire.ValidationError, RecursionError):
            return None  # not JSON, or params that are no object: the reader reads it from the start
        rid = call.id
        if (call.method != "tools/call" or rid is UNSET or rid is None or rid in held
                or rid in self.calls or rid in self.waiting.scopes):  # `owns`, spelled out
            return None  # not a call, or a duplicate id: the reader says so
        params = call.params
        routes = self._plain
        plain: PlainRoute | None = None
        if (type(params) is dict and "_meta" not in params and routes is not None and self.ready
                and telemetry.tracer is None and (self.drain is None or not self.drain.draining)):
            try:
                plain = routes.get(_str.decode(params["name"]))
            except (KeyError, wire.DecodeError, wire.ValidationError):
                return False  # the SDK refuses params without a string name
        if plain is not None and plain.snapshot is self._catalog.snapshot:
            up, link = plain.up, plain.link
            if up.state is _READY and up.link is link and link.close_reason is None:
                fast = FastCall(self, rid, plain.route, up, link, None, False, now, params)  # type: ignore[arg-type]
                spec = up.spec
                try:
                    fast.proxy_id = proxy_id = link.reserve_fast(fast, spec.timeout, spec.max_call_time, now)
                except ProxyError:
                    return False  # the SDK's path says why (closing, too many in flight)
                up.calls += 1  # `Upstream.note_call`, spelled out on the busiest path
                params["name"] = plain.original  # type: ignore[index]
                self.calls[rid] = fast
                # The upstream's frame, the rewritten params written into it (no envelope dict).
                unsent = link.writer.try_write(b"".join((_CALL_HEAD, wire.encode(proxy_id), _CALL_PARAMS,
                                                         wire.encode(params), _CALL_END)))
                if unsent is not None:
                    return link.send_fast(unsent)  # type: ignore[arg-type]
                return True
        return self.take(call, line, now)

    def take(self, env: wire.Envelope | wire.CallFrame, line: bytes, now: float | None = None, *,
             waited: bool = False) -> bool | Awaitable[None]:
        """`client_request` up to its one wait: True when the call is sent (or held by the
        reader's batch), False when it is the SDK's, else the wait left, to be awaited at once
        (a write the pipe did not take, a parked call's next leg). The stdio front's reader
        calls this for every call: no coroutine is made for a call that needs no wait.
        ``now``: when the frame was read, if the caller has the clock's reading (the reader
        reads it once for all the frames of one read). ``env``: the frame as an `Envelope`, or
        as a `CallFrame` (its params already decoded, which this call may rewrite)."""
        raw_params = env.params
        if env.method != "tools/call" or raw_params is UNSET:
            return False
        drain = self.drain
        if drain is not None and drain.draining:
            return False  # shutting down: the SDK's middleware refuses it (`mcpvisor.actors.fronts.drain`)
        try:
            params = raw_params if isinstance(raw_params, dict) else wire.decode_raw_map(raw_params)
            name = _str.decode(params["name"])
        except (KeyError, wire.DecodeError, wire.ValidationError):
            return False
        # The 2026-07-28 envelope is in ``_meta``: a call without one is not searched for it.
        has_meta = "_meta" in params
        modern = has_meta and line.find(wire.MODERN_MARKER) >= 0  # `find`: see `wire.MODERN_MARKER`
        if modern:
            if self.era == "legacy":
                return False  # the SDK refuses an enveloped request on a handshake connection
        elif not self.ready:
            return False  # the init gate: the SDK owns everything before notifications/initialized
        if modern and "requestState" in params:
            try:
                state = _str.decode(params["requestState"])
            except (wire.DecodeError, wire.ValidationError):
                return False
            if state.startswith(STATE_PREFIX):
                parked = self.parked.get(state)
                if parked is None:
                    return False  # the SDK path's, or unknown: the SDK answers it
                return parked.resume(env.id, params)  # type: ignore[arg-type]
        snapshot = self.snapshot()
        route = snapshot.tools.get(name)  # the common case, a routed tool: `plan_call`'s first answer
        # A routed tool called the plain way is remembered for `take_line` (a stdio
        # connection's: an HTTP exchange lives for one call).
        plain_route = (route is not None and route.compound is None and not has_meta and self.view is None
                       and self._plain is not None)
        if route is None or route.compound is not None:
            plan = plan_call(snapshot, name, params.get("arguments"))
            if type(plan) is ToolRoute:
                route = plan  # the arguments travel as they came
            elif isinstance(plan, CallRoute):
                # A compound tool's subtool or the tool use_tool names, its arguments checked:
                # the frame goes upstream as that tool's direct call.
                route = plan.route
                params["arguments"] = Raw(wire.encode(plan.arguments))
            else:
                return False  # a management tool, a load or a wait, a refusal: the SDK front's to execute
        up = self.backend.upstreams.get(route.server)
        if up is None:
            return False
        if not modern and getattr(up.spec, "scope", "shared") == "session":
            # This connection's own instance, the one the SDK path would use (supervisor/sessions.py),
            # started by this call if there is none yet (the call then waits for it, below).
            # A 2026-07-28 call keeps the shared instance, as on the SDK path.
            up = self.session_instance(route.server)
            if up is None:
                return False
        link = up.link
        if up.state is not State.READY or link is None or link.close_reason:
            link = up.starting_link  # a (re)start's handshake done, its lists still coming: go now
            if link is None or link.close_reason:
                if (not waited and up.state in WAITABLE
                        and getattr(up.spec, "transport", "stdio") in STDIO_TRANSPORTS):
                    arguments, started = params.get("arguments"), trio.current_time()

                    async def refuse(error: ProxyError) -> None:
                        await self._refuse_waited(env.id, route, arguments, started, error)

                    # Offered again once the server is up, read afresh (the params here may be rewritten).
                    return self.waiting.start(up, wire.decode_envelope(line), line, refuse)
                return False
        if not isinstance(link, StdioLink):
            return False
        client_token = client_level = capabilities = None
        meta: dict[str, Raw] | None = None
        if has_meta:
            try:
                meta = wire.decode_raw_map(params["_meta"])
                token_raw = meta.get("progressToken")
                client_token = _token.decode(token_raw) if token_raw is not None else None
                if modern and not is_modern_version(_str.decode(meta[PROTOCOL_VERSION_META_KEY])):
                    return False  # the SDK answers an unsupported version with -32022
                level_raw = meta.get(LOG_LEVEL_META_KEY) if modern else None
                client_level = _str.decode(level_raw) if level_raw is not None else None
            except (KeyError, wire.DecodeError, wire.ValidationError):
                return False
            if modern:
                capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)  # decoded only when needed
        if now is None:
            now = trio.current_time()
        call = FastCall(self, env.id, route, up, link, client_token, modern, now, params,  # type: ignore[arg-type]
                        log_level=client_level, capabilities=capabilities)
        spec = up.spec
        try:
            proxy_id = link.reserve_fast(call, spec.timeout, spec.max_call_time, now)
        except ProxyError:
            return False
        call.proxy_id = proxy_id
        up.calls += 1  # `Upstream.note_call`, spelled out on the busiest path
        if modern:
            self.era = "modern"
        original = _RAW_NAMES.get(route.original)
        if original is None:
            if len(_RAW_NAMES) >= MAX_RAW_NAMES:
                _RAW_NAMES.clear()  # catalogs changed many times over: start again
            original = _RAW_NAMES[route.original] = Raw(wire.encode(route.original))
        params["name"] = original
        if plain_route:
            self._keep_plain(name, snapshot, route, up, link, original)
        if meta is not None or link.modern or telemetry.tracer is not None:
            # A plain call (no ``_meta``, a handshake-era upstream, no tracing) has none to write.
            self._rewrite_meta(call, params, {} if meta is None else meta, name, link)
        self.calls[env.id] = call  # type: ignore[index]
        # The upstream's frame, the rewritten params written into it (no envelope dict to encode).
        frame = b"".join((_CALL_HEAD, wire.encode(proxy_id), _CALL_PARAMS, wire.encode(params), _CALL_END))
        unsent = link.writer.try_write(frame)
        if unsent is not None:
            return link.send_fast(unsent)  # type: ignore[arg-type]
        return True

    def _keep_plain(self, name: str, snapshot: Snapshot, route: ToolRoute, up: Upstream, link: StdioLink,
                    original: Raw) -> None:
        """Remember where ``name``'s plain calls go while ``snapshot`` is the catalog's (its
        server is shared and its link speaks the handshake era; else nothing is kept)."""
        routes = self._plain
        if (routes is None or snapshot is not self._catalog.snapshot or link.modern
                or getattr(up.spec, "scope", "shared") != "shared"):
            return
        plain = routes.get(name)
        if plain is None or plain.snapshot is not snapshot or plain.up is not up:
            if len(routes) >= MAX_RAW_NAMES:
                routes.clear()  # a catalog of thousands of tools, changed: start again
            plain = routes[name] = PlainRoute(snapshot, route, up, original, link)
        plain.link = link

    def _rewrite_meta(self, call: FastCall, params: dict[str, Raw], meta: dict[str, Raw], name: str,
                      link: StdioLink) -> None:
        """The upstream request's ``_meta``: the client's, its 2026-07-28 envelope replaced by
        the one ``link``'s era needs, the trace context and the progress token the proxy's."""
        modern = call.modern
        if modern or link.modern:
            for key in ENVELOPE_KEYS:
                meta.pop(key, None)
            if link.modern:
                meta.update(self._envelope_of(link))
                caps = self._fitted_capabilities(link, modern, call.capabilities)
                meta[CLIENT_CAPABILITIES_META_KEY] = caps
                level = verbose_of(self.log_level(), call.log_level)
                if level:
                    meta[LOG_LEVEL_META_KEY] = Raw(wire.encode(level))
        if telemetry.tracer is not None:  # the call's spans; the upstream is told the CLIENT one
            self._trace(call, meta, name, call.front_id, modern)
        if call.client_token is not None:
            meta["progressToken"] = Raw(wire.encode(call.proxy_id))
        if meta:
            params["_meta"] = Raw(wire.encode(meta))
            call.run = meta.get(RUN_META_KEY)
        elif "_meta" in params:
            del params["_meta"]

    def _trace(self, call: FastCall, meta: dict[str, Raw], name: str, request_id: Any, modern: bool) -> None:
        """Open ``call``'s SERVER and CLIENT spans (tracing is on) and put the CLIENT span's
        context in the upstream request's ``_meta`` in place of the client's own."""
        carrier: dict[str, str] = {}
        for key in telemetry.TRACE_KEYS:
            raw = meta.pop(key, None)
            if raw is not None:
                try:
                    carrier[key] = _str.decode(raw)
                except (wire.DecodeError, wire.ValidationError):
                    pass
        version = self.protocol_version
        if modern and PROTOCOL_VERSION_META_KEY in meta:
            version = _str.decode(meta[PROTOCOL_VERSION_META_KEY])
        equipped = getattr(getattr(self.backend.router.core, "exposure", None), "equipped", None)
        headers, transport, session_id = self.trace_origin()
        trace = FastTrace("tools/call", name, call.route.original, call.route.server, meta=carrier,
                          request_id=request_id, protocol_version=version,
                          toolset=getattr(equipped, "name", None), headers=headers,
                          transport=transport, session_id=session_id)
        call.trace = trace
        meta.update(trace.carrier_raw())

    def trace_origin(self) -> tuple[Mapping[str, str] | None, str, str | None]:
        """Where this connection's calls come from, for their spans: the request's trace
        headers (none on a pipe), the transport, the session id."""
        return None, "stdio", None

    def _envelope_of(self, link: StdioLink) -> dict[str, Raw]:
        key = id(link)
        raw = self._envelopes.get(key)
        if raw is None:
            raw = Raw(wire.encode(link.envelope_meta))
            self._envelopes = {key: raw}  # one upstream era per link; keep only the latest
        return wire.decode_raw_map(raw)

    def _fitted_capabilities(self, link: StdioLink, modern: bool, declared: Raw | None) -> Raw:
        """The ``clientCapabilities`` a 2026-07-28 upstream is told for this client's call
        (`mcpvisor.actors.eras.fit_capabilities`): a client sends the same ones on every
        request, so the latest answer is kept and reused while they stay the same."""
        key = (id(link), modern, bytes(declared) if declared is not None else b"")
        cached = self._fitted
        if cached is not None and cached[0] == key:
            return cached[1]
        if modern:
            try:
                caps: object = msgspec.json.decode(key[2]) if declared is not None else {}
            except msgspec.DecodeError:
                caps = {}
        else:
            caps = self.client_capabilities
        proxy = link.envelope_meta.get(CLIENT_CAPABILITIES_META_KEY) or {}
        fitted = Raw(wire.encode(fit_capabilities(proxy, caps)))
        self._fitted = (key, fitted)
        return fitted

    async def client_cancel(self, env: wire.Envelope) -> bool:
        """A client's ``notifications/cancelled`` for a fast-path call: forward it upstream."""
        if env.params is UNSET:
            return False
        try:
            cancel = wire.decode_cancel(env.params)
        except (wire.DecodeError, wire.ValidationError):
            return False
        if self.waiting.cancel(cancel.requestId):
            return True  # it never reached its server
        call = self.calls.pop(cancel.requestId, None) if cancel.requestId is not None else None
        if call is None:
            return False
        if call.parked is not None:
            call.parked.cancel()  # the upstream's open questions are answered at once
        call.note(CancelledByClient("cancelled by the client"))
        # MCP cancellation: the receiver does not answer a cancelled request.
        await call.cancel(cancel.reason if isinstance(cancel.reason, str) else "cancelled")
        return True

    async def send(self, frame: bytes) -> None:
        try:
            await self.writer.send(frame)
        except StreamBroken:
            pass


    def in_flight(self) -> int:
        """Calls waiting for their upstream's answer or for it to start (parked ones wait for
        the client)."""
        return len(self.calls) + len(self.waiting)

    async def _after_wait(self, env: wire.Envelope, line: bytes) -> bool:
        return await self.client_request(env, line, waited=True)

    async def _refuse_waited(self, front_id: Any, route: ToolRoute, arguments: Any, started: float,
                             error: ProxyError) -> None:
        """A call that waited for its server in vain: the JSON-RPC error the SDK's path gives
        (`UpstreamUnavailable`: the server, why, the next try), journaled as that path does."""
        self.backend.note_call(route.server, route.original, started, error, session=self.session.label,
                               arguments=arguments)
        body = error_data(error)
        await self.send(wire.error_frame(front_id, body["code"], body["message"], body.get("data")))

    async def shut_down(self, error: ProxyError) -> None:
        """The proxy is stopping: answer every call in flight with ``error`` and cancel
        it upstream (each step bounded, as when the client goes away)."""
        body = error_data(error)
        for front_id in self.waiting.drop_all():
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await self.send(wire.error_frame(front_id, body["code"], body["message"], body["data"]))
        calls = list(self.calls.values())
        self.calls.clear()
        for call in calls:
            call.note(error)
            if call.parked is not None:
                call.parked.cancel()
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await self.send(wire.error_frame(call.front_id, body["code"], body["message"], body["data"]))
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await call.cancel(error.message)

    async def close(self) -> None:
        """The client went away: cancel what it left in flight."""
        self.waiting.drop_all()
        for call in list(self.calls.values()):
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await call.cancel("client disconnected")
        self.calls.clear()
        for call in list(self.parked.values()):
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await call.link.cancel_fast(call.proxy_id, "client disconnected")
        self.parked.clear()
        for reply in self.requests.values():
            reply.fail(UpstreamError(wire.CONNECTION_CLOSED, "the client disconnected"))
