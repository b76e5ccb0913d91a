"""Chaos with real processes: the fault-injecting fixture server (tests/servers/flaky.py)
under `open_supervisor`, one failure mode per test, healthy siblings alongside.

Each test asserts, in real time with generous bounds (the CI box has 2 cores and is
often busy): every call gets an answer (a result or a clear error) long before the 60 s
call timeout, the healthy server is unaffected, the broken one comes back when it can,
and, through the conftest's leak check, that not one process outlives the test.
Anything about exact timing lives in the MockClock suites (test_upstream_*.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import psutil
import pytest
import trio

from mcpvisor.actors.errors import CallTimeout, UpstreamDied, UpstreamUnavailable
from mcpvisor.actors.link import stdio as link_module
from mcpvisor.actors.messages import Event, ListChanged, StateChanged
from mcpvisor.proxy import Supervisor
from mcpvisor.tree import open_supervisor
from tests.helpers import REAL_IO_BOUND_S, flaky, read_record
from tests.polling import poll_until

pytestmark = pytest.mark.slow

FAST: Final = {"restartDelay": "100ms", "restartDelayMax": "1s", "restartWait": "60s"}
"""Supervision knobs that keep real-time tests short (and patient with a busy machine)."""

PROMPT_S: Final = 10.0
"""An answer "at once" in real time on a loaded 2-core box: far below the 60 s timeout."""


class EventLog:
    """Every event the supervisor publishes, kept for assertions and waits."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._grew = trio.Event()

    async def run(self, sup: Supervisor, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        stream = sup.events()
        task_status.started()
        async for event in stream:
            self.events.append(event)
            self._grew.set()
            self._grew = trio.Event()

    def states(self, server: str) -> list[StateChanged]:
        return [e for e in self.events if isinstance(e, StateChanged) and e.server == server]

    def list_changes(self) -> list[ListChanged]:
        return [e for e in self.events if isinstance(e, ListChanged) and "tools" in e.kinds]

    async def wait_for(self, predicate: Callable[[Event], bool], *, after: int = 0) -> tuple[int, Event]:
        """The first event from index ``after`` on that matches; (its index, the event)."""
        i = after
        while True:
            while i < len(self.events):
                if predicate(self.events[i]):
                    return i, self.events[i]
                i += 1
            await self._grew.wait()

    async def wait_state(self, server: str, state: str, *, after: int = 0) -> tuple[int, StateChanged]:
        i, event = await self.wait_for(
            lambda e: isinstance(e, StateChanged) and e.server == server and e.state == state, after=after)
        assert isinstance(event, StateChanged)
        return i, event


@asynccontextmanager
async def supervised(tmp_path: Path, servers: dict[str, Any], **settings: Any) -> AsyncIterator[
        tuple[Supervisor, EventLog]]:
    """`open_supervisor` over ``servers`` (exposure all), with an `EventLog` attached."""
    config = {"mcpServers": servers,
              "settings": {"exposure": "all", "startupWait": "60s", **settings}}
    log = EventLog()
    async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
            trio.open_nursery() as nursery:
        await nursery.start(log.run, sup)
        yield sup, log
        nursery.cancel_scope.cancel()


def assert_untouched(sup: Supervisor, log: EventLog, server: str) -> None:
    """``server`` started once and never left ready."""
    assert sup.upstreams[server].status().starts == 1
    assert {e.state for e in log.states(server)} <= {"starting", "ready"}


def pid_of(sup: Supervisor, server: str) -> int:
    pid = sup.upstreams[server].status().pid
    assert pid is not None
    return pid


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for init counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pids: list[int], bound: float = PROMPT_S) -> None:
    with trio.fail_after(bound):
        await poll_until(lambda: all(gone(p) for p in pids))


