"""``tools/call`` on the shared (SDK) front: from the tool's name to the forwarded call.

Owns:

* `ToolCalls`: the route a called name takes — a routed server tool, a compound tool
  (checked, then exactly the direct call of its subtool), ``use_tool`` (discovery
  exposure; checked, then routed as the tool it names), a local management tool, or
  a lazy server's tool named before its server loaded (loaded on first use) — and the
  journal entry of each call;
* `unknown_tool_result`: the ``isError`` answer for a name nothing serves, with the
  closest names of the server it would belong to;
* a name not listed yet waits for its starting server, or fails naming its down one
  (`mcpvisor.actors.starting.await_listed`);
* `loader_of`: the lazy-server loader a backend has, if any.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import close_names
from mcpvisor.actors.core.discovery import USE_TOOL, lazy_owner
from mcpvisor.actors.core.pending import owner_of
from mcpvisor.actors.core.use_tool import CallLocal, NeedsLoad, plan_use
from mcpvisor.actors.eras import strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError, error_data
from mcpvisor.actors.fronts.origins import is_modern
from mcpvisor.actors.harness import ClientSession, run_label
from mcpvisor.actors.lazy import LazyLoader, LoadFailed
from mcpvisor.actors.starting import await_listed

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot, ToolRoute
    from mcpvisor.actors.fronts.sdk import Backend

Forward = Callable[..., Awaitable[dict[str, Any]]]
"""`Front._forward`: ``(server, method, params, ctx, *, retry_safe)`` to the owning upstream."""

SessionOf = Callable[[ServerRequestContext[Any, Any]], ClientSession | None]
"""`Front.session_of`: the client session a request belongs to (None: 2026-07-28, no connection)."""


def unknown_tool_result(name: str, snapshot: Snapshot, servers: Iterable[str] = ()) -> dict[str, Any]:
    """The ``isError`` result for a tool nothing serves.

    When the name is in a server's namespace (``servers``: the configured ones; default:
    those with a listed tool), only that server's names are suggested: a misspelt
    ``time_get_curent_time`` finds ``time_get_current_time``, and a tool ``slow`` lacks
    is never "corrected" to another server's. Otherwise the closest exposed names.
    """
    known = set(servers) or {route.server for route in snapshot.tools.values()}
    server = owner_of(name, known, snapshot.namespacing)
    names = snapshot.names_of(server) if server is not None else snapshot.exposed_names()
    close = close_names(name, names)
    text = f"Unknown tool {name!r}" + (f": server {server} has no such tool." if server is not None else ".")
    if close:
        text += " Did you mean: " + ", ".join(close) + "?"
    elif server is not None:
        text += f" It offers {len(names)} tools; list them with tools/list."
    elif names:
        text += f" {len(names)} tools are exposed; list them with tools/list."
    else:
        text += " No tools are exposed right now."
    data: dict[str, Any] = {"error": "unknown_tool", "tool": name, "didYouMean": close}
    if server is not None:
        data["server"] = server
    return wire.tool_error_result(text, data)


def unavailable_error(exc: ProxyError) -> MCPError:
    """The JSON-RPC error a request gets when the server it names cannot serve it now."""
    body = error_data(exc)
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))


def loader_of(backend: Backend) -> LazyLoader | None:
    """The backend's lazy-server loader (a backend without lazy servers has none)."""
    return getattr(backend, "loader", None)


class ToolCalls:
    """The front's ``tools/call`` handler and the lazy-load path it shares with ``use_tool``."""

    def __init__(self, backend: Backend, forward: Forward, session_of: SessionOf) -> None:
        self._backend = backend
        self._forward = forward
        self._session_of = session_of

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> Any:
        """The SDK's ``tools/call`` handler: route ``params.name`` and answer as its owner does."""
        snapshot = self._backend.router.snapshot
        name = params.name
        route = snapshot.tools.get(name)
        if route is None and name == USE_TOOL and not self._backend.started:
            await self._backend.wait_startup()  # the tool use_tool names may not be listed yet
            snapshot = self._backend.router.snapshot
        elif route is None and name not in snapshot.local_tools:
            # A client that calls before listing (it remembered the names, or its server is
            # still starting) waits for the tool's server; a down one is named, with why.
            try:
                snapshot = await await_listed(self._backend, lambda s: name in s.tools, name=name)
            except ProxyError as exc:
                raise unavailable_error(exc) from None
            route = snapshot.tools.get(name)
        if route is None and name == USE_TOOL and snapshot.discovery is not None:
            used = await self._use_tool(ctx, params.arguments)
            return strip_upstream_stamps(used, modern_front=is_modern(ctx))
        if route is None and name not in snapshot.local_tools:
            # A lazy server's tool, named before the server was loaded: load it (first use).
            failure = await self.load_owner(name)
            if failure is not None:
                return strip_upstream_stamps(failure, modern_front=is_modern(ctx))
            snapshot = self._backend.router.snapshot
            route = snapshot.tools.get(name)
        if route is None:
            if name in snapshot.local_tools:
                local = await self._backend.call_local_tool(name, dict(params.arguments or {}), ctx)
            else:
                local = unknown_tool_result(name, snapshot, self._backend.upstreams)
            return strip_upstream_stamps(local, modern_front=is_modern(ctx))
        raw = dict(ctx.params or {})
        return await self._call_route(route, raw, ctx)

    async def load_owner(self, name: str) -> dict[str, Any] | None:
        """Load the lazy server (not loaded yet) a tool named ``name`` would belong to.

        Returns None when there is none or it loaded; else the ``isError`` result saying why.
        """
        loader = loader_of(self._backend)
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
        plan = plan_use(self._backend.router.snapshot, arguments)
        if isinstance(plan, NeedsLoad):
            failure = await self.load_owner(plan.tool_name)
            if failure is not None:
                return failure
            plan = plan_use(self._backend.router.snapshot, arguments)
        if isinstance(plan, dict):
            return plan
        if isinstance(plan, CallLocal):
            return await self._backend.call_local_tool(plan.name, plan.arguments, ctx)
        if isinstance(plan, NeedsLoad):  # loaded, yet the tool is not there
            return unknown_tool_result(plan.tool_name, self._backend.router.snapshot)
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
            if isinstance(sub, dict) and not self._backend.started:
                # A subtool's server may not have listed yet: wait for start-up like a direct call.
                await self._backend.wait_startup()
                route = self._backend.router.snapshot.tools.get(route.exposed, route)
                sub = route.compound.prepare(raw.get("arguments") or {}) if route.compound else sub
            if isinstance(sub, dict):
                return strip_upstream_stamps(sub, modern_front=is_modern(ctx))
            server, original, retry_safe = sub.server, sub.tool, sub.retry_safe
            raw["arguments"] = sub.args
        raw["name"] = original
        started = trio.current_time()
        session = self._session_of(ctx)
        label = session.label if session is not None else None
        try:
            result = await self._forward(server, "tools/call", raw, ctx, retry_safe=retry_safe)
        except (MCPError, trio.Cancelled) as exc:
            self._backend.note_call(server, original, started, exc, session=label,
                                    run=run_label(ctx, session), arguments=raw.get("arguments"))
            raise
        if result.get("resultType") != "input_required":  # one journal entry per call, not per leg
            self._backend.note_call(server, original, started, None, session=label,
                                    run=run_label(ctx, session), arguments=raw.get("arguments"),
                                    result=result)
        return result
