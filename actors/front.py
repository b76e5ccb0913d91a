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
  whose call caused them.
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
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError, NoBackChannelError

from actors import wire
from actors.core.catalog import Snapshot
from actors.core.registry import Changes
from actors.eras import complete, is_modern_version, strip_upstream_stamps
from actors.errors import BridgeUnsupported, ProxyError, UpstreamError, error_data
from actors.harness import ClientSession, run_label, sdk_session
from actors.link import CallOrigin
from actors.router import Router
from actors.upstream import Upstream

logger = logging.getLogger(__name__)

CLIENT_QUEUE: Final = 256
"""Notifications queued for one client before duplicates are coalesced (a stuck client
costs bounded memory; RELIABILITY R6)."""

CLIENT_SEND_TIMEOUT_S: Final = 5.0
"""A client that cannot take a notification in this long is skipped for that one."""

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
    closed: bool = False

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

    progress_token = None
    modern = False

    def __init__(self, state: ClientState) -> None:
        self._state = state

    async def progress(self, params: dict[str, Any]) -> None:
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
        self._registry = registry

    async def progress(self, params: dict[str, Any]) -> None:
        await self.ctx.session._request_outbound.notify("notifications/progress", params)

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        ctx = self.ctx
        if is_modern_version(ctx.protocol_version):
            raise BridgeUnsupported(
                f"the client speaks MCP {ctx.protocol_version}, which has no server-to-client requests; "
                f"{method} from a handshake-era server cannot be forwarded to it yet"
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


class ClientRegistry:
    """Live handshake-era connections, and the per-client notification queues."""

    def __init__(self) -> None:
        self._clients: dict[int, ClientState] = {}
        self._wake = trio.Event()

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
        state.last_active = trio.current_time()
        return state

    def _forget(self, connection: Connection) -> None:
        state = self._clients.pop(id(connection), None)
        if state is not None:
            state.closed = True

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
        self._wake.set()

    def broadcast(self, method: str, params: dict[str, Any] | None = None,
                  only: Callable[[ClientState], bool] | None = None) -> None:
        for state in self._clients.values():
            if only is None or only(state):
                self.enqueue(state, method, params)

    async def run(self) -> None:
        """Deliver queued notifications; each client in order, none waits on another."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            for state in list(self._clients.values()):
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


class Front:
    """Builds the SDK server whose handlers route through the router's snapshot."""

    def __init__(self, backend: Backend, *, name: str = "mcpvisor", version: str = "",
                 instructions: str | None = None) -> None:
        self.backend = backend
        self.clients = ClientRegistry()
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._subscribers: dict[str, int] = {}
        self.log_level: str | None = None
        """The most verbose level any client set; upstreams are asked for it (2026-07-28 ones
        per request, handshake-era ones with logging/setLevel, again after each restart)."""
        self.server: Server[Any] = Server(
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
        self.init_options = self.server.create_initialization_options(
            NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
        )

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
        """Run the broadcaster (for the supervisor's lifetime)."""
        task_status.started(self)
        try:
            await self.clients.run()
        finally:
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
        try:
            result = await self._upstream(server, ctx).request(
                method, params, origin=SdkOrigin(ctx, self.clients), retry_safe=retry_safe
            )
        except ProxyError as exc:
            raise to_mcp_error(exc) from None
        return strip_upstream_stamps(result, modern_front=is_modern(ctx))

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
        if route is None:
            if name in snapshot.local_tools:
                local = await self.backend.call_local_tool(name, dict(params.arguments or {}), ctx)
            else:
                local = unknown_tool_result(name, snapshot)
            return strip_upstream_stamps(local, modern_front=is_modern(ctx))
        raw = dict(ctx.params or {})
        raw["name"] = route.original
        started = trio.current_time()
        session = sdk_session(ctx, is_modern(ctx))
        label = session.label if session is not None else None
        try:
            result = await self._forward(route.server, "tools/call", raw, ctx, retry_safe=route.retry_safe)
        except (MCPError, trio.Cancelled) as exc:
            self.backend.note_call(route.server, route.original, started, exc, session=label,
                                   run=run_label(ctx, session), arguments=raw.get("arguments"))
            raise
        self.backend.note_call(route.server, route.original, started, None, session=label,
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
            server = snapshot.route_resource(uri.split("{", 1)[0]) or ""
            if not server:
                for prefix, owner in snapshot.templates:
                    if uri.startswith(prefix):
                        server = owner
                        break
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
