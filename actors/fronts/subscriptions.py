"""Resource subscriptions and the 2026-07-28 listen streams of the shared SDK front.

Owns, for `mcpvisor.actors.fronts.sdk.SdkFront` (built when a connection first needs the SDK):

* ``resources/subscribe`` and ``resources/unsubscribe`` of handshake-era connections,
  counted per server and URI: the first subscriber subscribes upstream (handshake era:
  ``resources/subscribe``; 2026-07-28: the upstream's listen stream), the last one to
  leave (or whose connection closes) unsubscribes, bounded;
* ``subscriptions/listen``: the SDK's stream of list changes and resource updates, on the
  proxy's bus or on a fixed view's own (its tools changes are its own); the resources a
  stream names are held upstream for as long as it lasts;
* publishing to those buses without ever making the router wait.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.fronts.clients import CLIENT_SEND_TIMEOUT_S, ClientRegistry, ClientState
from mcpvisor.actors.fronts.views import view_name
from mcpvisor.actors.sdk_compat import bus_listeners, connection_of

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.sdk import Backend
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

MAX_LISTEN_URIS: Final = 1024
"""Resources one ``subscriptions/listen`` stream may have subscribed upstream (bounded memory;
the SDK's own bound on streams is the same number)."""

Forward = Callable[[str, str, "Mapping[str, Any] | None", ServerRequestContext[Any, Any]],
                   Awaitable[dict[str, Any]]]
"""The front's forwarding of one request to a server (`SdkFront._forward`)."""


class Subscriptions:
    """Who is subscribed to what, upstream and on the listen buses."""

    def __init__(self, backend: Backend, clients: ClientRegistry, *, forward: Forward,
                 upstream: Callable[[str], Upstream], owner: Callable[[str], str]) -> None:
        self._backend = backend
        self._clients = clients
        self._forward = forward
        self._upstream = upstream
        self._owner = owner
        self.bus = InMemorySubscriptionBus()
        """The proxy's ``subscriptions/listen`` bus."""
        self._listen_handler = ListenHandler(self.bus)
        self._subscribers: dict[str, int] = {}
        self._view_listens: dict[str, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        """Each view's own ``subscriptions/listen`` bus: its tools list changes are its own."""

    def view_bus(self, name: str) -> InMemorySubscriptionBus | None:
        """The listen bus of fixed view ``name``, if one of its clients ever listened."""
        listen = self._view_listens.get(name)
        return listen[0] if listen is not None else None

    def publish_nowait(self, event: Any, bus: InMemorySubscriptionBus | None = None) -> None:
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

    def resource_updated(self, uri: str) -> None:
        self._clients.broadcast("notifications/resources/updated", {"uri": uri},
                                only=lambda s: uri in s.subscriptions)
        self.publish_nowait(ResourceUpdated(uri))

    def close(self) -> None:
        """End every listen stream (the front is stopping)."""
        self._listen_handler.close()
        for _, handler in self._view_listens.values():
            handler.close()

    async def listen_in_view(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        """``subscriptions/listen``: on the proxy's bus, or on the request's view's own."""
        name = view_name(ctx.request)
        if name is None:
            return await self._listen(ctx, params)
        listen = self._view_listens.get(name)
        if listen is None:
            bus = InMemorySubscriptionBus()
            listen = self._view_listens[name] = (bus, ListenHandler(bus))
        return await self._listen(ctx, params, listen[1])

    async def subscribe(self, ctx: ServerRequestContext[Any, Any],
                        params: types.SubscribeRequestParams) -> Any:
        uri = str(params.uri)
        server = self._owner(uri)
        state = self._clients.track(connection_of(ctx.session))
        if uri in state.subscriptions:
            return {}
        await self._hold(server, uri, ctx)
        state.subscriptions.add(uri)
        connection_of(ctx.session).exit_stack.push_async_callback(self._drop_subscription, state, server, uri)
        return {}

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any],
                          params: types.UnsubscribeRequestParams) -> Any:
        uri = str(params.uri)
        state = self._clients.track(connection_of(ctx.session))
        server = self._backend.router.snapshot.route_resource(uri)
        if server is not None:
            await self._drop_subscription(state, server, uri)
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
                server = self._backend.router.snapshot.route_resource(str(uri))
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
        up = self._backend.upstreams.get(server)
        if up is not None and up.link is not None and up.link.modern:
            up.listen_to(uri, False)
        elif up is not None and up.link is not None:
            with trio.move_on_after(CLIENT_SEND_TIMEOUT_S):
                try:
                    await up.request("resources/unsubscribe", {"uri": uri})
                except ProxyError:
                    pass
