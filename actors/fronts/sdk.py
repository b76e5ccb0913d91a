"""The client-facing MCP server: one SDK `Server` shared by every front connection.

Owns:

* `Front`: the request handlers (resources, prompts, completion, logging; tools/call
  is `mcpvisor.actors.fronts.tools`): each reads the router's current snapshot and forwards to
  the owning upstream actor;
* the broadcaster's entry points: list_changed, resources/updated and upstream log
  messages to every client, in both eras (handshake era: each connection's queue in
  `mcpvisor.actors.fronts.clients`; 2026-07-28: the `subscriptions/listen` bus), never blocking the router;
* the bridged calls of 2026-07-28 clients to handshake-era upstreams: each runs beside
  the client's legs, parked under its ``requestState`` (`mcpvisor.actors.bridge`,
  `mcpvisor.actors.fronts.origins`);
* the client session of each request (`session_of`): one per handshake-era connection;
  a transport serving its connection itself (`serve_connection`, the stdio front) hands
  its own session over, so its fast path and the SDK reach the same session-scoped
  instances;
* `Backend`, what the front needs from the supervisor; `ProxyServer`, the SDK server
  whose default options announce what the proxy does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Final, Protocol

import mcp_types as types
import trio
from mcp.server.caching import CACHEABLE_METHODS
from mcp.server.caching import CacheHint as SdkCacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.bridge import ParkedCall, ParkedCalls, request_state_of, run_parked
from mcpvisor.actors.core.catalog import CacheHint, PromptRoute, Snapshot, close_names
from mcpvisor.actors.core.pending import owner_of
from mcpvisor.actors.core.registry import Changes
from mcpvisor.actors.eras import LOG_LEVELS, complete, is_modern_version, strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError, error_data
from mcpvisor.actors.fronts.clients import CLIENT_SEND_TIMEOUT_S, ClientRegistry, ClientState, level_ok
from mcpvisor.actors.fronts.drain import Drain
from mcpvisor.actors.fronts.origins import BridgedOrigin, ConnectionOrigin, SdkOrigin, is_modern
from mcpvisor.actors.fronts.tools import ToolCalls, View, loader_of
from mcpvisor.actors.fronts.views import NamedView, ToolsetViews, ViewRefused, view_name
from mcpvisor.actors.harness import ClientSession, sdk_session
from mcpvisor.actors.lazy import LoadFailed
from mcpvisor.actors.link import CallOrigin
from mcpvisor.actors.link.input_required import INPUT_REQUIRED_METHODS
from mcpvisor.actors.router import Router
from mcpvisor.actors.sdk_compat import (
    bus_listeners,
    connection_of,
    http_session_transport,
    maybe_connection_of,
    serve_dual_era_loop,
)
from mcpvisor.actors.starting import await_listed
from mcpvisor.actors.upstream import Upstream

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.server.connection import Connection
    from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)


class Backend(Protocol):
    """What the front needs from the supervisor."""

    router: Router

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        """The upstream actors by server name (read-only here: the supervisor owns them)."""

    async def wait_startup(self) -> None: ...

    @property
    def started(self) -> bool: ...

    async def call_local_tool(self, name: str, arguments: dict[str, Any],
                              ctx: ServerRequestContext[Any, Any] | None, *,
                              snapshot: Snapshot | None = None) -> dict[str, Any]: ...

    def note_call(self, server: str, tool: str, started: float, error: BaseException | None, *,
                  session: str | None = None, run: Any = None, arguments: Any = None, result: Any = None,
                  retries: int = 0, upstream: Upstream | None = None,
                  trace_id: str | None = None, direct: bool = False) -> None:
        """A call finished. ``direct``: the fast path's, whose request upstream began with
        it (its duration is the upstream leg's too, which nothing else measured)."""

    def upstream_for(self, server: str, session: ClientSession | None) -> Upstream | None: ...


def _in_view(name: str) -> Callable[[ClientState], bool]:
    return lambda state: state.view == name


def to_mcp_error(exc: ProxyError) -> MCPError:
    body = error_data(exc)
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))


CLIENT_STALLED: Final = ("mcpvisor disconnected this client: it read nothing for 10 s, "
                         "so its calls were cancelled")
