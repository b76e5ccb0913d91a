"""Fast-path calls that wait for their server to finish starting (the stdio front).

A ``tools/call`` routed to a stdio server that is starting or restarting (a remembered tool
called while the proxy starts, a call during a restart) waits here for the server's link, as
the SDK's path waits (`mcpvisor.actors.upstream.calls.UpstreamCalls.wait_link`, bounded by
``restartWait``), then goes the fast way as soon as the server's handshake is done (its lists
may still be coming); if the server does not come up in time, the call is answered with the
error the SDK's path gives (the server down, when it tries next), and journaled as that path
journals it (waiting twice, here and there, would double ``restartWait``); a call that cannot
go the fast way once its server is up (the proxy began to drain) is handed to the SDK's path.
While a call waits, its id is the connection's (a reused id is refused), a client's cancel
ends it with no answer (MCP cancellation), the client leaving ends it, and the proxy's drain
answers it with the shutdown error. One task per waiting call, none once the server is up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.errors import ProxyError

if TYPE_CHECKING:
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

Route = Callable[[wire.Envelope, bytes], Awaitable[bool]]
"""Take a call the fast way now that its server is up (False: it cannot)."""
HandBack = Callable[[wire.Envelope, bytes], Awaitable[None]]
"""Give a call to the SDK's path."""
Refuse = Callable[[ProxyError], Awaitable[None]]
"""Answer a call whose server did not come up with the error the SDK's path gives."""


class WaitingCalls:
    """The calls of one stdio connection waiting for their server, by the client's id."""

    def __init__(self, nursery: trio.Nursery, route: Route, hand_back: HandBack | None,
                 send: Callable[[bytes], Awaitable[None]]) -> None:
        self._nursery = nursery
        self._route = route
        self._hand_back = hand_back
        self._send = send
        self.scopes: dict[int | str, trio.CancelScope] = {}
        """The waiting calls' scopes by the client's id (read, not changed, by the connection's
        duplicate-id check, which runs on every frame)."""

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.scopes

    def __len__(self) -> int:
        return len(self.scopes)

    def start(self, up: Upstream, env: wire.Envelope, line: bytes, refuse: Refuse) -> bool:
        """Wait for ``up`` on the client's behalf; False if this connection cannot (the call
        then takes the SDK's path at once)."""
        if self._hand_back is None:
            return False
        rid: Any = env.id
        scope = trio.CancelScope()
        self.scopes[rid] = scope
        self._nursery.start_soon(self._wait, up, env, line, refuse, scope)
        return True

    async def _wait(self, up: Upstream, env: wire.Envelope, line: bytes, refuse: Refuse,
                    scope: trio.CancelScope) -> None:
        rid: Any = env.id
        try:
            with scope:
                failure: ProxyError | None = None
                try:
                    await up.wait_link(early=True)
                except ProxyError as exc:
                    failure = exc  # down, or not back within restartWait: the same words as the SDK's path
                if self.scopes.get(rid) is not scope:
                    return
                del self.scopes[rid]
                if failure is not None:
                    await refuse(failure)
                elif not await self._route(env, line):
                    assert self._hand_back is not None
                    await self._hand_back(env, line)
        except Exception:
            # The front's crash barrier, for a call that left the reader: answered, logged.
            logger.exception("stdio front: failed to route a call that waited for its server")
            await self._send(wire.error_frame(rid, wire.INTERNAL_ERROR,
                                              "internal error while handling this request"))
        finally:
            if self.scopes.get(rid) is scope:
                del self.scopes[rid]

    def cancel(self, request_id: object) -> bool:
        """The client cancelled a waiting call: it ends, unanswered. False: not waiting here."""
        scope = self.scopes.pop(request_id, None)  # type: ignore[call-overload]
        if scope is None:
            return False
        scope.cancel()
        return True

    def drop_all(self) -> list[int | str]:
        """End every waiting call (the client left, or the proxy answers them itself); their ids."""
        ids = list(self.scopes)
        for scope in self.scopes.values():
            scope.cancel()
        self.scopes.clear()
        return ids
