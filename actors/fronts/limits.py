"""Per-session limits on the network fronts: requests in flight on one connection.

Importing it loads no SDK (the HTTP front's own path reads `MAX_IN_FLIGHT` before the SDK
is needed).

Owns `InFlightLimit`, a `Server.middleware` entry of the SDK's server: it counts the
requests each client connection has in flight (in the connection's own ``state``
dict, so the count dies with the connection) and answers one over the cap at once
with a JSON-RPC error that says so, never by queueing it (issue 12: one client cannot
starve the others, and an over-limit request never hangs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from mcpvisor.actors import wire

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

MAX_IN_FLIGHT: Final = 64
"""Requests one session may have in flight (issue 12's default): far above what an
agent runs at once (docs/sdk.md §4 measures at concurrency 32), far below what would
let one client hold every upstream's attention."""

_STATE_KEY: Final = "mcpvisor.in_flight"


class InFlightLimit:
    """Refuse a request beyond ``limit`` in flight on its connection.

    Notifications are not counted (they have no answer to wait for). A stdio client
    served by the fast path bypasses the SDK and is not counted either: it is the one
    local client that launched the proxy.
    """

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self.limit = limit

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.request_id is None:
            return await call_next(ctx)
        from mcp.shared.exceptions import MCPError  # the SDK is loaded: its server called this

        from mcpvisor.actors.sdk_compat import connection_of

        state = connection_of(ctx.session).state
        count = state.get(_STATE_KEY, 0)
        if count >= self.limit:
            raise MCPError(
                code=wire.TOO_MANY_IN_FLIGHT,
                message=f"too many requests in flight on this session (limit {self.limit}); "
                "wait for some to finish",
                data={"error": "too_many_requests_in_flight", "limit": self.limit},
            )
        state[_STATE_KEY] = count + 1
        try:
            return await call_next(ctx)
        finally:
            state[_STATE_KEY] = state.get(_STATE_KEY, 1) - 1


def install(server: Any, limit: int = MAX_IN_FLIGHT) -> None:
    """Put an `InFlightLimit` first in ``server.middleware`` (once; later calls do nothing)."""
    if not any(isinstance(m, InFlightLimit) for m in server.middleware):
        server.middleware.insert(0, InFlightLimit(limit))