async def test_crash_mid_call_fails_at_once_and_the_server_comes_back(tmp_path: Path) -> None:
    """A server that exits under a call (--crash-on-call 2): the caller gets an error
    naming the exit at once, not at the timeout; a healthy sibling keeps answering; the
    next call waits through the restart and is served by a new process."""
    record = tmp_path / "bad.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"ok": flaky(), "bad": flaky("--crash-on-call", "2", "--record",
                                                                     str(record), **FAST)}) as (sup, log):
            assert await sup.wait_ready() == []
            await sup.call_tool("bad_plain_echo", {"text": "one"})
            asked = trio.current_time()
            with pytest.raises(UpstreamDied) as info:
                await sup.call_tool("bad_plain_echo", {"text": "two"})
            assert trio.current_time() - asked < PROMPT_S
            assert "server bad stopped while handling the request (exited with status 3" in str(info.value)
            ok = await sup.call_tool("ok_echo", {"text": "still here"})
            assert ok["content"][0]["text"] == "echo: still here"
            again = await sup.call_tool("bad_plain_echo", {"text": "three"})
            assert again["content"][0]["text"] == "echo: three"
            _, crashed = await log.wait_state("bad", "backing_off")
            assert crashed.reason is not None
            assert crashed.reason.startswith("exited with status 3")
            assert_untouched(sup, log, "ok")
    pids = {e["pid"] for e in read_record(record) if e["event"] == "call"}
    assert len(pids) == 2


async def test_retry_safe_tool_is_retried_once_on_the_new_process(tmp_path: Path) -> None:
    """--crash-every 2: the idempotent tool's second call kills the process and is
    answered by the next one; the plain tool in the same spot gets the error instead."""
    record = tmp_path / "rec.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"s": flaky("--crash-every", "2", "--record", str(record),
                                                    **FAST)}) as (sup, _):
            await sup.wait_ready()
            await sup.call_tool("s_idem_echo", {"text": "a"})
            retried = await sup.call_tool("s_idem_echo", {"text": "b"})
            assert retried["content"][0]["text"] == "echo: b"
            calls = [e for e in read_record(record) if e["event"] == "call"]
            assert [c["arguments"]["text"] for c in calls] == ["a", "b", "b"]
            assert calls[1]["pid"] != calls[2]["pid"]
            with pytest.raises(UpstreamDied):
                await sup.call_tool("s_plain_echo", {"text": "c"})
            calls = [e for e in read_record(record) if e["event"] == "call"]
            assert [c["arguments"]["text"] for c in calls] == ["a", "b", "b", "c"]


async def test_hung_server_times_out_calls_and_is_restarted_by_pings(tmp_path: Path) -> None:
    """--hang-after 1 (alive, answering nothing): the next call fails at its 1 s timeout
    with an error naming the server and the limit, the upstream is told to cancel it, and
    two missed pings (1 s apart, 1 s each: at least 3 s after the hang, so after the call's
    timeout) get the process killed and restarted."""
    record = tmp_path / "rec.jsonl"
    knobs = {"timeout": "1s", "healthCheckInterval": "1s", "healthCheckTimeout": "1s", "maxMissedPings": 2,
             **FAST}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"hung": flaky("--hang-after", "1", "--record", str(record),
                                                       **knobs)}) as (sup, log):
            await sup.wait_ready()
            first_pid = pid_of(sup, "hung")
            await sup.call_tool("hung_plain_echo", {"text": "answered"})
            with pytest.raises(CallTimeout) as info:
                await sup.call_tool("hung_plain_echo", {"text": "lost"})
            assert str(info.value) == "server hung timed out: no answer or progress within 1s"
            _, hung = await log.wait_state("hung", "backing_off")
            assert hung.reason == "hung: 2 pings unanswered within 1s"
            await log.wait_state("hung", "ready", after=log.events.index(hung))
            assert pid_of(sup, "hung") != first_pid
            await wait_gone([first_pid])
            result = await sup.call_tool("hung_plain_echo", {"text": "new process"})
            assert result["content"][0]["text"] == "echo: new process"
    cancels = [e for e in read_record(record) if e["event"] == "cancelled"]
    assert len(cancels) >= 1
    assert all(e["pid"] == first_pid for e in cancels)
    assert cancels[0]["requestId"].startswith("mv-")
    assert cancels[0]["reason"] == "cancelled by mcpvisor"