"""The error a stalled client's calls end with (`mcpvisor.actors.fronts.outbox.CLIENT_STALL_S`), should it
read again."""

MAX_LISTEN_URIS: Final = 1024
"""Resources one ``subscriptions/listen`` stream may have subscribed upstream (bounded memory;
the SDK's own bound on streams is the same number)."""

DISCONNECT_S: Final = 5.0
"""Bound on terminating a stalled client's HTTP session (closing in-memory streams: instant)."""

PROXY_NOTIFICATIONS: Final = NotificationOptions(
    prompts_changed=True, resources_changed=True, tools_changed=True
)
"""What the proxy announces on the handshake era: the router broadcasts every tools,
resources and prompts change to every client (`Front.announce`)."""


class ProxyServer(Server[Any]):
    """The SDK `Server` whose default initialization options say what the proxy does.

    The stdio and websocket fronts pass `Front.init_options` to ``run``, but the SDK's
    ``StreamableHTTPSessionManager`` drives each HTTP session with no options, and the
    runner then builds them with ``create_initialization_options()``: with the SDK's
    defaults an HTTP client would read ``listChanged: false`` and never re-list
    (issue 14). Defaulting here makes every front advertise the same capabilities.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or PROXY_NOTIFICATIONS, experimental_capabilities, extensions
        )


class Front:
    """Builds the SDK server whose handlers route through the router's snapshot."""

    def __init__(self, backend: Backend, *, name: str = "mcpvisor", version: str = "",
                 instructions: str | None = None) -> None:
        self.backend = backend
        self.clients = ClientRegistry()
        self.bus = InMemorySubscriptionBus()
        self._listen_handler = ListenHandler(self.bus)
        self._subscribers: dict[str, int] = {}
        self.drain = Drain()
        """Refuses new requests and answers those in flight when the proxy stops
        (`mcpvisor.actors.fronts.drain`)."""
        self.parked = ParkedCalls()
        """Calls of 2026-07-28 clients waiting for their retry with the answers (`mcpvisor.actors.bridge`)."""
        self._origins: dict[ParkedCall, BridgedOrigin] = {}
        self._nursery: trio.Nursery | None = None
        self.log_level: str | None = None
        """The most verbose level any client set; upstreams are asked for it (2026-07-28 ones
        per request, handshake-era ones with logging/setLevel, again after each restart)."""
        self._sessions: dict[str, ClientSession] = {}
        """Sessions transports made for the connections they serve (`serve_connection`),
        by the session id the SDK's loop was given."""
        self.clients.on_stall = self._disconnect
        self.views: ToolsetViews | None = None
        """The fixed views (``/mcp/toolset/NAME``, toolset-bound tokens), once the supervisor
        sets them (`mcpvisor.actors.fronts.views`)."""
        self._view_listens: dict[str, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        """Each view's own ``subscriptions/listen`` bus: its tools list changes are its own."""
        self.tools = ToolCalls(backend, self._forward, self.session_of, self.view_of)
        """``tools/call``, ``use_tool`` and loading a lazy tool's server (`mcpvisor.actors.fronts.tools`)."""
        self.server: Server[Any] = ProxyServer(
            name,
            version=version,
            instructions=instructions,
            on_list_tools=self._list_tools,  # type: ignore[arg-type]  # see _list_tools
            on_call_tool=self.tools.call_tool,
            on_list_resources=self._list_resources,  # type: ignore[arg-type]  # see _list_tools
            on_list_resource_templates=self._list_templates,  # type: ignore[arg-type]  # see _list_tools
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_list_prompts=self._list_prompts,  # type: ignore[arg-type]  # see _list_tools
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_subscriptions_listen=self._listen_in_view,
            # 2026-07-28 list results carry freshness hints: a list passes on what its
            # servers sent (`_hinted`); where they sent none, clients may cache nothing
            # (list_changed tells them of changes).
            # The SDK types CACHEABLE_METHODS as frozenset[str], not of its own CacheableMethod
            # Literal (its tests weld the two together), so its keys do not type-check.
            cache_hints={method: SdkCacheHint(ttl_ms=0, scope="private")  # type: ignore[misc]
                         for method in CACHEABLE_METHODS},
        )
        self.server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        self.server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                             self._initialized)
        self.server.add_notification_handler("notifications/roots/list_changed", types.NotificationParams,
                                             self._roots_changed)
        # The SDK's default OpenTelemetry middleware costs ~6% per request and exports nothing
        # here; ours (`mcpvisor.actors.telemetry`) costs one check while tracing is off.
        # The drain comes first: a request refused at shutdown costs nothing further.
        traced = telemetry.SdkMiddleware(self.toolset_name)
        self.server.middleware = [self.drain, traced, self._track_middleware]
        self.init_options = self.server.create_initialization_options()

    # --- plumbing --------------------------------------------------------------------
    async def _track_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if not is_modern_version(ctx.protocol_version):
            self.clients.track(connection_of(ctx.session)).view = view_name(ctx.request)
        return await call_next(ctx)

    async def _initialized(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        self.clients.track(connection_of(ctx.session)).view = view_name(ctx.request)

    def toolset_name(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The toolset a request sees through: its fixed view's, else the equipped one (if any)."""
        name = view_name(ctx.request)
        if name is not None:
            return name
        equipped = getattr(getattr(self.backend.router.core, "exposure", None), "equipped", None)
        return getattr(equipped, "name", None)

    def view_of(self, ctx: ServerRequestContext[Any, Any]) -> View:
        """Where a request reads what it sees: its fixed view (`mcpvisor.actors.fronts.views`),
        else the router's snapshot."""
        name = view_name(ctx.request)
        if name is None or self.views is None:
            return self.backend.router
        return NamedView(self.views, name)

    def _snapshot_of(self, ctx: ServerRequestContext[Any, Any]) -> Snapshot:
        try:
            return self.view_of(ctx).snapshot
        except ViewRefused as refused:  # the toolset was deleted while its client was connected
            raise MCPError(code=wire.INVALID_PARAMS, message=refused.message,
                           data={"toolsets": list(refused.toolsets)}) from None

    def announce(self, snapshot: Snapshot, changes: Changes) -> None:
        """Tell every client which lists changed (called by the router; never blocks)."""
        events: list[Any] = []
        if changes.tools:
            # A fixed view hears of tools only when its own list changed (equipping a
            # toolset changes the proxy's list, not a view's).
            self.clients.broadcast("notifications/tools/list_changed", only=lambda s: s.view is None)
            self._publish_nowait(ToolsListChanged(), self.bus)
        if changes.tools or changes.catalog:
            for name in self.views.changed() if self.views is not None else ():
                self.clients.broadcast("notifications/tools/list_changed", only=_in_view(name))
                listen = self._view_listens.get(name)
                if listen is not None:
                    self._publish_nowait(ToolsListChanged(), listen[0])
        if changes.resources:
            self.clients.broadcast("notifications/resources/list_changed")
            events.append(ResourcesListChanged())
        if changes.prompts:
            self.clients.broadcast("notifications/prompts/list_changed")
            events.append(PromptsListChanged())
        for event in events:
            self._publish_nowait(event)

    def _publish_nowait(self, event: Any, bus: InMemorySubscriptionBus | None = None) -> None:
        # InMemorySubscriptionBus.publish only adds a checkpoint after its synchronous
        # fan-out; call the listeners directly so the router never awaits. Without a
        # bus: the proxy's and every view's.
        buses = [bus] if bus is not None else [self.bus, *(b for b, _ in self._view_listens.values())]
        for each in buses:
            for listener in bus_listeners(each):
                try:
                    listener(event)
                except Exception:
                    logger.exception("listen stream rejected an event")

    async def _listen_in_view(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        """``subscriptions/listen``: on the proxy's bus, or on the request's view's own."""
        name = view_name(ctx.request)
        if name is None:
            return await self._listen(ctx, params)
        listen = self._view_listens.get(name)
        if listen is None:
            bus = InMemorySubscriptionBus()
            listen = self._view_listens[name] = (bus, ListenHandler(bus))
        return await self._listen(ctx, params, listen[1])

    def resource_updated(self, uri: str) -> None:
        self.clients.broadcast("notifications/resources/updated", {"uri": uri},
                               only=lambda s: uri in s.subscriptions)
        self._publish_nowait(ResourceUpdated(uri))

    def log_message(self, server: str, params: dict[str, Any]) -> None:
        out = dict(params)
        inner = out.get("logger")
        out["logger"] = f"{server}.{inner}" if inner else server
        level = out.get("level")
        wanted = level if isinstance(level, str) else None
        self.clients.broadcast("notifications/message", out, only=lambda s: level_ok(wanted, s.log_level))

    def fallback_origin(self, method: str) -> CallOrigin | None:
        state = self.clients.latest(method)
        return ConnectionOrigin(state) if state is not None else None

    async def run(self, *, task_status: trio.TaskStatus[Front] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the broadcaster and the bridged calls (for the supervisor's lifetime)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await self.clients.run()
        finally:
            self._nursery = None
            self._listen_handler.close()
            for _, handler in self._view_listens.values():
                handler.close()

    async def serve_connection(self, read: MemoryObjectReceiveStream[SessionMessage | Exception],
                               write: MemoryObjectSendStream[SessionMessage], session: ClientSession) -> None:
        """Serve one client connection through the SDK server as ``session``.

        What ``Server.run`` does (the server's lifespan around the SDK's dual-era loop),
        with the connection's session id set to ``session.label``, so `session_of` gives
        the SDK's requests on this connection exactly ``session``: the one the transport's
        own path (the stdio fast path) uses, so both reach the same session-scoped
        instances. Returns when the client's side (``read``) ends; the SDK closes
        ``write``. The caller ends ``session`` (the SDK also ends it when the
        connection closes, if one of its requests used it).

        Args:
            read: the client's messages, as the SDK reads them.
            write: where the SDK puts what it sends the client.
            session: the connection's session, made by the transport.
        """
        key = session.label
        self._sessions[key] = session
        try:
            async with self.server.lifespan(self.server) as lifespan_state:
                await serve_dual_era_loop(self.server, read, write, lifespan_state=lifespan_state,
                                          session_id=key, init_options=self.init_options)
        finally:
            if self._sessions.get(key) is session:
                del self._sessions[key]

    def session_of(self, ctx: ServerRequestContext[Any, Any]) -> ClientSession | None:
        """The client session of a request served through the SDK (`mcpvisor.actors.harness.sdk_session`)."""
        if is_modern(ctx):
            return None
        return sdk_session(maybe_connection_of(ctx.session), self._sessions)

    def _upstream(self, server: str, ctx: ServerRequestContext[Any, Any] | None = None) -> Upstream:
        # A session-scoped server answers each client session with its own instance.
        session = self.session_of(ctx) if ctx is not None else None
        backend = self.backend
        up = backend.upstream_for(server, session) if session is not None else backend.upstreams.get(server)
        if up is None:
            raise MCPError(code=wire.INVALID_PARAMS, message=f"server {server} is not configured any more")
        return up

    async def _forward(self, server: str, method: str, params: Mapping[str, Any] | None,
                       ctx: ServerRequestContext[Any, Any], *, retry_safe: bool = False) -> dict[str, Any]:
        if is_modern(ctx) and method in INPUT_REQUIRED_METHODS:
            token = request_state_of(params)
            if token is not None:
                return await self._resume(token, params, ctx)
            up = self._upstream(server)
            if self._nursery is not None and (up.link is None or not up.link.modern):
                return await self._forward_bridged(up, method, params, ctx, retry_safe=retry_safe)
        up = self._upstream(server, ctx)
        origin = SdkOrigin(ctx, self.clients)
        box = self.clients.outbox(connection_of(ctx.session))
        result: dict[str, Any] = {}
        try:
            outbox = box.call() if box is not None else nullcontext()
            with outbox as scope, trio.CancelScope() as origin.scope:
                result = await up.request(method, params, origin=origin, retry_safe=retry_safe)
        except ProxyError as exc:
            raise to_mcp_error(origin.refusal or exc) from None
        if origin.refusal is not None:  # the upstream asked what this client cannot answer
            raise to_mcp_error(origin.refusal)
        if scope is not None and scope.cancelled_caught:
            raise MCPError(code=wire.CONNECTION_CLOSED, message=CLIENT_STALLED)
        if box is not None and origin.last_queued:
            await box.wait_sent(origin.last_queued)  # its progress goes out before its answer
        return strip_upstream_stamps(result, modern_front=is_modern(ctx))

    async def _disconnect(self, connection: Connection) -> None:
        """End a connection whose outbox stalled (its calls are already cancelled).

        A streamable-HTTP session is terminated (the SDK's transport; later requests
        get 404, as after a DELETE). A websocket's own writer closes it on the same
        bound (`mcpvisor.actors.fronts.ws`); the stdio front does not use outboxes.
        """
        if connection.session_id is None:
            return
        transport = http_session_transport(self.server, connection.session_id)
        if transport is not None:
            with trio.move_on_after(DISCONNECT_S):
                await transport.terminate()

    async def _forward_bridged(self, up: Upstream, method: str, params: Mapping[str, Any] | None,
                               ctx: ServerRequestContext[Any, Any], *, retry_safe: bool) -> dict[str, Any]:
        """A 2026-07-28 client's request to a handshake-era upstream: run it beside the
        client's leg, so the upstream's questions can become ``input_required`` legs."""
        parked = self.parked.open((params or {}).get("inputResponses"))
        origin = BridgedOrigin(ctx, self.clients, parked)
        self._origins[parked] = origin

        async def forward() -> dict[str, Any]:
            result = await up.request(method, params, origin=origin, retry_safe=retry_safe)
            return strip_upstream_stamps(result, modern_front=True)

        def forget() -> None:
            self.parked.close(parked)
            self._origins.pop(parked, None)

        assert self._nursery is not None
        await self._nursery.start(run_parked, parked, forward, forget)
        return await self._leg(parked, origin)

    async def _resume(self, token: str, params: Mapping[str, Any] | None,
                      ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """The client retried a bridged call with its answers: resume the waiting upstream."""
        parked = self.parked.get(token)
        origin = self._origins.get(parked) if parked is not None else None
        if parked is None or origin is None or parked.done:
            raise MCPError(code=wire.INVALID_PARAMS, message="unknown or expired requestState",
                           data={"reason": "invalid_request_state"})
        origin.next_leg(ctx)
        parked.answer((params or {}).get("inputResponses"))
        return await self._leg(parked, origin)

    async def _leg(self, parked: ParkedCall, origin: BridgedOrigin) -> dict[str, Any]:
        """What this leg of a bridged call answers: the next questions, or the outcome.
        A leg cancelled while it waits (the client cancelled, or left) cancels the call.
        The leg's progress goes out before its answer (the stream ends with the answer)."""
        try:
            leg = await parked.next_leg()
        except trio.Cancelled:
            parked.cancel()
            raise
        box = self.clients.outbox(connection_of(origin.ctx.session))
        if box is not None and origin.last_queued:
            await box.wait_sent(origin.last_queued)
        if isinstance(leg, ProxyError):
            raise to_mcp_error(leg)
        return leg

    # --- tools -------------------------------------------------------------------------
    # The list handlers answer with plain dicts: the SDK types ``on_list_*`` as returning its
    # result models, but its runner takes any ``HandlerResult`` (model, dict or None,
    # ``mcp.server.runner._dump_result``), and a dict skips a pydantic round trip per list.
    # None of them waits for start-up: a client is answered at once with what is known (the
    # servers that are up, the remembered lists of those starting); the rest arrive with
    # list_changed. Claude Code gives up on a server whose first tools/list takes over ~5 s.
    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return self._hinted(complete({"tools": list(self._snapshot_of(ctx).tools_list)}), "tools")

    def _hinted(self, result: dict[str, Any], kind: str) -> dict[str, Any]:
        """``result`` with the caching directives the servers behind it sent for ``kind``
        (the shortest ``ttlMs``, ``private`` if any list was), when every server that lists
        something of that kind sent them. Otherwise it is left to the front's default
        (``ttlMs: 0``, private: a list made partly of a handshake-era server's, which says
        nothing, or of nothing, is not given a ttl nobody sent). A handshake-era client
        never sees either key (the SDK sieves them off its results)."""
        joined: CacheHint | None = None
        for up in self.backend.upstreams.values():
            if not getattr(up.lists, kind):
                continue
            hint = up.hints.get(kind)
            if hint is None:
                return result
            joined = hint.join(joined)
        if joined is not None:
            result["ttlMs"], result["cacheScope"] = joined.ttl_ms, joined.scope
        return result

    # --- resources ---------------------------------------------------------------------
    async def _list_resources(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return self._hinted(complete({"resources": list(self.backend.router.snapshot.resources_list)}),
                            "resources")

    async def _list_templates(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        templates = list(self.backend.router.snapshot.templates_list)
        return self._hinted(complete({"resourceTemplates": templates}), "templates")

    def _resource_owner(self, uri: str) -> str:
        server = self.backend.router.snapshot.route_resource(uri)
        if server is None:
            raise MCPError(code=wire.INVALID_PARAMS, message=f"no server lists the resource {uri}",
                           data={"uri": uri})
        return server

    async def _read_resource(self, ctx: ServerRequestContext[Any, Any],
                             params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        # Read before its server listed it (a one-shot client reads right after connecting):
        # wait while start-up lasts, as tools/call does.
        await await_listed(self.backend, lambda s: s.route_resource(uri) is not None)
        loader = loader_of(self.backend)
        if self.backend.router.snapshot.route_resource(uri) is None and loader is not None:
            # First use: a URI nobody serves may be a lazy server's; load those not loaded yet.
            for server in loader.not_loaded():
                try:
                    await loader.load(server.name)
                except LoadFailed as exc:
                    logger.info("resources/read %s: %s", uri, exc)
                if self.backend.router.snapshot.route_resource(uri) is not None:
                    break
        return await self._forward(self._resource_owner(uri), "resources/read", ctx.params, ctx)

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any],
                         params: types.SubscribeRequestParams) -> Any:
        uri = str(params.uri)
        server = self._resource_owner(uri)
        state = self.clients.track(connection_of(ctx.session))
        if uri in state.subscriptions:
            return {}
        await self._hold(server, uri, ctx)
        state.subscriptions.add(uri)
        connection_of(ctx.session).exit_stack.push_async_callback(self._drop_subscription, state, server, uri)
        return {}

    async def _hold(self, server: str, uri: str, ctx: ServerRequestContext[Any, Any]) -> None:
        """One more subscriber to ``uri``: the first subscribes upstream (handshake era:
        ``resources/subscribe``; 2026-07-28: the upstream's listen stream)."""
        key = f"{server}\n{uri}"
        if self._subscribers.get(key, 0) == 0:
            up = self._upstream(server)
            if up.link is not None and up.link.modern:
                up.listen_to(uri, True)  # 2026-07-28: updates ride the upstream's listen stream
            else:
                await self._forward(server, "resources/subscribe", {"uri": uri}, ctx)
        self._subscribers[key] = self._subscribers.get(key, 0) + 1

    async def _listen(self, ctx: ServerRequestContext[Any, Any],
                      params: types.SubscriptionsListenRequestParams,
                      handler: ListenHandler | None = None) -> Any:
        """``subscriptions/listen``: the SDK's stream of list changes and resource updates,
        tagged with the subscription id; the resources it names are subscribed upstream
        for as long as the stream lasts, as ``resources/subscribe`` does for a
        handshake-era connection, so their updates reach it from either era of upstream.
        ``handler``: a view's own stream (its tools changes are its own); the proxy's by default."""
        held: list[tuple[str, str]] = []
        try:
            for uri in (params.notifications.resource_subscriptions or ())[:MAX_LISTEN_URIS]:
                server = self.backend.router.snapshot.route_resource(str(uri))
                if server is not None:  # a URI nobody serves is honoured and never fires
                    await self._hold(server, str(uri), ctx)
                    held.append((server, str(uri)))
            return await (handler or self._listen_handler)(ctx, params)
        finally:
            with trio.CancelScope(shield=True):
                for server, uri in held:
                    await self._release(server, uri)

    async def _drop_subscription(self, state: ClientState, server: str, uri: str) -> None:
        if uri not in state.subscriptions:
            return
        state.subscriptions.discard(uri)
        await self._release(server, uri)

    async def _release(self, server: str, uri: str) -> None:
        """One subscriber fewer to ``uri``: the last unsubscribes upstream (bounded)."""
        key = f"{server}\n{uri}"
        count = self._subscribers.get(key, 0) - 1
        if count > 0:
            self._subscribers[key] = count
            return
        self._subscribers.pop(key, None)
        up = self.backend.upstreams.get(server)
        if up is not None and up.link is not None and up.link.modern:
            up.listen_to(uri, False)
        elif up is not None and up.link is not None:
            with trio.move_on_after(CLIENT_SEND_TIMEOUT_S):
                try:
                    await up.request("resources/unsubscribe", {"uri": uri})
                except ProxyError:
                    pass

    async def _unsubscribe(self, ctx: ServerRequestContext[Any, Any],
                           params: types.UnsubscribeRequestParams) -> Any:
        uri = str(params.uri)
        state = self.clients.track(connection_of(ctx.session))
        server = self.backend.router.snapshot.route_resource(uri)
        if server is not None:
            await self._drop_subscription(state, server, uri)
        return {}

    # --- prompts and completion ----------------------------------------------------------
    async def _list_prompts(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return self._hinted(complete({"prompts": list(self.backend.router.snapshot.prompts_list)}), "prompts")

    async def _get_prompt(self, ctx: ServerRequestContext[Any, Any],
                          params: types.GetPromptRequestParams) -> Any:
        route = await self._prompt_route(params.name)
        raw = dict(ctx.params or {})
        raw["name"] = route.original
        return await self._forward(route.server, "prompts/get", raw, ctx)

    async def _prompt_route(self, name: str) -> PromptRoute:
        """The route of prompt ``name``, waiting for its server if it is starting.

        Raises:
            MCPError: its server is down (named, with why and the next try), or the prompt
                is unknown (the closest names of the same server, when it has any).
        """
        snapshot = self.backend.router.snapshot
        route = snapshot.prompts.get(name)
        if route is not None:
            return route
        try:
            snapshot = await await_listed(self.backend, lambda s: name in s.prompts, name=name)
        except ProxyError as exc:
            raise to_mcp_error(exc) from None
        route = snapshot.prompts.get(name)
        if route is not None:
            return route
        server = owner_of(name, self.backend.upstreams, snapshot.namespacing)
        names = [n for n, r in snapshot.prompts.items() if server is None or r.server == server]
        close = close_names(name, names)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        where = f" (server {server} has no such prompt)" if server is not None else ""
        raise MCPError(code=wire.INVALID_PARAMS, message=f"unknown prompt {name!r}{where}{hint}")

    async def _complete(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CompleteRequestParams) -> Any:
        raw = dict(ctx.params or {})
        ref = dict(raw.get("ref") or {})
        snapshot = self.backend.router.snapshot
        if ref.get("type") == "ref/prompt":
            route = await self._prompt_route(str(ref.get("name")))
            ref["name"] = route.original
            server = route.server
        else:
            uri = str(ref.get("uri", ""))
            if snapshot.route_completion_ref(uri) is None:
                snapshot = await await_listed(self.backend, lambda s: s.route_completion_ref(uri) is not None)
            server = snapshot.route_completion_ref(uri) or ""
            if not server:
                raise MCPError(code=wire.INVALID_PARAMS,
                               message=f"no server serves the resource template {uri}")
        raw["ref"] = ref
        return await self._forward(server, "completion/complete", raw, ctx)

    # --- logging and roots ---------------------------------------------------------------
    async def _set_level(self, ctx: ServerRequestContext[Any, Any],
                         params: types.SetLevelRequestParams) -> Any:
        state = self.clients.track(connection_of(ctx.session))
        state.log_level = params.level
        levels = [s.log_level for s in self.clients.clients() if s.log_level]
        lowest = min(levels, key=LOG_LEVELS.index) if levels else params.level
        self.log_level = lowest
        for up in self.backend.upstreams.values():
            caps = up.link.capabilities if up.link is not None else None
            if caps is not None and caps.logging is not None and not up.link.modern:  # type: ignore[union-attr]
                with trio.move_on_after(CLIENT_SEND_TIMEOUT_S):
                    try:
                        await up.request("logging/setLevel", {"level": lowest})
                    except ProxyError as exc:
                        logger.debug("%s: logging/setLevel: %s", up.name, exc)
        return {}

    async def _roots_changed(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        for up in self.backend.upstreams.values():
            link = up.link
            if link is not None and not link.modern and link.close_reason is None:
                try:
                    await link.notify("notifications/roots/list_changed", None)
                except Exception:
                    logger.debug("%s: could not forward roots/list_changed", up.name, exc_info=True)
