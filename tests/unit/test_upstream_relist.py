"""Re-listing on a cadence a server that cannot announce list changes (issue 14).

A server without ``listChanged`` (or a 2026-07-28 one without a listen stream) is
re-listed every ``relistInterval``; clients get ``list_changed`` only when a list really
changed, and a server that does announce is never polled. Virtual time (`autojump_clock`)
with the fake upstreams of `tests.fakes.links`. A regression shows as a new tool that
never appears, a ``list_changed`` every interval, or needless ``tools/list`` traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types
import trio
import trio.testing

from mcpvisor.actors import wire
from mcpvisor.actors.errors import UpstreamError
from tests.fakes.harness import open_harness
from tests.fakes.links import FakeUpstream, QuietToolsUpstream, tool

Clock = trio.testing.MockClock

RELIST_S = 10.0


async def test_a_quiet_server_is_relisted_and_clients_hear_only_real_changes(autojump_clock: Clock) -> None:
    quiet = QuietToolsUpstream()
    async with open_harness({"q": quiet}, knobs={"relist_interval": RELIST_S}) as h:
        await h.wait_state("q", "ready")
        mark, started = h.mark(), trio.current_time()
        await trio.sleep(3.5 * RELIST_S)
        # Three re-listings found nothing new: no announcement.
        assert [t - started for t in quiet.listings[1:]] == [RELIST_S, 2 * RELIST_S, 3 * RELIST_S]
        assert h.tool_announcements(mark) == 0
        quiet.tools.append(tool("fresh"))
        await trio.sleep(RELIST_S)
        assert "fresh" in h.exposed("q")
        assert h.tool_announcements(mark) == 1
        await trio.sleep(3 * RELIST_S)
        assert h.tool_announcements(mark) == 1


async def test_the_cadence_defaults_to_the_health_check_interval_and_zero_turns_it_off(
    autojump_clock: Clock,
) -> None:
    every, never = QuietToolsUpstream(), QuietToolsUpstream()
    async with open_harness({"every": every, "never": never}, knobs={"health_check_interval": 20.0},
                            per_server={"never": {"relist_interval": 0.0}}) as h:
        await h.wait_state("every", "ready")
        await h.wait_state("never", "ready")
        started = trio.current_time()
        await trio.sleep(45.0)
        assert [t - started for t in every.listings[1:]] == [20.0, 40.0]
        assert len(never.listings) == 1


async def test_a_server_that_announces_its_changes_is_not_polled(autojump_clock: Clock) -> None:
    loud = FakeUpstream()
    async with open_harness({"loud": loud}, knobs={"relist_interval": RELIST_S}) as h:
        await h.wait_state("loud", "ready")
        await trio.sleep(10 * RELIST_S)
        assert len(loud.listings) == 1


class ShortTtlUpstream(FakeUpstream):
    """Announces its changes, and says its tools list goes stale after 30 s (``ttlMs``)."""

    list_hint: Mapping[str, Any] = {"ttl_ms": 30_000, "cache_scope": "public"}


async def test_a_list_whose_ttl_ran_out_is_relisted_and_only_a_change_is_announced(
    autojump_clock: Clock,
) -> None:
    short = ShortTtlUpstream()
    async with open_harness({"s": short}, knobs={"relist_interval": 0.0}) as h:
        await h.wait_state("s", "ready")
        mark, started = h.mark(), short.listings[0]
        await trio.sleep(95.0)
        # Stale at 30, 60, 90 s: fetched again each time, nothing changed, nothing announced.
        assert [t - started for t in short.listings[1:]] == [30.0, 60.0, 90.0]
        assert h.tool_announcements(mark) == 0
        short.tools.append(tool("fresh"))  # changed without announcing: only the ttl finds it
        await trio.sleep(30.0)
        assert "fresh" in h.exposed("s")
        assert h.tool_announcements(mark) == 1


async def test_a_list_without_a_ttl_or_with_ttl_zero_is_not_relisted_for_it(autojump_clock: Clock) -> None:
    class Stale(FakeUpstream):
        list_hint: Mapping[str, Any] = {"ttl_ms": 0, "cache_scope": "private"}

    plain, stale = FakeUpstream(), Stale()
    async with open_harness({"plain": plain, "stale": stale}, knobs={"relist_interval": 0.0}) as h:
        await h.wait_state("plain", "ready")
        await h.wait_state("stale", "ready")
        await trio.sleep(300.0)
        assert (len(plain.listings), len(stale.listings)) == (1, 1)


async def test_a_failed_ttl_relist_is_tried_again_when_the_ttl_runs_out_again(autojump_clock: Clock) -> None:
    class FailsOnce(ShortTtlUpstream):
        def current_tools(self) -> Sequence[types.Tool]:
            if len(self.listings) == 2:  # the first re-list
                raise UpstreamError(wire.INTERNAL_ERROR, "busy")
            return self.tools

    flaky = FailsOnce()
    async with open_harness({"f": flaky}, knobs={"relist_interval": 0.0}) as h:
        await h.wait_state("f", "ready")
        started = flaky.listings[0]
        flaky.tools.append(tool("fresh"))
        await trio.sleep(65.0)
        assert [t - started for t in flaky.listings[1:]] == [30.0, 60.0]
        assert "fresh" in h.exposed("f")
