"""``tools/call`` on the shared SDK front (built when a connection first needs the SDK).

Owns:

* `ToolCalls`: the front's execution of a call's plan (settled by
  `mcpvisor.actors.fronts.plans.settle`): a route forwarded to its upstream (the
  connection's own instance of a session-scoped server), a compound tool's or
  ``use_tool``'s direct call, a local management tool, a refusal; and the journal entry
  of each forwarded call;
* `unavailable_error`: the JSON-RPC error for a name whose server is down (a name not
  listed yet waits for its starting server first: `mcpvisor.actors.starting.await_listed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import ToolRoute
from mcpvisor.actors.core.plan import CallLocal, CallRoute, Refused
from mcpvisor.actors.eras import strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError, error_data
from mcpvisor.actors.fronts.origins import is_modern
from mcpvisor.actors.fronts.plans import View, settle
from mcpvisor.actors.fronts.views import ViewRefused
from mcpvisor.actors.harness import ClientSession, run_label

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.backend import Backend

Forward = Callable[..., Awaitable[dict[str, Any]]]
"""`SdkFront._forward`: ``(server, method, params, ctx, *, retry_safe)`` to the owning upstream."""

SessionOf = Callable[[ServerRequestContext[Any, Any]], ClientSession | None]
"""`SdkFront.session_of`: the client session a request belongs to (None: 2026-07-28, no connection)."""

ViewOf = Callable[[ServerRequestContext[Any, Any]], View]
"""`SdkFront.view_of`: where a request reads what it sees (its fixed view, or the router)."""


def unavailable_error(exc: ProxyError) -> MCPError:
    """The JSON-RPC error a request gets when the server it names cannot serve it now."""
    body = error_data(exc)
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))


class ToolCalls:
    """The front's ``tools/call`` handler: executes the call's plan (`mcpvisor.actors.core.plan`)."""

    def __init__(self, backend: Backend, forward: Forward, session_of: SessionOf,
                 view_of: ViewOf | None = None) -> None:
        self._backend = backend
        self._forward = forward
        self._session_of = session_of
        self._view_of = view_of

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> Any:
        """The SDK's ``tools/call`` handler: route ``params.name`` and answer as its owner does."""
        backend = self._backend
        view: View = self._view_of(ctx) if self._view_of is not None else backend.router
        try:
            plan = await settle(backend, view, params.name, params.arguments)
        except ProxyError as exc:
            raise unavailable_error(exc) from None
        except ViewRefused as refused:  # the view's toolset was deleted
            return wire.tool_error_result(refused.message, {"error": "unknown_toolset",
                                                            "toolsets": list(refused.toolsets)})
        if isinstance(plan, Refused):
            return strip_upstream_stamps(plan.result, modern_front=is_modern(ctx))
        if isinstance(plan, CallLocal):
            if view is backend.router:
                local = await backend.call_local_tool(plan.name, plan.arguments, ctx)
            else:  # a view's own discover_tool, use_tool, load_mcp (it lists no management tool)
                local = await backend.call_local_tool(plan.name, plan.arguments, ctx, snapshot=view.snapshot)
            return strip_upstream_stamps(local, modern_front=is_modern(ctx))
        raw = dict(ctx.params or {})  # the client's params: unknown keys travel as they came
        if isinstance(plan, CallRoute):  # a compound tool's subtool, or the tool use_tool names
            route = plan.route
            raw["arguments"] = plan.arguments
        else:
            route = plan
        return await self._call_route(route, raw, ctx)

    async def _call_route(self, route: ToolRoute, raw: dict[str, Any],
                          ctx: ServerRequestContext[Any, Any]) -> Any:
        """Forward ``raw`` (the client's tools/call params) as the call of upstream tool
        ``route`` (same forwarding, progress, cancellation, timeouts and retries for a
        direct call, a compound tool's subtool and ``use_tool``'s tool) and journal it."""
        server, original, retry_safe = route.server, route.original, route.retry_safe
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
