"""The SDK's side of the client-facing front: one SDK `Server` shared by every connection it serves.

Built by `mcpvisor.actors.fronts.front.Front` the first time something needs the SDK (a
stdio connection's first message the proxy does not answer itself, an HTTP or websocket
front), and from then on serving exactly as if it had always been there. Owns:

* `SdkFront`: the request handlers (resources, prompts, completion, logging; tools/call
  is `mcpvisor.actors.fronts.tools`): each reads the router's current snapshot and forwards to
  the owning upstream actor;
* the 2026-07-28 clients' side of the broadcaster: the `subscriptions/listen` buses
  (`SdkFront.publish`, told by `Front.announce`), resource subscriptions
  (`mcpvisor.actors.fronts.subscriptions`);
* the bridged calls of 2026-07-28 clients to handshake-era upstreams, handed to
  `mcpvisor.actors.fronts.bridged`;
* the client session of each request (`session_of`): one per handshake-era connection;
  a transport serving its connection itself (`serve_connection`, the stdio front) hands
  its own session over, so its fast path and the SDK reach the same session-scoped
  instances;
* `ProxyServer`, the SDK server whose default options announce what the proxy does
  (`Backend`, what the front needs from the supervisor, is `mcpvisor.actors.fronts.backend`'s).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.server.caching import CACHEABLE_METHODS
from mcp.server.caching import CacheHint as SdkCacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPError

from mcpvisor.actors import wire
from mcpvisor.actors.bridge import request_state_of
from mcpvisor.actors.core.catalog import PromptRoute, Snapshot, close_names
from mcpvisor.actors.core.pending import owner_of
from mcpvisor.actors.eras import LOG_LEVELS, complete, is_modern_version, strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.fronts.backend import Backend
from mcpvisor.actors.fronts.bridged import BridgedCalls, to_mcp_error
from mcpvisor.actors.fronts.clients import CLIENT_SEND_TIMEOUT_S
from mcpvisor.actors.fronts.clients import Connection as ClientConnection
from mcpvisor.actors.fronts.origins import SdkOrigin, is_modern
from mcpvisor.actors.fronts.plans import View, loader_of
from mcpvisor.actors.fronts.subscriptions import Subscriptions
from mcpvisor.actors.fronts.tools import ToolCalls
from mcpvisor.actors.fronts.views import NamedView, ViewRefused, view_name
from mcpvisor.actors.harness import ClientSession, sdk_session
from mcpvisor.actors.lazy import LoadFailed
from mcpvisor.actors.link.input_required import INPUT_REQUIRED_METHODS
from mcpvisor.actors.sdk_compat import (
    connection_of,
    http_session_transport,
    maybe_connection_of,
    serve_dual_era_loop,
)
from mcpvisor.actors.starting import await_listed
from mcpvisor.actors.upstream import Upstream

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

    from mcpvisor.actors.core.registry import Changes
    from mcpvisor.actors.fronts.front import Front

__all__ = ["Backend", "ProxyServer", "SdkFront"]

logger = logging.getLogger(__name__)


CLIENT_STALLED: Final = ("mcpvisor disconnected this client: it read nothing for 10 s, "
                         "so its calls were cancelled")
"""The error a stalled client's calls end with (`mcpvisor.actors.fronts.outbox.CLIENT_STALL_S`), should it
read again."""

DISCONNECT_S: Final = 5.0
"""Bound on terminating a stalled client's HTTP session (closing in-memory streams: instant)."""

FRONT_MIDDLEWARE: Final = 2
"""The front's own middleware entries (the drain, tracing): the server's own come after them."""

PROXY_NOTIFICATIONS: Final = NotificationOptions(
    prompts_changed=True, resources_changed=True, tools_changed=True
)
"""What the proxy announces on the handshake era: the router broadcasts every tools,
resources and prompts change to every client (`Front.announce`)."""


