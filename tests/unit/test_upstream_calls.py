"""Calls through the upstream actor under virtual time: in-flight deaths, retries,
waiting through restarts, timeouts, progress, the hard cap, health pings (issue points
3 and 4; docs/reliability.md C6, P13, P14, P17, D2).

Every test runs on `autojump_clock` with in-memory fake servers (tests/fakes): the link
underneath is the production `mcpvisor.actors.link.Link`, so its pending table, timeouts and
courtesy cancels are what is tested. A regression shows as an error at the wrong virtual
time (a hang until the timeout instead of at once), a retry that should not happen, or a
missing ``notifications/cancelled``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest
import trio
import trio.testing

from mcpvisor.actors.errors import CallTimeout, UpstreamDied, UpstreamUnavailable
from tests.fakes.harness import open_harness
from tests.fakes.links import (
    CrashEveryNthCallUpstream,
    CrashOnNthCallUpstream,
    FakeUpstream,
    HangingUpstream,
    HangsAtStartUpstream,
    NeverStartsUpstream,
    ProgressForeverUpstream,
    SlowStartUpstream,
)

Clock = trio.testing.MockClock


def text(result: Mapping[str, Any]) -> str:
    return "".join(c["text"] for c in result["content"])


async def test_call_in_flight_fails_at_once_when_the_server_dies(autojump_clock: Clock) -> None:
    """Issue point 4 / docs/reliability.md D2: a call in flight when its upstream dies gets an error
    at that very instant (not at the 60 s timeout), naming the server and the exit."""
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await h.call("s", "sleep", {"seconds": 100})
            except UpstreamDied as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(5)
            server.kill()
            killed = trio.current_time()
        assert trio.current_time() == killed
        assert str(outcome[0]) == "server s stopped while handling the request (killed by SIGKILL)"
        assert len(server.calls()) == 1  # not retried: sleep is not read-only or idempotent


async def test_retry_safe_call_is_retried_once_on_the_new_process(autojump_clock: Clock) -> None:
    """docs/design.md: a read-only (or idempotent) tool whose server died under it is sent once
    more to the new process, after the backoff; the caller sees only the result."""
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        first_pid = server.live.pid  # type: ignore[union-attr]
        result: dict[str, object] = {}

        async def call() -> None:
            result.update(await h.call("s", "read_sleep", {"seconds": 10}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(5)
            server.kill()
        second_pid = server.live.pid  # type: ignore[union-attr]
        assert second_pid != first_pid
        assert text(result) == f"slept in {second_pid}"
        assert trio.current_time() == 5 + 0.25 + 10
        assert [c.pid for c in server.calls()] == [first_pid, second_pid]


async def test_retry_happens_once_only(autojump_clock: Clock) -> None:
    """A retry-safe call whose second process dies too gets the error (no retry loop)."""
    server = CrashOnNthCallUpstream(1)
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        with pytest.raises(UpstreamDied, match=r"exited with status 3: boom"):
            await h.call("s", "echo", {"text": "x"})
        assert len(server.calls()) == 2


async def test_call_during_backoff_waits_for_the_restart(autojump_clock: Clock) -> None:
    """Issue point 4: a call to a restarting server waits for it, then is served."""
    server = FakeUpstream()
    async with open_harness({"s": server}, knobs={"restart_delay": 2.0}) as h:
        await h.wait_state("s", "ready")
        server.kill()
        crashed = await h.wait_state("s", "backing_off")
        result = await h.call("s", "plain_echo", {"text": "late"})
        assert trio.current_time() == crashed + 2
        assert "late" in text(result)


async def test_call_waits_at_most_restart_wait(autojump_clock: Clock) -> None:
    """A server that is starting for longer than ``restartWait`` (10 s) answers the call
    with a clear error at exactly 10 s."""
    server = SlowStartUpstream(delay=25)
    async with open_harness({"s": server}) as h:
        asked = trio.current_time()
        with pytest.raises(UpstreamUnavailable) as info:
            await h.call("s", "echo", {"text": "x"})
        assert trio.current_time() - asked == 10
        assert str(info.value) == "server s is starting (first start; not back after 10s)"


async def test_call_fails_fast_when_the_backoff_outlasts_the_wait(autojump_clock: Clock) -> None:
    """No point waiting 10 s for a restart due in 30 s: the call fails at once and says when."""
    server = FakeUpstream()
    async with open_harness({"s": server}, knobs={"restart_delay": 30.0}) as h:
        await h.wait_state("s", "ready")
        server.kill()
        crashed = await h.wait_state("s", "backing_off")
        with pytest.raises(UpstreamUnavailable) as info:
            await h.call("s", "echo", {"text": "x"})
        assert trio.current_time() == crashed
        assert info.value.retry_at == crashed + 30
        assert "server s is down (killed by SIGKILL), next try at" in str(info.value)


async def test_call_to_a_half_open_server_waits_for_the_trial(autojump_clock: Clock) -> None:
    """While the one trial start runs (here it takes 3 s), a call waits for it (bounded)
    instead of failing; one second earlier, with the circuit still open, it fails at once."""

    class SlowTrial(NeverStartsUpstream):
        async def on_start(self, link):  # type: ignore[no-untyped-def]
            await super().on_start(link)
            await trio.sleep(3)

    server = SlowTrial()
    async with open_harness({"s": server}) as h:
        opened = await h.wait_state("s", "circuit_open")
        server.recover()
        await trio.sleep(29)
        with pytest.raises(UpstreamUnavailable, match="next try at"):
            await h.call("s", "echo", {"text": "too early"})
        await trio.sleep(2)
        assert h.upstreams["s"].state.value == "half_open"
        result = await h.call("s", "echo", {"text": "trial"})
        assert trio.current_time() == opened + 30 + 3
        assert "trial" in text(result)


async def test_timed_out_call_names_server_and_limit_and_cancels_upstream(autojump_clock: Clock) -> None:
    """Issue point 4 / docs/reliability.md C6, P13: no answer within ``timeout`` -> an error at
    exactly the limit naming the server and the limit, and the upstream gets
    ``notifications/cancelled`` for that request. The server is not restarted (a slow
    tool is not a dead server; pings decide that)."""
    server = FakeUpstream()
    async with open_harness({"s": server}, knobs={"timeout": 5.0}) as h:
        await h.wait_state("s", "ready")
        asked = trio.current_time()
        with pytest.raises(CallTimeout) as info:
            await h.call("s", "hang")
        assert trio.current_time() - asked == 5
        assert str(info.value) == "server s timed out: no answer or progress within 5s"
        request_id = server.calls()[0].request_id
        assert [(t - asked, rid) for t, rid, _ in server.cancelled] == [(5, request_id)]
        assert h.upstreams["s"].state.value == "ready"
        assert h.upstreams["s"].last_error == str(info.value)


async def test_progress_resets_the_timeout_but_not_the_hard_cap(autojump_clock: Clock) -> None:
    """docs/reliability.md P14: progress every 3 s keeps a 5 s timeout from firing; the 20 s hard
    cap ends the call anyway, with the upstream told to cancel."""
    server = ProgressForeverUpstream(interval=3)
    async with open_harness({"s": server}, knobs={"timeout": 5.0, "max_call_time": 20.0}) as h:
        await h.wait_state("s", "ready")
        asked = trio.current_time()
        with pytest.raises(CallTimeout, match="the hard limit of 20s"):
            await h.call("s", "plain_echo")
        assert trio.current_time() - asked == 20
        assert len(server.cancelled) == 1


async def test_progress_that_stops_times_out_after_the_last_progress(autojump_clock: Clock) -> None:
    """The inactivity timeout counts from the last progress notification."""

    class ProgressThenSilence(ProgressForeverUpstream):
        def on_call(self, link, request_id, params):  # type: ignore[no-untyped-def]
            async def twice() -> None:
                await link.send_progress(request_id, 1)
                await trio.sleep(3)
                await link.send_progress(request_id, 2)

            link.later(3, twice)

    server = ProgressThenSilence(interval=3)
    async with open_harness({"s": server}, knobs={"timeout": 5.0}) as h:
        await h.wait_state("s", "ready")
        asked = trio.current_time()
        with pytest.raises(CallTimeout, match="within 5s"):
            await h.call("s", "plain_echo")
        assert trio.current_time() - asked == 6 + 5


async def test_hung_server_is_found_by_pings_and_restarted(autojump_clock: Clock) -> None:
    """Issue point 3 / docs/reliability.md P17: a server that stops answering (alive, not dead)
    misses 3 pings (every 30 s, 5 s each) and is restarted at t = 30+5 + 30+5 + 30+5;
    a call stuck in it fails at that instant, not at its own timeout."""
    server = HangingUpstream(after=1)
    async with open_harness({"s": server}, knobs={"timeout": 600.0}) as h:
        ready = await h.wait_state("s", "ready")
        await h.call("s", "plain_echo", {"text": "last answer"})
        stuck: list[BaseException] = []

        async def call() -> None:
            try:
                await h.call("s", "plain_echo", {"text": "never answered"})
            except UpstreamDied as exc:
                stuck.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            hung = await h.wait_state("s", "backing_off")
        assert hung - ready == 105
        reason = "hung: 3 pings unanswered within 5s"
        # It answered a call before it hung, so that life was healthy: restarted at once
        # (issue 18), and by now the actor may already say why it is starting again.
        assert h.upstreams["s"].reason in (reason, f"restart after: {reason}")
        assert str(stuck[0]) == f"server s stopped while handling the request ({reason})"
        assert await h.wait_state("s", "ready") == hung
        assert [c.t - ready for c in server.calls("ping")] == [30, 65, 100]


async def test_pings_that_are_answered_keep_the_server(autojump_clock: Clock) -> None:
    server = FakeUpstream()
    async with open_harness({"s": server}, knobs={"health_check_interval": 10.0}) as h:
        await h.wait_state("s", "ready")
        await trio.sleep(605)  # not 600: a ping due at the same instant would race the check
        assert len(server.starts) == 1
        assert len(server.calls("ping")) == 60


async def test_every_call_gets_one_answer_within_its_bounds_under_random_faults(
        autojump_clock: Clock,
) -> None:
    """Chaos (docs/reliability.md X1, seeded): three servers (crash every 3rd call, hang after 4
    calls, start slowly) and a healthy one; 200 concurrent random calls over time. Each
    call ends exactly once, with a result or a ProxyError, within timeout + restartWait
    (+ one retry); the healthy server answers every call at once."""
    rng = random.Random(7)
    fakes = {"ok": FakeUpstream(), "crashy": CrashEveryNthCallUpstream(3), "hangs": HangingUpstream(after=4),
             "slow": SlowStartUpstream(delay=4)}
    knobs = {"timeout": 8.0, "health_check_interval": 5.0, "health_check_timeout": 1.0, "max_missed_pings": 2,
             "restart_delay": 0.5, "restart_delay_max": 4.0, "circuit_open_for": 20.0}
    bound = 2 * (8.0 + 10.0) + 1
    outcomes: dict[int, list[str]] = {}
    async with open_harness(fakes, knobs=knobs, seed=7) as h:

        async def one(i: int, server: str, tool: str) -> None:
            asked = trio.current_time()
            try:
                await h.call(server, tool, {"text": str(i), "seconds": rng.choice([0.1, 1, 3])})
                outcomes.setdefault(i, []).append("ok")
            except Exception as exc:
                if type(exc).__module__ != "mcpvisor.actors.errors":
                    raise  # every failure must be one of ours: a foreign one fails the test
                outcomes.setdefault(i, []).append(type(exc).__name__)
            took = trio.current_time() - asked
            assert took <= bound, (server, tool, took)
            if server == "ok":
                assert outcomes[i] == ["ok"]

        async with trio.open_nursery() as nursery:
            for i in range(200):
                server = rng.choice(list(fakes))
                tool = rng.choice(["echo", "plain_echo", "sleep", "read_sleep"])
                nursery.start_soon(one, i, server, tool)
                await trio.sleep(rng.uniform(0, 2))
    assert sorted(outcomes) == list(range(200))
    assert all(len(v) == 1 for v in outcomes.values())
    assert len(fakes["ok"].starts) == 1
    assert len(fakes["crashy"].starts) > 3
    assert len(fakes["hangs"].starts) > 1


async def test_start_up_hang_and_never_start_do_not_block_other_servers(autojump_clock: Clock) -> None:
    """A server stuck in its handshake or failing to start never delays a sibling's calls."""
    async with open_harness({"ok": FakeUpstream(), "stuck": HangsAtStartUpstream(),
                             "never": NeverStartsUpstream()}) as h:
        await h.wait_state("ok", "ready")
        for _ in range(10):
            asked = trio.current_time()
            await h.call("ok", "echo", {"text": "x"})
            assert trio.current_time() == asked
            await trio.sleep(7)
