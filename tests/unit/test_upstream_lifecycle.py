"""The upstream actor's state machine under virtual time: backoff, circuit breaker,
withdraw/restore announcements, operator actions (docs/reliability.md §4.2, §4.3).

Every test runs on `autojump_clock` with in-memory fake servers (tests/fakes), so the
times asserted are exact virtual times (`trio.current_time()`) and ten minutes of
backoff run in milliseconds. A regression shows as a start at the wrong time, one start
too many, or a list_changed where none belongs.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from mcpvisor.actors.core.lifecycle import State
from mcpvisor.actors.core.policy import RestartPolicy
from mcpvisor.actors.core.policy_config import PolicyConfig
from mcpvisor.actors.errors import UpstreamUnavailable, wall_clock
from mcpvisor.actors.link.listing import ListPage
from mcpvisor.actors.messages import StateChanged
from tests.fakes.harness import open_harness
from tests.fakes.links import (
    ChangingToolsUpstream,
    FakeLink,
    FakeUpstream,
    HangsAtStartUpstream,
    NeverStartsUpstream,
    tool,
)

Clock = trio.testing.MockClock


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


async def test_autojump_clock_is_active(autojump_clock: Clock) -> None:
    """docs/reliability.md B5: an hour of trio.sleep takes well under a second of real time,
    so every timing assertion in this file is on the virtual clock."""
    start = time.monotonic()
    await trio.sleep(3600)
    assert time.monotonic() - start < 1.0


async def test_backoff_doubles_from_the_first_delay_up_to_the_cap(autojump_clock: Clock) -> None:
    """docs/reliability.md B1: jitter off, delay 1 s doubling to 30 s, circuit out of the way:
    starts at t = 0, 1, 3, 7, 15, 31, 61, 91 (delays 1, 2, 4, 8, 16, 30, 30)."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}, knobs={"restart_delay": 1.0, "restart_delay_max": 30.0,
                                                  "circuit_failures": 1000}) as h:
        t0 = trio.current_time()
        await trio.sleep(100)
        starts = [round(t - t0, 6) for t in server.starts]
        assert starts == [0, 1, 3, 7, 15, 31, 61, 91]
        assert h.upstreams["s"].state.value == "backing_off"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_jittered_delays_stay_within_their_bounds_and_replay_with_the_seed(
        seed: int, autojump_clock: Clock,
) -> None:
    """docs/reliability.md B2: with the default jitter (0.25 s) each delay n lies within
    [base(n), min(base(n) + 0.25, 30)], and the same seed gives the same schedule."""
    schedules = []
    for _ in range(2):
        server = NeverStartsUpstream()
        async with open_harness({"s": server}, seed=seed,
                                knobs={"jitter": 0.25, "circuit_failures": 1000}):
            await trio.sleep(200)
        schedules.append(gaps(server.starts))
    assert schedules[0] == schedules[1]
    for n, delay in enumerate(schedules[0], start=1):
        base = min(0.25 * 2 ** (n - 1), 30.0)
        assert base <= delay <= min(base + 0.25, 30.0) + 1e-9, (n, delay)


async def test_healthy_uptime_resets_the_backoff(autojump_clock: Clock) -> None:
    """docs/reliability.md B3: three quick crashes grow the delay (0.25, 0.5, 1); after 60 s of
    healthy uptime the life counts as healthy and its crash restarts at once (issue 18)."""
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        delays = []
        await h.wait_state("s", "ready")
        for _ in range(3):
            server.kill()
            crashed = await h.wait_state("s", "backing_off")
            delays.append(await h.wait_state("s", "ready") - crashed)
        assert delays == [0.25, 0.5, 1.0]
        await trio.sleep(61)
        server.kill()
        crashed = await h.wait_state("s", "backing_off")
        assert await h.wait_state("s", "ready") - crashed == 0.0  # a healthy life: restarted at once