async def test_never_starting_server_opens_the_circuit_and_calls_fail_fast(tmp_path: Path) -> None:
    """--exit-at-start: each failure says "exited with status 2: <stderr>"; after 3 the
    circuit opens; a call then fails at once naming the next try; the start count stays
    at the policy's bound; a healthy sibling is untouched."""
    knobs = {"circuitFailures": 3, "circuitOpenFor": "60s", "restartDelay": "50ms",
             "restartDelayMax": "200ms"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"ok": flaky(), "never": flaky(
                "--exit-at-start", "2", "--stderr-text", "fatal: no API key", **knobs)}) as (sup, log):
            _, opened = await log.wait_state("never", "circuit_open")
            assert opened.reason == "3 consecutive failures; last: exited with status 2: fatal: no API key"
            failures = [e for e in log.states("never") if e.state == "backing_off"]
            assert [e.reason for e in failures] == ["exited with status 2: fatal: no API key"] * 2
            up = sup.upstreams["never"]
            asked = trio.current_time()
            with pytest.raises(UpstreamUnavailable) as info:
                await up.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            assert trio.current_time() - asked < 0.5
            assert str(info.value).startswith("server never is down (3 consecutive failures; last: exited "
                                              "with "
                                              "status 2: fatal: no API key), next try at ")
            status = up.status()
            assert (status.state, status.circuit, status.starts, status.tool_count) == (
                "circuit_open", "open", 3, 0)
            assert not any(t["name"].startswith("never_") for t in sup.tools())
            assert (await sup.call_tool("ok_echo", {"text": "fine"}))["content"][0]["text"] == "echo: fine"


async def test_server_killed_from_outside_fails_its_call_and_keeps_its_tools(tmp_path: Path) -> None:
    """SIGKILL from outside: the call in flight fails at once ("killed by SIGKILL"), the
    server restarts, and clients see no list_changed (same tools, brief restart)."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"s": flaky(**FAST)}) as (sup, log):
            await sup.wait_ready()
            # Start-up's own list change (announced as start-up ends) is in the log first.
            await log.wait_for(lambda e: isinstance(e, ListChanged) and "tools" in e.kinds)
            pid = pid_of(sup, "s")
            changes_before = len(log.list_changes())
            outcome: list[BaseException] = []

            async def slow_call() -> None:
                try:
                    await sup.call_tool("s_sleep", {"seconds": 30})
                except UpstreamDied as exc:
                    outcome.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_call)
                with trio.fail_after(PROMPT_S):
                    await poll_until(lambda: sup.upstreams["s"].status().in_flight > 0, every=0.01)
                killed = trio.current_time()
                os.kill(pid, signal.SIGKILL)
            assert trio.current_time() - killed < PROMPT_S
            assert "(killed by SIGKILL)" in str(outcome[0])
            _, down = await log.wait_state("s", "backing_off")
            assert down.reason == "killed by SIGKILL"
            await log.wait_state("s", "ready", after=log.events.index(down))
            assert pid_of(sup, "s") != pid
            assert len(log.list_changes()) == changes_before
            assert (await sup.call_tool("s_echo", {"text": "back"}))["content"][0]["text"] == "echo: back"


@pytest.mark.parametrize("mode", ["start", "calls"])
async def test_garbage_on_stdout_is_logged_and_survived(tmp_path: Path, mode: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Non-JSON lines on stdout (a log line at start, one before each answer) are logged
    and skipped; the server is not restarted and every call is answered."""
    caplog.set_level(logging.WARNING, logger="mcpvisor.actors.link")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"g": flaky("--garbage-stdout", mode, **FAST)}) as (sup, _):
            await sup.wait_ready()
            for i in range(5):
                result = await sup.call_tool("g_echo", {"text": str(i)})
                assert result["content"][0]["text"] == f"echo: {i}"
            assert sup.upstreams["g"].status().starts == 1
    assert "g wrote non-JSON to stdout (ignored)" in caplog.text


