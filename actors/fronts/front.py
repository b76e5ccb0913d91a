"""The client-facing front every transport serves: what it is without the SDK's server.

Owns `Front`, one per proxy, shared by every front connection:

* what the proxy answers a handshake with (`initialize_result`, `server_info_stamp`),
  from its own constants;
* the client registry (`mcpvisor.actors.fronts.clients`), the drain
  (`mcpvisor.actors.fronts.drain`), the fixed views (`mcpvisor.actors.fronts.views`) and
  the most verbose log level any client set;
* the broadcaster's entry points: list_changed, resources/updated and upstream log
  messages to every handshake-era client (each connection's queue in the client
  registry), never blocking the router;
* the middleware list of the SDK's server, which others may extend before it exists;
* the SDK's side (`mcpvisor.actors.fronts.sdk.SdkFront`: its `Server`, the handlers of
  every request the proxy does not answer itself, the 2026-07-28 listen streams,
  resource subscriptions and bridged calls), built the first time something needs it
  (`sdk`): a stdio connection's first message the SDK must serve, an HTTP or websocket
  front. Until then what only SDK-served clients can have is simply empty.

Importing this module loads no SDK: a stdio proxy whose clients only do what the stdio
front answers itself never pays the SDK's import time and memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import telemetry
from mcpvisor.actors.fronts.clients import ClientRegistry, level_ok
from mcpvisor.actors.fronts.drain import Drain
from mcpvisor.actors.fronts.views import ToolsetViews, view_name

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.server.lowlevel import Server
    from mcp.server.models import InitializationOptions
    from mcp.shared.message import SessionMessage

    from mcpvisor.actors.bridge import ParkedCalls
    from mcpvisor.actors.core.catalog import CacheHint, Snapshot
    from mcpvisor.actors.core.registry import Changes
    from mcpvisor.actors.fronts.backend import Backend
    from mcpvisor.actors.fronts.clients import ClientState
    from mcpvisor.actors.fronts.clients import Connection as ClientConnection
    from mcpvisor.actors.fronts.sdk import SdkFront
    from mcpvisor.actors.harness import ClientSession
    from mcpvisor.actors.link import CallOrigin

CAPABILITIES: Final = {
    "completions": {},
    "logging": {},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "tools": {"listChanged": True},
}
"""What the proxy announces in ``initialize``: it completes, takes a log level, and tells
every client of each change to its tools, resources and prompts (`Front.announce`), and
of each update to a resource it subscribed to. The SDK's server derives the same from
the handlers `mcpvisor.actors.fronts.sdk.SdkFront` registers (a unit test holds the two
equal)."""


def _in_view(name: str) -> Callable[[ClientState], bool]:
    return lambda state: state.view == name


class Front:
    """The proxy's client-facing side; the SDK's server behind it is built on first need."""

    def __init__(self, backend: Backend, *, name: str = "mcpvisor", version: str = "",
                 instructions: str | None = None) -> None:
        self.backend = backend
        self.name = name
        self.version = version
        self.instructions = instructions
        self.clients = ClientRegistry()
        self.drain = Drain()
        """Refuses new requests and answers those in flight when the proxy stops
        (`mcpvisor.actors.fronts.drain`)."""
        self.log_level: str | None = None
        """The most verbose level any client set; upstreams are asked for it (2026-07-28 ones
        per request, handshake-era ones with logging/setLevel, again after each restart)."""
        self.views: ToolsetViews | None = None
        """The fixed views (``/mcp/toolset/NAME``, toolset-bound tokens), once the supervisor
        sets them (`mcpvisor.actors.fronts.views`)."""
        self.clients.on_stall = self._disconnect
        # The SDK's default OpenTelemetry middleware costs ~6% per request and exports nothing
        # here; ours (`mcpvisor.actors.telemetry`) costs one check while tracing is off.
        # The drain comes first: a request refused at shutdown costs nothing further.
        self.middleware: list[Any] = [self.drain, telemetry.SdkMiddleware(self.toolset_name)]
        """The SDK server's middleware, in order. Its server adopts this very list when it is
        built (adding its own after these two), so an entry appended before then serves it too."""
        self.on_served: Callable[[str, float, float, BaseException | None], None] | None = None
        """Told of each request a front answers itself, without the SDK's server (the stdio
        front's handshake, pings and lists): its method, start and end (the metrics' timer,
        as the middleware above times what the SDK serves)."""
        self.nursery: trio.Nursery | None = None
        """Where the SDK's side runs the bridged calls, while `run` runs."""
        self._sdk: SdkFront | None = None

    # --- the SDK's side, on first need -----------------------------------------------
    @property
    def sdk(self) -> SdkFront:
        """The SDK's server and handlers, built (and the SDK imported) the first time they are asked for."""
        if self._sdk is None:
            from mcpvisor.actors.fronts.sdk import SdkFront

            self._sdk = SdkFront(self)
        return self._sdk

    @property
    def sdk_built(self) -> bool:
        """Whether anything has needed the SDK's server yet."""
        return self._sdk is not None

    @property
    def server(self) -> Server[Any]:
        """The SDK's server (built on first use)."""
        return self.sdk.server

    @property
    def init_options(self) -> InitializationOptions:
        """The SDK server's initialization options (built on first use)."""
        return self.sdk.init_options

    @property
    def parked(self) -> ParkedCalls:
        """The bridged calls waiting for their 2026-07-28 client's retry (built on first use)."""
        return self.sdk.bridged.parked

    async def serve_connection(self, read: MemoryObjectReceiveStream[SessionMessage | Exception],
                               write: MemoryObjectSendStream[SessionMessage], session: ClientSession) -> None:
        """Serve one client connection through the SDK's server as ``session``
        (`mcpvisor.actors.fronts.sdk.SdkFront.serve_connection`)."""
        await self.sdk.serve_connection(read, write, session)

    # --- the handshake ---------------------------------------------------------------
    @property
    def server_info_stamp(self) -> dict[str, Any]:
        """``serverInfo`` as the wire carries it (a fresh dict: callers own it)."""
        return {"name": self.name, "version": self.version}

    def initialize_result(self) -> dict[str, Any]:
        """What ``initialize`` answers, but its ``protocolVersion``: the capabilities,
        instructions and serverInfo, as the SDK's server sends them on the handshake era
        (the stdio front answers a handshake itself, `mcpvisor.actors.fronts.stdio_own`).
        A fresh dict each time: callers own it."""
        result: dict[str, Any] = {"capabilities": {key: dict(value) for key, value in CAPABILITIES.items()}}
        if self.instructions is not None:
            result["instructions"] = self.instructions
        result["serverInfo"] = self.server_info_stamp
        return result

    def hinted(self, result: dict[str, Any], kind: str) -> dict[str, Any]:
        """``result`` (a list of ``kind``: tools, resources, templates, prompts) with the caching
        directives the servers behind it sent (the shortest ``ttlMs``, ``private`` if any list
        was), when every server that lists something of that kind sent them. Otherwise it is
        left to the front's default (``ttlMs: 0``, private: a list made partly of a
        handshake-era server's, which says nothing, or of nothing, is not given a ttl nobody
        sent). A handshake-era client never sees either key."""
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

    def toolset_name(self, ctx: Any) -> str | None:
        """The toolset a request sees through: its fixed view's, else the equipped one (if any)."""
        name = view_name(ctx.request)
        if name is not None:
            return name
        equipped = getattr(getattr(self.backend.router.core, "exposure", None), "equipped", None)
        return getattr(equipped, "name", None)

    # --- the broadcaster ---------------------------------------------------------------
    def announce(self, snapshot: Snapshot, changes: Changes) -> None:
        """Tell every client which lists changed (called by the router; never blocks)."""
        views: tuple[str, ...] = ()
        if changes.tools:
            # A fixed view hears of tools only when its own list changed (equipping a
            # toolset changes the proxy's list, not a view's).
            self.clients.broadcast("notifications/tools/list_changed", only=lambda s: s.view is None)
        if (changes.tools or changes.catalog) and self.views is not None:
            views = tuple(self.views.changed())
            for name in views:
                self.clients.broadcast("notifications/tools/list_changed", only=_in_view(name))
        if changes.resources:
            self.clients.broadcast("notifications/resources/list_changed")
        if changes.prompts:
            self.clients.broadcast("notifications/prompts/list_changed")
        if self._sdk is not None:  # no listen stream exists before the SDK serves one
            self._sdk.publish(changes, views)

    def resource_updated(self, uri: str) -> None:
        # Only clients the SDK serves subscribe to resources (resources/subscribe,
        # subscriptions/listen): before it exists, nobody has.
        if self._sdk is not None:
            self._sdk.subscriptions.resource_updated(uri)

    def log_message(self, server: str, params: dict[str, Any]) -> None:
        out = dict(params)
        inner = out.get("logger")
        out["logger"] = f"{server}.{inner}" if inner else server
        level = out.get("level")
        wanted = level if isinstance(level, str) else None
        self.clients.broadcast("notifications/message", out, only=lambda s: level_ok(wanted, s.log_level))

    def fallback_origin(self, method: str) -> CallOrigin | None:
        state = self.clients.latest(method)
        if state is None:
            return None
        # The client is asked through the SDK's connection (started for it if need be).
        from mcpvisor.actors.fronts.origins import ConnectionOrigin

        return ConnectionOrigin(state)

    async def run(self, *, task_status: trio.TaskStatus[Front] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the broadcaster and the bridged calls (for the supervisor's lifetime)."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started(self)
                await self.clients.run()
        finally:
            self.nursery = None
            if self._sdk is not None:
                self._sdk.subscriptions.close()

    async def _disconnect(self, connection: ClientConnection) -> None:
        """End a connection whose outbox stalled (its calls are already cancelled): only
        the SDK's connections have outboxes."""
        if self._sdk is not None:
            await self._sdk.disconnect(connection)