async def test_stop_during_a_long_backoff_is_immediate(autojump_clock: Clock) -> None:
    """docs/reliability.md B4: a stop requested during a 30 s backoff ends the actor at once,
    with no further start."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}, knobs={"restart_delay": 30.0}) as h:
        await h.wait_state("s", "backing_off")
        asked = trio.current_time()
        h.upstreams["s"].stop()
        assert await h.wait_state("s", "stopped") == asked
        await trio.sleep(120)
        assert len(server.starts) == 1


async def test_never_starting_server_opens_the_circuit_and_is_not_hammered(autojump_clock: Clock) -> None:
    """Issue point 2: defaults (0.25 s doubling, 5 failures, open 30 s doubling to 5 min),
    jitter off. Starts at 0, 0.25, 0.75, 1.75, 3.75; then one trial each time the open
    period ends (33.75, 93.75, 213.75, 453.75, 753.75, ...). Never more than 6 starts in
    any minute, and at most 5 + 1 per open period over an hour."""
    server = NeverStartsUpstream(status=2, stderr="fatal: no config")
    async with open_harness({"s": server}) as h:
        t0 = trio.current_time()
        await trio.sleep(3600)
        starts = [round(t - t0, 6) for t in server.starts]
        assert starts[:9] == [0, 0.25, 0.75, 1.75, 3.75, 33.75, 93.75, 213.75, 453.75]
        assert all(b - a == 300 for a, b in itertools.pairwise(starts[9:]))
        assert max(sum(1 for s in starts if w <= s < w + 60) for w in starts) <= 6
        assert len(starts) <= 5 + 1 + 3600 // 30
        assert len(starts) == 9 + int((3600 - 453.75) // 300)
        up = h.upstreams["s"]
        assert up.state.value == "circuit_open"
        assert up.status().circuit == "open"
        assert "exited with status 2: fatal: no config" in (up.reason or "")


async def test_call_to_an_open_circuit_fails_at_once_naming_the_next_try(autojump_clock: Clock) -> None:
    """Issue point 4: "server X is down (reason), next try at HH:MM:SS", at once, and the
    fake sees no request."""
    server = NeverStartsUpstream(stderr="fatal: missing token")
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "circuit_open")
        up = h.upstreams["s"]
        asked = trio.current_time()
        with pytest.raises(UpstreamUnavailable) as info:
            await h.call("s", "echo", {"text": "x"})
        assert trio.current_time() == asked
        err = info.value
        assert err.retry_at == up.retry_at
        assert err.message.startswith("server s is down (")
        assert "fatal: missing token" in err.message
        assert up.retry_at is not None
        assert err.message.endswith(
            f"next try at {wall_clock(up.retry_at)} (circuit open: too many failed starts)")
        assert server.seen == []


async def test_trial_success_closes_the_circuit_and_restores_the_tools_with_one_list_changed(
        autojump_clock: Clock,
) -> None:
    """docs/reliability.md C7 / issue point 5: tools survive the first crash and its backoff
    restarts without any list_changed; when the circuit opens they are withdrawn with
    exactly one; the successful trial brings them back with exactly one."""
    server = NeverStartsUpstream()
    server.recover()
    async with open_harness({"s": server, "ok": FakeUpstream()}) as h:
        await h.wait_state("s", "ready")
        await h.wait_state("ok", "ready")
        settled = h.mark()
        assert h.exposed("s") == ["echo", "hang", "plain_echo", "read_sleep", "sleep"]
        server.break_again()
        server.kill()
        await h.wait_state("s", "backing_off")
        assert h.exposed("s") != []  # a brief restart keeps the tools listed
        opened = await h.wait_state("s", "circuit_open")
        assert h.exposed("s") == []
        assert h.tool_announcements(after=settled) == 1
        server.recover()
        up = h.upstreams["s"]
        retry_at = up.retry_at
        assert retry_at == opened + 30
        assert await h.wait_state("s", "ready") == retry_at
        assert h.exposed("s") == ["echo", "hang", "plain_echo", "read_sleep", "sleep"]
        assert h.tool_announcements(after=settled) == 2
        assert up.status().circuit == "closed"
        assert h.bus.states("s")[-3:] == ["circuit_open", "half_open", "ready"]


async def test_failed_trial_reopens_the_circuit_for_twice_as_long(autojump_clock: Clock) -> None:
    """docs/reliability.md C4: a trial that fails re-opens the circuit for 60 s, then 120 s;
    the tools stay withdrawn (no further list_changed)."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}) as h:
        first = await h.wait_state("s", "circuit_open")
        up = h.upstreams["s"]
        assert up.retry_at == first + 30
        await h.wait_state("s", "half_open")
        second = await h.wait_state("s", "circuit_open")
        assert second == first + 30
        assert up.retry_at == second + 60
        await h.wait_state("s", "half_open")
        third = await h.wait_state("s", "circuit_open")
        assert up.retry_at == third + 120
        assert h.tool_announcements() == 0  # never listed, never withdrawn


