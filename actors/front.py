"""The client-facing MCP server: one SDK `Server` shared by every front connection.

Owns:

* the request handlers (tools, resources, prompts, completion, logging): each reads
  the router's current snapshot and forwards to the owning upstream actor;
* `ClientRegistry`: the live handshake-era connections (the SDK creates a
  `ServerSession` per request, so the connection is captured from each request and
  from ``notifications/initialized``; SDK-NOTES.md §1.3), their log levels and
  resource subscriptions;
* the broadcaster: list_changed, resources/updated and upstream log messages to
  every client, in both eras (handshake era: each connection's standalone channel;
  2026-07-28: the `subscriptions/listen` bus). It queues per client, so a stuck
  client never holds up the router or other clients;
* `SdkOrigin`: how an upstream's mid-call progress and requests reach the client
  whose call caused them; `BridgedOrigin` for a 2026-07-28 client, whose questions
  from a handshake-era upstream become ``input_required`` legs (`actors.bridge`).
"""

from __future__ import annotations

import difflib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import mcp_types as types
import trio
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.connection import Connection
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
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY

from actors import wire
from actors.bridge import ParkedCall, ParkedCalls, declared, request_state_of, run_parked
from actors.core.catalog import Snapshot, ToolRoute
from actors.core.discovery import USE_TOOL, lazy_owner
from actors.core.registry import Changes
from actors.core.use_tool import CallLocal, NeedsLoad, plan_use
from actors.eras import complete, is_modern_version, strip_upstream_stamps
from actors.errors import BridgeUnsupported, ProxyError, UpstreamError, error_data
from actors.harness import ClientSession, run_label, sdk_session
from actors.lazy import LazyLoader, LoadFailed
from actors.link import CallOrigin
from actors.link.input_required import INPUT_REQUIRED_METHODS
from actors.router import Router
from actors.upstream import Upstream

logger = logging.getLogger(__name__)

CLIENT_QUEUE: Final = 256
"""Notifications queued for one client before duplicates are coalesced (a stuck client
costs bounded memory; RELIABILITY R6)."""

CLIENT_SEND_TIMEOUT_S: Final = 5.0
"""A client that cannot take a notification in this long is skipped for that one (its
own sender waits; no other client does)."""

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

SIMILAR_NAMES: Final = 5


class Backend(Protocol):
    """What the front needs from the supervisor."""

    router: Router
    upstreams: Mapping[str, Upstream]

    async def wait_startup(self) -> None: ...

    @property
    def started(self) -> bool: ...

    async def call_local_tool(self, name: str, arguments: dict[str, Any],
                              ctx: ServerRequestContext[Any, Any] | None) -> dict[str, Any]: ...

    def note_call(self, server: str, tool: str, started: float, error: BaseException | None, *,
                  session: str | None = None, run: Any = None, arguments: Any = None, result: Any = None,
                  retries: int = 0, upstream: Upstream | None = None) -> None: ...

    def upstream_for(self, server: str, session: ClientSession | None) -> Upstream | None: ...


def is_modern(ctx: ServerRequestContext[Any, Any] | None) -> bool:
    return ctx is not None and is_modern_version(ctx.protocol_version)


def unknown_tool_result(name: str, snapshot: Snapshot) -> dict[str, Any]:
    names = snapshot.exposed_names()
    close = difflib.get_close_matches(name, names, n=SIMILAR_NAMES, cutoff=0.5)
    text = f"Unknown tool {name!r}."
    if close:
        text += " Did you mean: " + ", ".join(close) + "?"
    elif names:
        text += f" {len(names)} tools are exposed; list them with tools/list."
    else:
        text += " No tools are exposed right now."
    return wire.tool_error_result(text, {"error": "unknown_tool", "tool": name, "didYouMean": close})


def to_mcp_error(exc: ProxyError) -> MCPError:
    body = error_data(exc)
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))


# --------------------------------------------------------------------------------------
# connected clients
# --------------------------------------------------------------------------------------