class ProxyServer(Server[Any]):
    """The SDK `Server` whose default initialization options say what the proxy does.

    The stdio and websocket fronts pass `SdkFront.init_options` to ``run``, but the SDK's
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


class SdkFront:
    """The SDK's server of a `Front`, whose handlers route through the router's snapshot."""

    def __init__(self, front: Front) -> None:
        self.front = front
        backend = self.backend = front.backend
        self.clients = front.clients
        self.bridged = BridgedCalls(self.clients)
        """2026-07-28 clients' calls to handshake-era upstreams (`mcpvisor.actors.fronts.bridged`)."""
        self._sessions: dict[str, ClientSession] = {}
        """Sessions transports made for the connections they serve (`serve_connection`),
        by the session id the SDK's loop was given."""
        self.subscriptions = Subscriptions(backend, self.clients, forward=self._forward,
                                           upstream=self._upstream, owner=self._resource_owner)
        """Resource subscriptions and listen streams (`mcpvisor.actors.fronts.subscriptions`)."""
        self.tools = ToolCalls(backend, self._forward, self.session_of, self.view_of)
        """``tools/call``, ``use_tool`` and loading a lazy tool's server (`mcpvisor.actors.fronts.tools`)."""
        self.server: Server[Any] = ProxyServer(
            front.name,
            version=front.version,
            instructions=front.instructions,
            on_list_tools=self._list_tools,  # type: ignore[arg-type]  # see _list_tools
            on_call_tool=self.tools.call_tool,
            on_list_resources=self._list_resources,  # type: ignore[arg-type]  # see _list_tools
            on_list_resource_templates=self._list_templates,  # type: ignore[arg-type]  # see _list_tools
            on_read_resource=self._read_resource,
            on_subscribe_resource=self.subscriptions.subscribe,
            on_unsubscribe_resource=self.subscriptions.unsubscribe,
            on_list_prompts=self._list_prompts,  # type: ignore[arg-type]  # see _list_tools
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_subscriptions_listen=self.subscriptions.listen_in_view,
            # 2026-07-28 list results carry freshness hints: a list passes on what its
            # servers sent (`Front.hinted`); where they sent none, clients may cache nothing
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
        # The front's list (the drain, then tracing; whatever others appended after them),
        # adopted as it is: an entry appended later serves this server too. Tracking the
        # connection comes right after the front's own two, as it always has.
        front.middleware.insert(FRONT_MIDDLEWARE, self._track_middleware)
        self.server.middleware = front.middleware
        self.init_options = self.server.create_initialization_options()

    # --- what the front hands over ---------------------------------------------------
    def publish(self, changes: Changes, views: Sequence[str]) -> None:
        """The list changes `Front.announce` told the handshake-era clients, on the listen
        streams: tools on the proxy's bus and on each changed view's own, resources and
        prompts on every bus."""
        subscriptions = self.subscriptions
        if changes.tools:
            subscriptions.publish_nowait(ToolsListChanged(), subscriptions.bus)
        for name in views:
            bus = subscriptions.view_bus(name)
            if bus is not None:
                subscriptions.publish_nowait(ToolsListChanged(), bus)
        if changes.resources:
            subscriptions.publish_nowait(ResourcesListChanged())
        if changes.prompts:
            subscriptions.publish_nowait(PromptsListChanged())

    # --- plumbing --------------------------------------------------------------------
    async def _track_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if not is_modern_version(ctx.protocol_version):
            self.clients.track(connection_of(ctx.session)).view = view_name(ctx.request)
        return await call_next(ctx)

    async def _initialized(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        self.clients.track(connection_of(ctx.session)).view = view_name(ctx.request)

    def view_of(self, ctx: ServerRequestContext[Any, Any]) -> View:
        """Where a request reads what it sees: its fixed view (`mcpvisor.actors.fronts.views`),
        else the router's snapshot."""
        name = view_name(ctx.request)
        views = self.front.views
        if name is None or views is None:
            return self.backend.router
        return NamedView(views, name)

    def _snapshot_of(self, ctx: ServerRequestContext[Any, Any]) -> Snapshot:
        try:
            return self.view_of(ctx).snapshot
        except ViewRefused as refused:  # the toolset was deleted while its client was connected
            raise MCPError(code=wire.INVALID_PARAMS, message=refused.message,
                           data={"toolsets": list(refused.toolsets)}) from None

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
                return await self.bridged.resume(token, params, ctx)
            up = self._upstream(server)
            nursery = self.front.nursery
            if nursery is not None and (up.link is None or not up.link.modern):
                return await self.bridged.forward(nursery, up, method, params, ctx,
                                                  retry_safe=retry_safe)
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

    async def disconnect(self, connection: ClientConnection) -> None:
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

    # --- tools -------------------------------------------------------------------------
    # The list handlers answer with plain dicts: the SDK types ``on_list_*`` as returning its
    # result models, but its runner takes any ``HandlerResult`` (model, dict or None,
    # ``mcp.server.runner._dump_result``), and a dict skips a pydantic round trip per list.
    # None of them waits for start-up: a client is answered at once with what is known (the
    # servers that are up, the remembered lists of those starting); the rest arrive with
    # list_changed. Claude Code gives up on a server whose first tools/list takes over ~5 s.
    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return self.front.hinted(complete({"tools": list(self._snapshot_of(ctx).tools_list)}), "tools")

    # --- resources ---------------------------------------------------------------------
    async def _list_resources(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return self.front.hinted(complete({"resources": list(self.backend.router.snapshot.resources_list)}),
                            "resources")

    async def _list_templates(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        templates = list(self.backend.router.snapshot.templates_list)
        return self.front.hinted(complete({"resourceTemplates": templates}), "templates")

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

    # --- prompts and completion ----------------------------------------------------------
    async def _list_prompts(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        prompts = list(self.backend.router.snapshot.prompts_list)
        return self.front.hinted(complete({"prompts": prompts}), "prompts")

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
        self.front.log_level = lowest
        for up in self.backend.upstreams.values():
            caps = up.link.capabilities if up.link is not None else None
            if caps is not None and caps.get("logging") is not None and not up.link.modern:  # type: ignore[union-attr]
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