async def test_probation_reopens_at_once_when_the_recovered_server_crashes_again(
        autojump_clock: Clock,
) -> None:
    """A server that passes its trial and dies a second later goes straight back to an
    open circuit (for the doubled period) instead of five more fast restarts."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "circuit_open")
        server.recover()
        await h.wait_state("s", "ready")
        await trio.sleep(1)
        server.kill()
        reopened = await h.wait_state("s", "circuit_open")
        assert h.upstreams["s"].retry_at == reopened + 60
        assert "probation" in (h.upstreams["s"].reason or "")


async def test_a_restart_with_a_different_tool_list_is_announced_once(autojump_clock: Clock) -> None:
    """Issue point 5: after every restart the tools are listed again; a changed list
    reaches clients with one list_changed, an unchanged one with none."""
    server = ChangingToolsUpstream([[tool("a")], [tool("a")], [tool("a"), tool("b")]])
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        settled = h.mark()
        server.kill()
        await h.wait_state("s", "backing_off")
        await h.wait_state("s", "ready")
        assert h.tool_announcements(after=settled) == 0
        server.kill()
        await h.wait_state("s", "backing_off")
        await h.wait_state("s", "ready")
        assert h.exposed("s") == ["a", "b"]
        assert h.tool_announcements(after=settled) == 1


LIST_S = 1.0
"""How long each list of `SlowListsLink` takes to answer (virtual seconds)."""

OTHER_LISTS: dict[str, tuple[dict[str, Any], ...]] = {
    "resources": ({"uri": "file:///notes.txt", "name": "notes"},),
    "templates": ({"uriTemplate": "file:///{name}", "name": "files"},),
    "prompts": ({"name": "summarize"},),
}


class SlowListsLink(FakeLink):
    """A server with tools, resources and prompts whose every list answers after `LIST_S`."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.capabilities = {"tools": {}, "resources": {}, "prompts": {}}

    async def list_page(self, kind: str, cursor: str | None) -> ListPage:
        await trio.sleep(LIST_S)
        if kind == "tools":
            return await super().list_page(kind, cursor)
        return ListPage(OTHER_LISTS[kind], None, None)


async def test_a_server_is_ready_after_its_slowest_list_not_after_all_of_them_in_turn(
        autojump_clock: Clock) -> None:
    """A server is asked for its four lists together: one with tools, resources, templates
    and prompts, each a second to answer, is ready a second after its handshake (it was
    four), at its first start and at a restart, with every list as the server sent it."""
    server = FakeUpstream([tool("a")])
    server.link_class = SlowListsLink
    async with open_harness({"s": server}) as h:
        ready = await h.wait_state("s", "ready")
        assert ready - server.starts[0] == LIST_S
        lists = h.upstreams["s"].lists
        assert [t["name"] for t in lists.tools] == ["a"]
        assert (lists.resources, lists.templates, lists.prompts) == (
            OTHER_LISTS["resources"], OTHER_LISTS["templates"], OTHER_LISTS["prompts"])
        server.kill()
        again = await h.wait_state("s", "ready")
        assert again - server.starts[1] == LIST_S
        assert h.exposed("s") == ["a"]


async def test_a_call_during_a_restart_goes_once_the_handshake_is_done_not_after_the_lists(
        autojump_clock: Clock) -> None:
    """A call made while its server restarts is sent as soon as the new process has done its
    handshake (as a client of the server itself would call), not after its lists, here a
    second each; what needs the lists (`wait_link` without ``early``: the start-up gate, a
    lazy load) still waits for ready, and the tools stay exposed throughout."""
    server = FakeUpstream([tool("a")])
    server.link_class = SlowListsLink
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        up = h.upstreams["s"]
        server.kill()
        await h.wait_state("s", "starting")
        result = await h.call("s", "a", {"x": 1})
        assert not result.get("isError"), result
        assert trio.current_time() == server.starts[1]  # the fake's handshake takes no time
        assert up.state is State.STARTING
        params = server.calls()[-1].params
        assert params is not None
        assert params["arguments"] == {"x": 1}
        assert h.exposed("s") == ["a"]
        await up.wait_link()
        assert trio.current_time() - server.starts[1] == LIST_S
        assert up.state is State.READY
        assert up.starting_link is None