@dataclass(eq=False)
class ClientState:
    """One handshake-era connection and what the proxy keeps for it."""

    connection: Connection
    log_level: str | None = None
    subscriptions: set[str] = field(default_factory=set)
    last_active: float = 0.0
    queue: deque[tuple[str, dict[str, Any] | None]] = field(default_factory=deque)
    """Notifications waiting for this client's sender (at most `CLIENT_QUEUE`)."""
    closed: bool = False
    wake: trio.Event = field(default_factory=trio.Event)
    """Set when the queue gains an entry or the connection closes: wakes the sender."""

    def capable(self, method: str) -> bool:
        caps = self.connection.client_capabilities
        if caps is None:
            return False
        if method == "sampling/createMessage":
            return caps.sampling is not None
        if method == "elicitation/create":
            return caps.elicitation is not None
        if method == "roots/list":
            return caps.roots is not None
        return True


class ConnectionOrigin:
    """A connection asked outside any call (e.g. an upstream's roots/list at start-up)."""

    progress_token: int | str | None = None
    modern = False
    log_level: str | None = None

    def __init__(self, state: ClientState) -> None:
        self._state = state

    async def progress(self, params: dict[str, Any]) -> None:
        return None

    async def log(self, params: dict[str, Any]) -> None:
        return None

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        try:
            return await self._state.connection.send_raw_request(method, params)
        except MCPError as exc:
            raise UpstreamError(exc.error.code, exc.error.message, exc.error.data) from None
        except NoBackChannelError:
            raise BridgeUnsupported(f"the client cannot receive {method}") from None


