"""The bridged calls of 2026-07-28 clients to handshake-era upstreams, on the shared SDK front.

Such a call runs beside the client's legs, parked under its ``requestState``
(`mcpvisor.actors.bridge`): the upstream's questions (sampling, elicitation, roots)
become the leg's ``input_required`` answer; the client's retry with the answers resumes
the waiting upstream (`mcpvisor.actors.fronts.origins.BridgedOrigin` carries each leg's
progress and questions). A leg the client cancels, or leaves, cancels the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcpvisor.actors import wire
from mcpvisor.actors.bridge import ParkedCall, ParkedCalls, run_parked
from mcpvisor.actors.eras import strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError, error_data
from mcpvisor.actors.fronts.clients import ClientRegistry
from mcpvisor.actors.fronts.origins import BridgedOrigin
from mcpvisor.actors.sdk_compat import connection_of

if TYPE_CHECKING:
    from mcpvisor.actors.upstream import Upstream


def to_mcp_error(exc: ProxyError) -> MCPError:
    body = error_data(exc)
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))


class BridgedCalls:
    """The parked calls of a front and the origin each one's legs speak through."""

    def __init__(self, clients: ClientRegistry) -> None:
        self._clients = clients
        self.parked = ParkedCalls()
        """Calls of 2026-07-28 clients waiting for their retry with the answers (`mcpvisor.actors.bridge`)."""
        self._origins: dict[ParkedCall, BridgedOrigin] = {}

    async def forward(self, nursery: trio.Nursery, up: Upstream, method: str,
                      params: Mapping[str, Any] | None, ctx: ServerRequestContext[Any, Any], *,
                      retry_safe: bool) -> dict[str, Any]:
        """A 2026-07-28 client's request to a handshake-era upstream: run it beside the
        client's leg, so the upstream's questions can become ``input_required`` legs."""
        parked = self.parked.open((params or {}).get("inputResponses"))
        origin = BridgedOrigin(ctx, self._clients, parked)
        self._origins[parked] = origin

        async def forward() -> dict[str, Any]:
            result = await up.request(method, params, origin=origin, retry_safe=retry_safe)
            return strip_upstream_stamps(result, modern_front=True)

        def forget() -> None:
            self.parked.close(parked)
            self._origins.pop(parked, None)

        await nursery.start(run_parked, parked, forward, forget)
        return await self._leg(parked, origin)

    async def resume(self, token: str, params: Mapping[str, Any] | None,
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
        box = self._clients.outbox(connection_of(origin.ctx.session))
        if box is not None and origin.last_queued:
            await box.wait_sent(origin.last_queued)
        if isinstance(leg, ProxyError):
            raise to_mcp_error(leg)
        return leg