async def test_start_up_timeout_is_a_failure_with_its_reason(autojump_clock: Clock) -> None:
    """A server that never finishes its handshake fails at exactly ``startupTimeout``."""
    server = HangsAtStartUpstream()
    async with open_harness({"s": server}, knobs={"startup_timeout": 30.0}) as h:
        t0 = trio.current_time()
        failed = await h.wait_state("s", "backing_off")
        assert failed - t0 == 30
        assert h.upstreams["s"].reason == "did not start within 30s"
        assert h.upstreams["s"].first_attempt_done.is_set()


async def test_disable_withdraws_the_tools_and_enable_brings_them_back(autojump_clock: Clock) -> None:
    """Disabled: process stopped, tools withdrawn (one list_changed), calls fail at once;
    enabled: a fresh start, tools back (one list_changed)."""
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        settled = h.mark()
        up = h.upstreams["s"]
        up.disable()
        await h.wait_state("s", "disabled")
        assert h.exposed("s") == []
        assert server.live is None
        with pytest.raises(UpstreamUnavailable, match="server s is disabled"):
            await h.call("s", "echo")
        up.enable()
        await h.wait_state("s", "ready")
        assert len(server.starts) == 2
        assert h.exposed("s") != []
        assert h.tool_announcements(after=settled) == 2
        assert up.restarts == 0


async def test_enable_closes_an_open_circuit(autojump_clock: Clock) -> None:
    """An operator's enable after disable starts with a fresh policy (circuit closed)."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "circuit_open")
        up = h.upstreams["s"]
        up.disable()
        await h.wait_state("s", "disabled")
        server.recover()
        up.enable()
        await h.wait_state("s", "ready")
        assert up.status().circuit == "closed"


async def test_stop_is_final_and_withdraws_the_tools(autojump_clock: Clock) -> None:
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        h.upstreams["s"].stop()
        await h.wait_state("s", "stopped")
        assert h.exposed("s") == []
        await trio.sleep(600)
        assert len(server.starts) == 1
        with pytest.raises(UpstreamUnavailable, match="server s is stopped"):
            await h.call("s", "echo")


async def test_restart_request_is_not_a_failure_and_skips_backoff_and_circuit(autojump_clock: Clock) -> None:
    """``restart()`` (a reload, an operator): a new process at once, no restart counted,
    reason on the event; during an open circuit it closes the circuit and starts now."""
    server = FakeUpstream()
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "ready")
        up = h.upstreams["s"]
        first_pid = server.live.pid  # type: ignore[union-attr]
        asked = trio.current_time()
        up.restart("config changed")
        assert up.state.value == "starting"
        assert up.reason == "config changed"
        assert await h.wait_state("s", "ready") == asked
        assert server.live is not None
        assert server.live.pid != first_pid
        assert up.restarts == 0
        assert up.status().consecutive_failures == 0

    broken = NeverStartsUpstream()
    async with open_harness({"s": broken}) as h:
        await h.wait_state("s", "circuit_open")
        broken.recover()
        asked = trio.current_time()
        h.upstreams["s"].restart()
        assert await h.wait_state("s", "ready") == asked
        assert h.upstreams["s"].status().circuit == "closed"


async def test_lazy_server_is_idle_until_its_first_call(autojump_clock: Clock) -> None:
    server = FakeUpstream()
    async with open_harness({"s": server}, knobs={"lazy": True}) as h:
        await trio.sleep(60)
        up = h.upstreams["s"]
        assert up.state.value == "idle"
        assert server.starts == []
        assert up.first_attempt_done.is_set()
        up.load()
        await h.wait_state("s", "ready")
        result = await h.call("s", "echo", {"text": "hi"})
        assert "hi" in result["content"][0]["text"]


async def test_every_transition_is_an_event_with_a_reason(autojump_clock: Clock) -> None:
    """Issue point 1: each StateChanged carries why (exit status and stderr, timeouts,
    the circuit), the retry time when one is due, and the restart count."""
    server = NeverStartsUpstream(status=7, stderr="fatal: port in use")
    async with open_harness({"s": server}) as h:
        await h.wait_state("s", "half_open")
        events = [e for _, e in h.bus.transitions("s")][:11]
        assert [e.state for e in events][:11] == ["starting", "backing_off", "starting", "backing_off",
                                                  "starting", "backing_off", "starting", "backing_off",
                                                  "starting", "circuit_open", "half_open"]
        assert all(e.reason for e in events)
        for e in events:
            if e.state in ("backing_off", "circuit_open"):
                assert "exited with status 7: fatal: port in use" in (e.reason or "")
                assert e.retry_at is not None
        assert events[-2].restarts == 5


async def test_status_follows_the_server_through_crash_backoff_circuit_and_recovery(
        autojump_clock: Clock,
) -> None:
    """Issue point 7: state, uptime, restarts, circuit, retry at, last error, tool count."""
    server = NeverStartsUpstream()
    server.recover()
    async with open_harness({"s": server}, knobs={"restart_delay": 2.0}) as h:
        await h.wait_state("s", "ready")
        await trio.sleep(10)
        up = h.upstreams["s"]
        s = up.status()
        assert (s.state, s.uptime, s.restarts, s.circuit, s.retry_at, s.last_error, s.tool_count) == (
            "ready", 10, 0, "closed", None, None, 5)
        assert s.pid == server.live.pid  # type: ignore[union-attr]
        server.break_again()
        server.kill()
        crashed = await h.wait_state("s", "backing_off")
        s = up.status()
        assert (s.state, s.uptime, s.restarts, s.retry_at) == ("backing_off", None, 1, crashed + 2)
        assert s.last_error == "killed by SIGKILL"
        assert s.tool_count == 5
        assert s.pid is None
        await h.wait_state("s", "circuit_open")
        s = up.status()
        assert (s.state, s.circuit, s.restarts) == ("circuit_open", "open", 5)
        assert s.retry_at == up.retry_at
        assert s.retry_at is not None
        assert s.last_error == "exited with status 1: fatal: cannot start"
        server.recover()
        await h.wait_state("s", "ready")
        s = up.status()
        assert (s.state, s.circuit, s.restarts, s.retry_at, s.uptime) == ("ready", "closed", 5, None, 0)


def _policy_starts_bound(horizon: float, config: PolicyConfig) -> int:
    """Starts a never-starting server may make in ``horizon`` s: the policy's own answer."""
    policy = RestartPolicy(config, rng=random.Random(0))
    now, starts = 0.0, 0
    while now < horizon:
        d = policy.before_start(now)
        if hasattr(d, "until"):
            now = d.until
            continue
        starts += 1
        out: Any = policy.on_failure(now, "x")
        now = out.until if hasattr(out, "until") else now + out.delay
    return starts