class SdkOrigin:
    """The client whose request (served through the SDK) caused an upstream call."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], registry: ClientRegistry) -> None:
        self.ctx = ctx
        meta = (ctx.params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        self.progress_token = token if isinstance(token, int | str) and not isinstance(token, bool) else None
        self.modern = is_modern(ctx)
        level = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, Mapping) and self.modern else None
        self.log_level = level if isinstance(level, str) else None
        self._registry = registry

    async def progress(self, params: dict[str, Any]) -> None:
        await self.ctx.session._request_outbound.notify("notifications/progress", params)

    async def log(self, params: dict[str, Any]) -> None:
        await self.ctx.session._request_outbound.notify("notifications/message", params)

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        ctx = self.ctx
        if is_modern_version(ctx.protocol_version):
            raise BridgeUnsupported(
                f"the client speaks MCP {ctx.protocol_version}, which has no server-to-client requests; "
                f"{method} from a handshake-era server can reach it only during tools/call, prompts/get "
                f"or resources/read (as input_required)"
            )
        state = self._registry.get(ctx.session._connection)
        if state is not None and not state.capable(method):
            raise UpstreamError(wire.METHOD_NOT_FOUND, f"the client did not declare support for {method}")
        try:
            return await ctx.session._request_outbound.send_raw_request(method, params, None)
        except MCPError as exc:
            raise UpstreamError(exc.error.code, exc.error.message, exc.error.data) from None
        except NoBackChannelError:
            raise BridgeUnsupported(f"this client connection cannot receive {method}") from None


class BridgedOrigin(SdkOrigin):
    """A 2026-07-28 client's call to a handshake-era upstream: the upstream's questions
    are put to the client as ``input_required`` legs; progress goes to the current leg."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], registry: ClientRegistry,
                 parked: ParkedCall) -> None:
        super().__init__(ctx, registry)
        self.parked = parked

    def next_leg(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """The client retried: its progress token and response stream are the new leg's."""
        self.ctx = ctx
        meta = (ctx.params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        if isinstance(token, int | str) and not isinstance(token, bool):
            self.progress_token = token
        level = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, Mapping) else None
        self.log_level = level if isinstance(level, str) else None

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        meta = (self.ctx.params or {}).get("_meta")
        caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
        if not declared(caps, method):
            raise UpstreamError(wire.METHOD_NOT_FOUND, f"the client did not declare support for {method}")
        return await self.parked.ask(method, params)


class ClientRegistry:
    """Live handshake-era connections, and the per-client notification queues.

    Each connection gets its own sender task while `run` is running (RELIABILITY R6):
    a client that stops reading blocks only its own sender, and costs at most
    `CLIENT_QUEUE` queued notifications and one task until its connection closes.
    """

    def __init__(self) -> None:
        self._clients: dict[int, ClientState] = {}
        self._nursery: trio.Nursery | None = None

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, connection: Connection) -> ClientState | None:
        return self._clients.get(id(connection))

    def track(self, connection: Connection) -> ClientState:
        state = self._clients.get(id(connection))
        if state is None:
            state = ClientState(connection)
            self._clients[id(connection)] = state
            connection.exit_stack.callback(self._forget, connection)
            if self._nursery is not None:
                self._nursery.start_soon(self._send_to, state)
        state.last_active = trio.current_time()
        return state

    def _forget(self, connection: Connection) -> None:
        state = self._clients.pop(id(connection), None)
        if state is not None:
            state.closed = True
            state.queue.clear()
            state.wake.set()  # the sender sees `closed` and ends

    def clients(self) -> list[ClientState]:
        return list(self._clients.values())

    def latest(self, method: str) -> ClientState | None:
        """The most recently active client able to answer ``method``."""
        best = None
        for state in self._clients.values():
            if state.capable(method) and (best is None or state.last_active > best.last_active):
                best = state
        return best

    def enqueue(self, state: ClientState, method: str, params: dict[str, Any] | None) -> None:
        q = state.queue
        if len(q) >= CLIENT_QUEUE:
            if (method, params) in q:
                return  # coalesce: the client already has this one queued
            q.popleft()
        q.append((method, params))
        state.wake.set()

    def broadcast(self, method: str, params: dict[str, Any] | None = None,
                  only: Callable[[ClientState], bool] | None = None) -> None:
        for state in self._clients.values():
            if only is None or only(state):
                self.enqueue(state, method, params)

    async def run(self) -> None:
        """Deliver queued notifications until cancelled: one sender per client, so none
        waits on another (a client tracked before `run` starts gets its sender here)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                for state in self._clients.values():
                    nursery.start_soon(self._send_to, state)
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def _send_to(self, state: ClientState) -> None:
        """One client's sender: its queue in order, each notification bounded by
        `CLIENT_SEND_TIMEOUT_S`; ends when the connection closes."""
        while not state.closed:
            await state.wake.wait()
            state.wake = trio.Event()
            while state.queue and not state.closed:
                method, params = state.queue.popleft()
                with trio.move_on_after(CLIENT_SEND_TIMEOUT_S):
                    await state.connection.notify(method, params)


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------


def _level_ok(level: str | None, wanted: str | None) -> bool:
    if wanted is None:
        return True
    try:
        return LOG_LEVELS.index(level or "info") >= LOG_LEVELS.index(wanted)
    except ValueError:
        return True


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
        self._listen = ListenHandler(self.bus)
        self._subscribers: dict[str, int] = {}
        self.parked = ParkedCalls()
        """Calls of 2026-07-28 clients waiting for their retry with the answers (`actors.bridge`)."""
        self._origins: dict[str, BridgedOrigin] = {}
        self._nursery: trio.Nursery | None = None
        self.log_level: str | None = None
        """The most verbose level any client set; upstreams are asked for it (2026-07-28 ones
        per request, handshake-era ones with logging/setLevel, again after each restart)."""
        self.server: Server[Any] = ProxyServer(
            name,
            version=version,
            instructions=instructions,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_subscriptions_listen=self._listen,
            # 2026-07-28 list results carry freshness hints: ours change whenever an
            # upstream or a toolset does, so clients may cache nothing (list_changed tells them).
            cache_hints={method: CacheHint(ttl_ms=0, scope="private") for method in CACHEABLE_METHODS},
        )
        self.server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        self.server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                             self._initialized)
        self.server.add_notification_handler("notifications/roots/list_changed", types.NotificationParams,
                                             self._roots_changed)
        # The default OpenTelemetry middleware costs ~6% per request and exports nothing here.
        self.server.middleware = [self._track_middleware]
        self.init_options = self.server.create_initialization_options()

    # --- plumbing --------------------------------------------------------------------
    async def _track_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if not is_modern_version(ctx.protocol_version):
            self.clients.track(ctx.session._connection)
        return await call_next(ctx)

    async def _initialized(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        self.clients.track(ctx.session._connection)

    def announce(self, snapshot: Snapshot, changes: Changes) -> None:
        """Tell every client which lists changed (called by the router; never blocks)."""
        events: list[Any] = []
        if changes.tools:
            self.clients.broadcast("notifications/tools/list_changed")
            events.append(ToolsListChanged())
        if changes.resources:
            self.clients.broadcast("notifications/resources/list_changed")
            events.append(ResourcesListChanged())
        if changes.prompts:
            self.clients.broadcast("notifications/prompts/list_changed")
            events.append(PromptsListChanged())
        for event in events:
            self._publish_nowait(event)

    def _publish_nowait(self, event: Any) -> None:
        # InMemorySubscriptionBus.publish only adds a checkpoint after its synchronous
        # fan-out; call the listeners directly so the router never awaits.
        for listener in list(self.bus._listeners.values()):
            try:
                listener(event)
            except Exception:
                logger.exception("listen stream rejected an event")

    def resource_updated(self, uri: str) -> None:
        self.clients.broadcast("notifications/resources/updated", {"uri": uri},
                               only=lambda s: uri in s.subscriptions)
        self._publish_nowait(ResourceUpdated(uri))

    def log_message(self, server: str, params: dict[str, Any]) -> None:
        out = dict(params)
        inner = out.get("logger")
        out["logger"] = f"{server}.{inner}" if inner else server
        level = out.get("level")
        self.clients.broadcast("notifications/message", out,
                               only=lambda s: _level_ok(level if isinstance(level, str) else None, s.log_level))

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
            self._listen.close()

    def _upstream(self, server: str, ctx: ServerRequestContext[Any, Any] | None = None) -> Upstream:
        # A session-scoped server answers each client session with its own instance.
        session = sdk_session(ctx, is_modern(ctx)) if ctx is not None else None
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
        try:
            result = await self._upstream(server, ctx).request(
                method, params, origin=SdkOrigin(ctx, self.clients), retry_safe=retry_safe
            )
        except ProxyError as exc:
            raise to_mcp_error(exc) from None
        return strip_upstream_stamps(result, modern_front=is_modern(ctx))

    async def _forward_bridged(self, up: Upstream, method: str, params: Mapping[str, Any] | None,
                               ctx: ServerRequestContext[Any, Any], *, retry_safe: bool) -> dict[str, Any]:
        """A 2026-07-28 client's request to a handshake-era upstream: run it beside the
        client's leg, so the upstream's questions can become ``input_required`` legs."""
        parked = self.parked.open()
        origin = BridgedOrigin(ctx, self.clients, parked)
        self._origins[parked.token] = origin

        async def forward() -> dict[str, Any]:
            result = await up.request(method, params, origin=origin, retry_safe=retry_safe)
            return strip_upstream_stamps(result, modern_front=True)

        def forget() -> None:
            self.parked.close(parked)
            self._origins.pop(parked.token, None)

        assert self._nursery is not None
        await self._nursery.start(run_parked, parked, forward, forget)
        return await self._leg(parked)

    async def _resume(self, token: str, params: Mapping[str, Any] | None,
                      ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """The client retried a bridged call with its answers: resume the waiting upstream."""
        parked = self.parked.get(token)
        origin = self._origins.get(token)
        if parked is None or origin is None or parked.done:
            raise MCPError(code=wire.INVALID_PARAMS, message="unknown or expired requestState",
                           data={"reason": "invalid_request_state"})
        origin.next_leg(ctx)
        parked.answer((params or {}).get("inputResponses"))
        return await self._leg(parked)

    async def _leg(self, parked: ParkedCall) -> dict[str, Any]:
        """What this leg of a bridged call answers: the next questions, or the outcome.
        A leg cancelled while it waits (the client cancelled, or left) cancels the call."""
        try:
            leg = await parked.next_leg()
        except trio.Cancelled:
            parked.cancel()
            raise
        if isinstance(leg, ProxyError):
            raise to_mcp_error(leg)
        return leg

    # --- tools -------------------------------------------------------------------------
    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        await self.backend.wait_startup()
        return complete({"tools": list(self.backend.router.snapshot.tools_list)})

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        snapshot = self.backend.router.snapshot
        name = params.name
        route = snapshot.tools.get(name)
        if route is None and not self.backend.started:
            # A client that calls before listing (it remembered the names) waits for start-up
            # like a tools/list would, instead of being told the tool does not exist.
            await self.backend.wait_startup()
            snapshot = self.backend.router.snapshot
            route = snapshot.tools.get(name)
        if route is None and name == USE_TOOL and snapshot.discovery is not None:
            used = await self._use_tool(ctx, params.arguments)
            return strip_upstream_stamps(used, modern_front=is_modern(ctx))
        if route is None and name not in snapshot.local_tools:
            # A lazy server's tool, named before the server was loaded: load it (first use).
            failure = await self.load_owner(name)
            if failure is not None:
                return strip_upstream_stamps(failure, modern_front=is_modern(ctx))
            snapshot = self.backend.router.snapshot
            route = snapshot.tools.get(name)
        if route is None:
            if name in snapshot.local_tools:
                local = await self.backend.call_local_tool(name, dict(params.arguments or {}), ctx)
            else:
                local = unknown_tool_result(name, snapshot)
            return strip_upstream_stamps(local, modern_front=is_modern(ctx))
        raw = dict(ctx.params or {})
        return await self._call_route(route, raw, ctx)

    def _loader(self) -> LazyLoader | None:
        return getattr(self.backend, "loader", None)

    async def load_owner(self, name: str) -> dict[str, Any] | None:
        """Load the lazy server (not loaded yet) a tool named ``name`` would belong to.

        Returns None when there is none or it loaded; else the ``isError`` result saying why.
        """
        loader = self._loader()
        if loader is None:
            return None
        owner = lazy_owner(name, loader.unloaded())
        if owner is None:
            return None
        try:
            await loader.load(owner.name)
        except LoadFailed as exc:
            text = f"{name} belongs to the lazy server {owner.name}, which could not be loaded: {exc}"
            return wire.tool_error_result(text, {"error": "load_failed", "server": owner.name,
                                                 "message": str(exc), "givenUp": exc.given_up})
        return None

    async def _use_tool(self, ctx: ServerRequestContext[Any, Any], arguments: Any) -> Any:
        """``use_tool {tool_name, arguments}``: checked, then routed exactly as a direct call
        of that tool (same forwarding, progress, cancellation, timeouts and retries)."""
        plan = plan_use(self.backend.router.snapshot, arguments)
        if isinstance(plan, NeedsLoad):
            failure = await self.load_owner(plan.tool_name)
            if failure is not None:
                return failure
            plan = plan_use(self.backend.router.snapshot, arguments)
        if isinstance(plan, dict):
            return plan
        if isinstance(plan, CallLocal):
            return await self.backend.call_local_tool(plan.name, plan.arguments, ctx)
        if isinstance(plan, NeedsLoad):  # loaded, yet the tool is not there
            return unknown_tool_result(plan.tool_name, self.backend.router.snapshot)
        raw = dict(ctx.params or {})
        raw["arguments"] = plan.arguments
        return await self._call_route(plan.route, raw, ctx)

    async def _call_route(self, route: ToolRoute, raw: dict[str, Any],
                          ctx: ServerRequestContext[Any, Any]) -> Any:
        """Forward ``raw`` (the client's tools/call params) as the call of ``route``: a
        compound tool is checked here and becomes exactly the direct call of its subtool."""
        server, original, retry_safe = route.server, route.original, route.retry_safe
        if route.compound is not None:
            sub = route.compound.prepare(raw.get("arguments") or {})
            if isinstance(sub, dict) and not self.backend.started:
                # A subtool's server may not have listed yet: wait for start-up like a direct call.
                await self.backend.wait_startup()
                route = self.backend.router.snapshot.tools.get(route.exposed, route)
                sub = route.compound.prepare(raw.get("arguments") or {}) if route.compound else sub
            if isinstance(sub, dict):
                return strip_upstream_stamps(sub, modern_front=is_modern(ctx))
            server, original, retry_safe = sub.server, sub.tool, sub.retry_safe
            raw["arguments"] = sub.args
        raw["name"] = original
        started = trio.current_time()
        session = sdk_session(ctx, is_modern(ctx))
        label = session.label if session is not None else None
        try:
            result = await self._forward(server, "tools/call", raw, ctx, retry_safe=retry_safe)
        except (MCPError, trio.Cancelled) as exc:
            self.backend.note_call(server, original, started, exc, session=label,
                                   run=run_label(ctx, session), arguments=raw.get("arguments"))
            raise
        if result.get("resultType") != "input_required":  # one journal entry per call, not per leg
            self.backend.note_call(server, original, started, None, session=label,
                                   run=run_label(ctx, session), arguments=raw.get("arguments"), result=result)
        return result

    # --- resources ---------------------------------------------------------------------
    async def _list_resources(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        await self.backend.wait_startup()
        return complete({"resources": list(self.backend.router.snapshot.resources_list)})

    async def _list_templates(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        await self.backend.wait_startup()
        return complete({"resourceTemplates": list(self.backend.router.snapshot.templates_list)})

    def _resource_owner(self, uri: str) -> str:
        server = self.backend.router.snapshot.route_resource(uri)
        if server is None:
            raise MCPError(code=wire.INVALID_PARAMS, message=f"no server lists the resource {uri}",
                           data={"uri": uri})
        return server

    async def _read_resource(self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        loader = self._loader()
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

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> Any:
        uri = str(params.uri)
        server = self._resource_owner(uri)
        state = self.clients.track(ctx.session._connection)
        if uri in state.subscriptions:
            return {}
        key = f"{server}\n{uri}"
        if self._subscribers.get(key, 0) == 0:
            up = self._upstream(server)
            if up.link is not None and up.link.modern:
                up.listen_to(uri, True)  # 2026-07-28: updates ride the upstream's listen stream
            else:
                await self._forward(server, "resources/subscribe", {"uri": uri}, ctx)
        self._subscribers[key] = self._subscribers.get(key, 0) + 1
        state.subscriptions.add(uri)
        ctx.session._connection.exit_stack.push_async_callback(self._drop_subscription, state, server, uri)
        return {}

    async def _drop_subscription(self, state: ClientState, server: str, uri: str) -> None:
        if uri not in state.subscriptions:
            return
        state.subscriptions.discard(uri)
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

    async def _unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams) -> Any:
        uri = str(params.uri)
        state = self.clients.track(ctx.session._connection)
        server = self.backend.router.snapshot.route_resource(uri)
        if server is not None:
            await self._drop_subscription(state, server, uri)
        return {}

    # --- prompts and completion ----------------------------------------------------------
    async def _list_prompts(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        await self.backend.wait_startup()
        return complete({"prompts": list(self.backend.router.snapshot.prompts_list)})

    async def _get_prompt(self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        route = self.backend.router.snapshot.prompts.get(params.name)
        if route is None:
            names = list(self.backend.router.snapshot.prompts)
            close = difflib.get_close_matches(params.name, names, n=SIMILAR_NAMES, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise MCPError(code=wire.INVALID_PARAMS, message=f"unknown prompt {params.name!r}{hint}")
        raw = dict(ctx.params or {})
        raw["name"] = route.original
        return await self._forward(route.server, "prompts/get", raw, ctx)

    async def _complete(self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> Any:
        raw = dict(ctx.params or {})
        ref = dict(raw.get("ref") or {})
        snapshot = self.backend.router.snapshot
        if ref.get("type") == "ref/prompt":
            route = snapshot.prompts.get(str(ref.get("name")))
            if route is None:
                raise MCPError(code=wire.INVALID_PARAMS, message=f"unknown prompt {ref.get('name')!r}")
            ref["name"] = route.original
            server = route.server
        else:
            uri = str(ref.get("uri", ""))
            server = snapshot.route_completion_ref(uri) or ""
            if not server:
                raise MCPError(code=wire.INVALID_PARAMS, message=f"no server serves the resource template {uri}")
        raw["ref"] = ref
        return await self._forward(server, "completion/complete", raw, ctx)

    # --- logging and roots ---------------------------------------------------------------
    async def _set_level(self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> Any:
        state = self.clients.track(ctx.session._connection)
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
