"""`mcpvisor.actors.fronts.drain.Drain` on the trio clock: the grace, the forced answers, the refusals.

The end-to-end version (a real ``mcpvisor serve`` on each front, SIGTERM with 32 calls
in flight) is tests/chaos/test_chaos_shutdown.py; here the timing itself is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest
import trio
from mcp.shared.exceptions import MCPError

from mcpvisor.actors.errors import ShuttingDown
from mcpvisor.actors.fronts.drain import ANSWER_BOUND_S, SHUTDOWN_GRACE_S, Drain


@dataclass
class Ctx:
    """The two fields of an SDK request context the drain reads."""

    request_id: int | None
    method: str = "tools/call"


class SlowFastPath:
    """A fast path with one call in flight that only the shutdown ends."""

    def __init__(self) -> None:
        self.calls = 1
        self.answered: list[ShuttingDown] = []

    def in_flight(self) -> int:
        return self.calls

    async def shut_down(self, error: ShuttingDown) -> None:
        self.answered.append(error)
        self.calls = 0


async def handled(drain: Drain, ctx: Any, seconds: float, outcomes: dict[Any, Any]) -> None:
    """One request through the drain's middleware: its handler takes ``seconds``."""
    async def handler(ctx: Any) -> str:
        await trio.sleep(seconds)
        return "result"

    try:
        outcomes[ctx.request_id] = (await drain(ctx, handler), trio.current_time())
    except MCPError as exc:
        outcomes[ctx.request_id] = (exc, trio.current_time())


async def test_a_call_ending_within_the_grace_keeps_its_result_and_a_slow_one_gets_the_error_at_the_grace(
        autojump_clock: trio.testing.MockClock) -> None:
    """Calls in flight at the signal: one that ends after 1 s answers with its result;
    one that would take 100 s is answered with "mcpvisor is shutting down" at the grace
    (2 s), and so is a fast-path call; a request arriving during the grace is refused
    at once. A regression shows as a lost result, a late error, or a refused request
    that waited."""
    drain = Drain()
    fast = SlowFastPath()
    drain.add_fast_path(fast)
    outcomes: dict[Any, Any] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handled, drain, Ctx(1), 1.0, outcomes)
        nursery.start_soon(handled, drain, Ctx(2), 100.0, outcomes)
        nursery.start_soon(handled, drain, Ctx(3, "subscriptions/listen"), 1000.0, outcomes)
        await trio.testing.wait_all_tasks_blocked()
        assert drain.in_flight() == 4
        start = trio.current_time()

        async def late() -> None:
            await trio.sleep(0.5)
            await handled(drain, Ctx(4), 0.0, outcomes)

        nursery.start_soon(late)
        stats = await drain.run()
    assert drain.done.is_set()
    assert outcomes[1] == ("result", start + 1.0)
    for rid in (2, 3):
        error, at = outcomes[rid]
        assert isinstance(error, MCPError)
        assert error.error.message == "mcpvisor is shutting down"
        assert at == start + SHUTDOWN_GRACE_S
    refused, at = outcomes[4]
    assert isinstance(refused, MCPError)
    assert refused.error.message == "mcpvisor is shutting down"
    assert at == start + 0.5
    assert [e.message for e in fast.answered] == ["mcpvisor is shutting down"]
    assert (stats.in_flight, stats.refused, stats.forced, stats.unanswered) == (4, 1, 3, 0)


async def test_with_nothing_in_flight_the_drain_is_done_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    """No request in flight: no grace is spent (the stop costs nothing more than before)."""
    drain = Drain()
    start = trio.current_time()
    await drain.run()
    assert drain.done.is_set()
    assert trio.current_time() == start


async def test_a_request_that_ignores_the_cancel_is_counted_unanswered_and_the_drain_still_ends(
        autojump_clock: trio.testing.MockClock) -> None:
    """A handler stuck in a shielded wait cannot hold the shutdown: the drain gives up on
    it ``ANSWER_BOUND_S`` after the grace and reports it."""
    drain = Drain()

    async def stuck(ctx: Ctx) -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(1000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, cast(Any, Ctx(1)), stuck)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        stats = await drain.run()
        assert trio.current_time() == pytest.approx(start + SHUTDOWN_GRACE_S + ANSWER_BOUND_S, abs=0.05)
        assert stats.unanswered == 1
        nursery.cancel_scope.cancel()


@dataclass
class HttpRequest:
    scope: dict[str, Any]


@dataclass
class HttpCtx(Ctx):
    """A request the HTTP front carried: its ASGI scope rides on ``ctx.request``."""

    request: HttpRequest | None = None


async def test_a_request_the_http_door_let_in_before_the_drain_is_served_not_refused(
        autojump_clock: trio.abc.Clock) -> None:
    """On HTTP the door decides what is new work (it answers 503, which a balancer retries);
    a request it admitted that reaches the SDK after the drain began is served."""
    from mcpvisor.actors.fronts.drain import ADMITTED

    drain = Drain()
    outcomes: dict[Any, Any] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain.run)
        await trio.sleep(0.001)  # the drain has begun
        assert drain.draining
        nursery.start_soon(handled, drain, HttpCtx(1, request=HttpRequest({ADMITTED: True})), 0.5, outcomes)
        nursery.start_soon(handled, drain, HttpCtx(2, request=HttpRequest({})), 0.5, outcomes)
    assert outcomes[1][0] == "result"
    assert isinstance(outcomes[2][0], MCPError)