@pytest.mark.parametrize("knobs", [{},
                                   {"circuit_failures": 3, "circuit_open_for": 5.0, "circuit_open_max": 60.0},
                                   {"restart_delay": 0.05, "restart_delay_max": 1.0}])
async def test_start_count_of_a_never_starting_server_stays_within_the_backoff_bound(
        knobs: dict[str, Any], autojump_clock: Clock,
) -> None:
    """Chaos: over an hour of virtual time the actor starts a server that never comes up
    no more often than its policy allows (with jitter on)."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}, knobs={"jitter": 0.25, **knobs}):
        await trio.sleep(3600)
    config = PolicyConfig(**{k: v for k, v in {"jitter": 0.0, **knobs}.items()})
    assert len(server.starts) <= _policy_starts_bound(3600, config)
    assert len(server.starts) >= _policy_starts_bound(3600, config) - 2


async def test_healthy_server_is_never_affected_by_broken_siblings(autojump_clock: Clock) -> None:
    """Chaos: beside a crash-looping and a never-starting server, the healthy one starts
    once and answers every call at once for an hour of virtual time."""
    healthy, crashing, never = FakeUpstream(), FakeUpstream(), NeverStartsUpstream()
    async with open_harness({"ok": healthy, "crash": crashing, "never": never}) as h:
        await h.wait_state("ok", "ready")

        async def crash_forever() -> None:
            while True:
                await h.wait_state("crash", "ready")
                await trio.sleep(5)
                crashing.kill()
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(crash_forever)
            for _ in range(360):
                asked = trio.current_time()
                result = await h.call("ok", "echo", {"text": "ping"})
                assert trio.current_time() == asked
                assert "ping" in result["content"][0]["text"]
                await trio.sleep(10)
            nursery.cancel_scope.cancel()
        assert len(healthy.starts) == 1
        assert [e.state for _, e in h.bus.transitions("ok")] == ["starting", "ready"]
        assert isinstance(h.bus.transitions("ok")[-1][1], StateChanged)
