"""The proxy's way out: every request in flight at a stop signal gets an answer.

Owns `Drain`, one per `mcpvisor.actors.fronts.front.Front` (so one per proxy), shared by every front
connection:

* while serving, it is a `Server.middleware` entry of the SDK's server (once a
  connection needed that server; importing this module loads no SDK): it knows every
  request the SDK serves on any front (each runs under a cancel scope it holds), and
  it knows each stdio connection's fast path, whose calls never reach the SDK;
* `Drain.run` (``mcpvisor serve`` calls it on SIGTERM/SIGINT): from then on a new
  request is refused at once with `ShuttingDown`; the requests in flight get
  ``grace`` seconds to finish with their own answer; each one still running then is
  answered with `ShuttingDown` (an SDK request is cancelled and this middleware
  answers it; a fast-path call is answered and cancelled upstream by its fast path);
  then `Drain.done` is set, and each front closes its connections once what they
  were given to write is written. The children stop afterwards, as on any exit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec
import trio

from mcpvisor.actors.errors import ShuttingDown, error_data

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.shared.exceptions import MCPError

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S: Final = 2.0
"""How long the requests in flight at a stop signal may take to finish with their own
answer: the same bound each stage of a child's stop sequence gets (close stdin, wait
2 s, SIGTERM, wait 2 s), so a stop costs at most this much more than it did."""

ANSWER_BOUND_S: Final = 1.0
"""After the grace, how long the shutdown errors get to reach the fronts' writers: the
MCP SDK's own bound on its shutdown error write (``_SHUTDOWN_WRITE_TIMEOUT``)."""

POLL_S: Final = 0.02
"""How often the drain counts what is left in flight. It runs once, at shutdown, and a
fast-path call has no task that could wake it when it ends."""

ADMITTED: Final = "mcpvisor.admitted"
"""The ASGI scope key the HTTP front's door (`mcpvisor.actors.fronts.fleet`) sets on a
request it let in before the drain began: that request is served, never refused here,
even when the drain begins while it is on its way to the SDK's server (the door alone
decides, on HTTP, what is new work; what it refused got a 503 a balancer retries)."""

UNWAITED_METHODS: Final = frozenset({"subscriptions/listen"})
"""Requests that stay open for the connection's lifetime by design (a 2026-07-28 client's
notification stream): never worth the grace, answered with the shutdown error at once."""


class FastCalls(Protocol):
    """A stdio connection's fast path as the drain sees it (`mcpvisor.actors.fronts.fastpath.FastPath`)."""

    def in_flight(self) -> int:
        """Calls waiting for their upstream's answer."""

    async def shut_down(self, error: ShuttingDown) -> None:
        """Answer every call in flight with ``error`` and cancel it upstream (bounded)."""


class DrainStatistics(msgspec.Struct, frozen=True):
    """What a drain found and did (for the log, tests and bench/)."""

    in_flight: int
    """Requests in flight when the drain began."""
    refused: int
    """New requests refused with the shutdown error since it began."""
    forced: int
    """Requests still running after the grace, answered with the shutdown error."""
    unanswered: int
    """Requests whose answer did not reach a writer within `ANSWER_BOUND_S` (0 unless a
    client or an upstream is wedged)."""


class Drain:
    """Refuse, wait, answer: the graceful end of every request in flight."""

    def __init__(self) -> None:
        self.draining = False
        """Set by `run`: new requests are refused from then on."""
        self.done = trio.Event()
        """Set by `run` once every request in flight has its answer on its way: the
        fronts close their connections then."""
        self._scopes: dict[trio.CancelScope, bool] = {}
        """Each SDK request running now -> whether the grace waits for it."""
        self._fast: set[FastCalls] = set()
        self._refused = 0

    # --- what the fronts tell it ---------------------------------------------------
    def add_fast_path(self, fast: FastCalls) -> None:
        self._fast.add(fast)

    def discard_fast_path(self, fast: FastCalls) -> None:
        self._fast.discard(fast)

    def in_flight(self, *, waited_only: bool = False) -> int:
        """Requests running now on every front (SDK ones and fast-path calls)."""
        sdk = sum(1 for waited in self._scopes.values() if waited) if waited_only else len(self._scopes)
        return sdk + sum(fast.in_flight() for fast in self._fast)

    @contextmanager
    def _tracked(self, waited: bool) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope()
        self._scopes[scope] = waited
        try:
            with scope:
                yield scope
        finally:
            del self._scopes[scope]

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """The SDK middleware: refuse a request while draining, else run it where `run`
        can answer it. Notifications pass untouched (they have no answer; a client's
        ``notifications/cancelled`` must still work during the grace)."""
        if ctx.request_id is None:
            return await call_next(ctx)
        if self.draining and not _admitted(ctx):
            self._refused += 1
            raise _shutting_down()
        with self._tracked(ctx.method not in UNWAITED_METHODS):
            return await call_next(ctx)
        # Only a cancel by `run` gets here (any other cancel goes on up through the scope).
        raise _shutting_down()

    # --- the way out -----------------------------------------------------------------
    async def run(self, grace: float = SHUTDOWN_GRACE_S) -> DrainStatistics:
        """Refuse new requests, give those in flight ``grace`` seconds, answer the rest
        with `ShuttingDown`, then set `done`. Idempotent: a second call only waits.

        Returns within about ``grace + ANSWER_BOUND_S`` plus the fast paths' bounded
        cancels. Cancelling it leaves the requests to their fronts (a second signal:
        stop now).
        """
        if self.draining:
            await self.done.wait()
            return DrainStatistics(0, self._refused, 0, 0)
        self.draining = True
        at_start = self.in_flight()
        logger.info("shutting down: new requests are refused; %d in flight get up to %gs to finish",
                    at_start, grace)
        with trio.move_on_after(grace):
            while self.in_flight(waited_only=True):  # noqa: ASYNC110 - see POLL_S
                await trio.sleep(POLL_S)
        forced = self.in_flight()
        error = ShuttingDown()
        for scope in list(self._scopes):
            scope.cancel(reason=error.message)
        for fast in list(self._fast):
            await fast.shut_down(error)
        with trio.move_on_after(ANSWER_BOUND_S):
            while self.in_flight():  # noqa: ASYNC110 - see POLL_S
                await trio.sleep(POLL_S)
        left = self.in_flight()
        if forced:
            logger.info("%d request(s) still running got the error %r", forced, error.message)
        if left:
            logger.warning("%d request(s) could not be answered before stopping", left)
        self.done.set()
        return DrainStatistics(at_start, self._refused, forced, left)


def _admitted(ctx: ServerRequestContext[Any, Any]) -> bool:
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return isinstance(scope, dict) and scope.get(ADMITTED) is True


def _shutting_down() -> MCPError:
    # Only the SDK's server calls the middleware: the SDK is loaded by then.
    from mcp.shared.exceptions import MCPError

    body = error_data(ShuttingDown())
    return MCPError(code=body["code"], message=body["message"], data=body.get("data"))
