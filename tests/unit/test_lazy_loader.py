"""`mcpvisor.actors.lazy.LazyLoader` over real upstream actors and fake servers, in virtual time.

A regression shows as: more than one start for concurrent loads, a load that hangs or
succeeds when the start failed, a failed server retried behind the caller's back (more
starts than loads), a fourth start after three failures, or a cancelled caller taking
the start down with it for the others.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from mcpvisor.actors.core.discovery import LazyBook
from mcpvisor.actors.lazy import LazyLoader, LoadFailed
from tests.fakes.harness import Harness, open_harness
from tests.fakes.links import FakeUpstream, HangsAtStartUpstream, NeverStartsUpstream, SlowStartUpstream

Clock = trio.testing.MockClock


def loader_of(h: Harness) -> LazyLoader:
    return LazyLoader(h.router, lambda: h.upstreams, LazyBook.of(dict.fromkeys(h.upstreams)))


async def test_ten_concurrent_loads_share_one_start(autojump_clock: Clock) -> None:
    slow = SlowStartUpstream(5.0)
    async with open_harness({"slow": slow}, knobs={"lazy": True}) as h:
        loader = loader_of(h)
        assert h.upstreams["slow"].state.value == "idle"
        mark = h.mark()
        results = []

        async def load() -> None:
            results.append(await loader.load("slow"))

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(load)
        assert len(results) == 10
        assert len(slow.starts) == 1
        assert h.exposed("slow")
        assert h.tool_announcements(mark) == 1
        again = await loader.load("slow")
        assert again.started is False
        assert len(slow.starts) == 1


async def test_three_failed_loads_then_no_more_starts(autojump_clock: Clock) -> None:
    broken = NeverStartsUpstream(status=3, stderr="fatal: no licence")
    async with open_harness({"broken": broken}, knobs={"lazy": True, "restart_delay": 1.0}) as h:
        loader = loader_of(h)
        for attempt in range(1, 4):
            with pytest.raises(LoadFailed, match="fatal: no licence") as info:
                await loader.load("broken")
            assert info.value.failures == attempt
            assert info.value.given_up is (attempt == 3)
            assert h.upstreams["broken"].state.value == "idle"  # not retried behind the caller
            assert len(broken.starts) == attempt
        await trio.sleep(3600)  # an hour later: still no start of its own
        assert len(broken.starts) == 3
        with pytest.raises(LoadFailed, match="no longer offered"):
            await loader.load("broken")
        assert len(broken.starts) == 3
        assert loader.not_loaded() == []


async def test_a_start_that_hangs_fails_at_the_startup_timeout(autojump_clock: Clock) -> None:
    knobs = {"lazy": True, "startup_timeout": 10.0}
    async with open_harness({"hang": HangsAtStartUpstream()}, knobs=knobs) as h:
        loader = loader_of(h)
        t0 = trio.current_time()
        with pytest.raises(LoadFailed, match="did not start within 10s"):
            await loader.load("hang")
        assert trio.current_time() - t0 == pytest.approx(10.0)


async def test_a_cancelled_caller_does_not_cancel_the_start(autojump_clock: Clock) -> None:
    slow = SlowStartUpstream(5.0)
    fakes = {"slow": slow, "other": FakeUpstream()}
    async with open_harness(fakes, per_server={"slow": {"lazy": True}}) as h:
        loader = loader_of(h)
        scopes: list[trio.CancelScope] = []
        outcomes: list[str] = []

        async def first() -> None:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                await loader.load("slow")  # the caller that starts it
                outcomes.append("first loaded")
            if scope.cancelled_caught:
                outcomes.append("first cancelled")

        async def second() -> None:
            await loader.load("slow")
            outcomes.append("second loaded")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await trio.sleep(1)
            nursery.start_soon(second)
            await trio.sleep(1)
            scopes[0].cancel()
        assert sorted(outcomes) == ["first cancelled", "second loaded"]
        assert len(slow.starts) == 1
        assert h.upstreams["slow"].state.value == "ready"
