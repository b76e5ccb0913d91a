"""What an upstream sends while a call waits: routed to the caller, or to the right client.

Owns `MidCallRouting`, a base class of `mcpvisor.actors.link.base.Link`:

* progress to the caller (its own token restored), each one restarting the call's
  inactivity timeout (MCP: progress keeps a request alive; a late one is dropped);
* log messages to the 2026-07-28 client of the latest call that asked for them;
* sampling / elicitation / roots requests to the client whose call caused them (the
  latest call with an origin, else the actor's fallback), at most `MAX_SERVER_REQUESTS`
  at once; the calls of that client are not idle while it answers.

Separate from `mcpvisor.actors.link.base`, which sends requests and waits for their
answers (the pending table, ids, deadlines, cancels): this is the other direction, what
the upstream starts. A base class rather than an object the link holds, so the transports'
readers (`StdioLink.pump_stdout`) call it as the link's own methods, with no object in
between.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.eras import log_wanted
from mcpvisor.actors.errors import TooManyRequests, UpstreamError

if TYPE_CHECKING:
    from mcpvisor.actors.link.base import LinkEvents, Pending
    from mcpvisor.actors.link.ports import CallOrigin

logger = logging.getLogger(__name__)

MAX_SERVER_REQUESTS: Final = 64
"""Requests from one upstream to the clients (sampling, elicitation, roots) in flight at
once; one more is refused to the upstream at once with a JSON-RPC error. Each waits on a
person or a model, so a server with this many open questions is flooding, not working
(issue 23: 20,000 forwarded sampling requests grew the proxy by 300 MB); the same
number as the per-session cap on client requests (`mcpvisor.actors.fronts.limits.MAX_IN_FLIGHT`)."""


class MidCallRouting:
    """The upstream's side of a call in flight (`Link` sets these attributes)."""

    server: str
    events: LinkEvents
    _pending: dict[str, Pending]
    _server_requests: int

    def pick_origin(self, method: str) -> CallOrigin | None:
        """The client a mid-call server request goes to: the latest call with an origin.

        A ``roots/list`` asks about a client, not about a call (servers ask it when they
        start and when told the roots changed, whatever is in flight): a handshake-era
        caller that did not declare roots is passed over rather than have its call
        refused for a question that may not be its own, and with no caller left the
        question goes where one outside any call goes (a connected client that declared
        roots, else the "no connected client" error), as a client connected directly
        answers it and lets its call go on. A 2026-07-28 caller is still picked: its
        calls are the only way to ask it anything.
        """
        for p in reversed(self._pending.values()):
            origin = p.origin
            if origin is not None and (method != "roots/list" or origin.modern or _declares_roots(origin)):
                return origin
        return self.events.fallback_origin(method)

    def _touch(self, pending: Pending) -> None:
        """Activity on a call (progress, a mid-call request): restart its inactivity timeout."""
        deadline = min(trio.current_time() + pending.timeout, pending.hard_deadline)
        if pending.scope is not None:
            pending.scope.deadline = deadline
        elif pending.sink is not None:
            pending.deadline = deadline

    async def _progress(self, token: int | str, params: dict[str, Any]) -> None:
        pending = self._pending.get(token) if isinstance(token, str) else None
        if pending is None or (pending.done is not None and pending.done.is_set()):
            return  # MCP progress: MUST stop after completion; a late one is dropped
        self._touch(pending)
        origin = pending.origin
        if origin is not None and origin.progress_token is not None:
            params["progressToken"] = origin.progress_token
            try:
                await origin.progress(params)
            except Exception:
                logger.debug("dropped progress for %s: client gone", pending.proxy_id, exc_info=True)

    async def log_to_callers(self, params: dict[str, Any]) -> None:
        """An upstream's log message, for the 2026-07-28 client of the latest call in flight
        that asked for logs at its level: such a client gets logs only on a request's own
        stream (handshake-era clients get them by broadcast, `mcpvisor.actors.fronts.sdk`). The upstream
        does not say which call a log belongs to; the latest call is the same guess
        `pick_origin` makes for its questions."""
        level = params.get("level")
        for p in reversed(self._pending.values()):
            origin = p.origin
            if origin is not None and origin.modern and log_wanted(level, origin.log_level):
                try:
                    await origin.log(params)
                except Exception:
                    logger.debug("dropped a log message for %s: client gone", p.proxy_id, exc_info=True)
                return

    async def answer_server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Answer a request the upstream sends us by asking the right client.

        Raises:
            TooManyRequests: `MAX_SERVER_REQUESTS` of this upstream's requests already wait
                for a client (at once; the upstream gets it as a JSON-RPC error).
            ProxyError: no client can answer, or the client refused.
        """
        if method == "ping":
            return {}
        if self._server_requests >= MAX_SERVER_REQUESTS:
            raise TooManyRequests(
                f"mcpvisor: {MAX_SERVER_REQUESTS} requests from server {self.server} to the client are "
                f"already waiting for an answer; {method} refused",
                data={"server": self.server, "limit": MAX_SERVER_REQUESTS},
            )
        self._server_requests += 1
        try:
            return await self._ask_origin(method, params)
        finally:
            self._server_requests -= 1

    async def _ask_origin(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        origin = self.pick_origin(method)
        if origin is None:
            raise UpstreamError(wire.METHOD_NOT_FOUND, f"no connected client can answer {method}")
        for p in self._pending.values():
            if p.origin is origin:
                self._touch(p)  # a call waiting on the user is not idle
        result = await origin.server_request(method, params)
        for p in self._pending.values():
            if p.origin is origin:
                self._touch(p)
        return result


def _declares_roots(origin: CallOrigin) -> bool:
    """The caller declared the roots capability (or its capabilities are not known)."""
    caps = origin.client_capabilities
    return caps is None or caps.get("roots") is not None