async def test_garbage_flood_gets_the_server_restarted(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that floods stdout with non-JSON (here: more than 50 lines in 10 s, the
    limit lowered for the test) is restarted, with that as the reason; the proxy lives on."""
    monkeypatch.setattr(link_module, "GARBAGE_FLOOD", 50)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"ok": flaky(), "flood": flaky("--garbage-stdout", "flood",
                                                                       **FAST)}) as (sup, log):
            _, down = await log.wait_state("flood", "backing_off")
            assert down.reason == "garbage on stdout: 50 non-JSON lines in under 10s"
            assert (await sup.call_tool("ok_echo", {"text": "x"}))["content"][0]["text"] == "echo: x"


async def test_slow_start_beyond_the_limit_fails_and_within_it_is_waited_for(tmp_path: Path) -> None:
    """--slow-start 3: with startupTimeout 1s the start fails with that reason; with the
    default limit, a call made while it starts waits and is served."""
    servers = {"slow": flaky("--slow-start", "3", **FAST),
               "tooslow": flaky("--slow-start", "3", startupTimeout="1s", circuitFailures=1, **FAST)}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, servers) as (sup, log):
            result = await sup.upstreams["slow"].request("tools/call",
                                                         {"name": "echo", "arguments": {"text": "w"}})
            assert result["content"][0]["text"] == "echo: w"
            _, failed = await log.wait_state("tooslow", "circuit_open")
            assert "did not start within 1s" in (failed.reason or "")


async def test_stderr_flood_is_drained(tmp_path: Path) -> None:
    """5 MB of stderr before the handshake: drained as it comes, the server starts."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"loud": flaky("--stderr-flood", "5000000")}) as (sup, _):
            assert await sup.wait_ready() == []
            assert (await sup.call_tool("loud_echo", {"text": "x"}))["content"][0]["text"] == "echo: x"


async def test_mixed_proxy_every_call_answered_healthy_unaffected(tmp_path: Path) -> None:
    """A proxy with a healthy server and three broken ones (crash every 3rd call, hang
    after 2 calls, never start): 60 concurrent calls over a few seconds all end with a
    result or one of the proxy's errors well within their bounds; every call to the
    healthy server succeeds; the broken ones keep being restarted."""
    knobs = {"timeout": "2s", **FAST}
    pings = {"healthCheckInterval": "300ms", "healthCheckTimeout": "300ms", "maxMissedPings": 2}
    servers = {"ok": flaky(**knobs), "crashy": flaky("--crash-every", "3", **knobs),
               "hangs": flaky("--hang-after", "2", **knobs, **pings),
               "never": flaky("--exit-at-start", "1", **knobs)}
    results: dict[str, list[str]] = {name: [] for name in servers}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, servers) as (sup, log):
            await sup.wait_ready()

            async def one(server: str, i: int) -> None:
                asked = trio.current_time()
                try:
                    await sup.upstreams[server].request(
                        "tools/call", {"name": "plain_echo", "arguments": {"text": str(i)}})
                    results[server].append("ok")
                except (UpstreamDied, UpstreamUnavailable, CallTimeout) as exc:
                    results[server].append(type(exc).__name__)
                assert trio.current_time() - asked < 2 + 60 + PROMPT_S

            async with trio.open_nursery() as nursery:
                for i in range(15):
                    for server in servers:
                        nursery.start_soon(one, server, i)
                    await trio.sleep(0.2)
            assert results["ok"] == ["ok"] * 15
            assert sum(len(v) for v in results.values()) == 60
            assert "ok" in results["crashy"]
            assert "UpstreamDied" in results["crashy"]
            assert set(results["never"]) <= {"UpstreamUnavailable"}
            assert_untouched(sup, log, "ok")
            assert sup.upstreams["crashy"].restarts >= 1


def children_of(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


async def test_the_whole_process_group_dies_on_restart_and_on_stop(tmp_path: Path) -> None:
    """--spawn-grandchild (like npx -> node): when the server is killed from outside, the
    restart sweeps its grandchild too; when the supervisor stops, the new pair goes."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with supervised(tmp_path, {"g": flaky("--spawn-grandchild", **FAST)}) as (sup, log):
            await sup.wait_ready()
            leader = pid_of(sup, "g")
            first = [leader, *children_of(leader)]
            assert len(first) == 2
            os.kill(leader, signal.SIGKILL)
            _, down = await log.wait_state("g", "backing_off")
            await log.wait_state("g", "ready", after=log.events.index(down))
            await wait_gone(first)
            leader = pid_of(sup, "g")
            second = [leader, *children_of(leader)]
            assert len(second) == 2
        await wait_gone(second)


async def test_a_server_that_ignores_sigterm_is_killed_within_the_grace(tmp_path: Path) -> None:
    """--ignore-sigterm (ignores stdin EOF and SIGTERM): stopping takes about two graces
    (300 ms each here) and ends with SIGKILL."""
    with trio.fail_after(REAL_IO_BOUND_S):
        servers = {"stubborn": flaky("--ignore-sigterm", shutdownGrace="300ms")}
        async with supervised(tmp_path, servers) as (sup, _):
            await sup.wait_ready()
            pid = pid_of(sup, "stubborn")
            left = trio.current_time()
        assert trio.current_time() - left < 0.6 + PROMPT_S
        await wait_gone([pid])


def test_fixture_server_is_the_interpreter_running_the_tests() -> None:
    """The fixture servers run under this interpreter (so they inherit the leak tag)."""
    assert flaky()["command"] == sys.executable
