"""The metrics recorder (`mcpvisor.metrics`) on its own: plain code fed explicit times.

What must hold: a duration lands in the bucket Prometheus's ``le`` says; the dashboard's
p50 and p99 are within a bucket's width of the true ones; the per-minute history keeps
exactly the last hour, however long the proxy ran, in bounded memory; a restart is
counted by a bounded reason, never by its text; a flood of tool names stays bounded.
"""

from __future__ import annotations

from bisect import bisect_left

import msgspec
import trio

from mcpvisor.actors.errors import CallTimeout
from mcpvisor.metrics import (
    BATCH,
    DURATION_BUCKETS_S,
    HISTORY_MINUTES,
    MAX_SERIES,
    MAX_TOOLS_KEPT,
    OTHER_TOOL,
    Histogram,
    Metrics,
    failure_kind,
    outcome,
)


def test_a_duration_counts_in_the_first_bucket_whose_bound_is_at_least_it() -> None:
    hist = Histogram()
    for v in (0.0005, 0.0006, 0.01, 1000.0):
        hist.observe(v)
    cumulative = dict(hist.cumulative())
    assert cumulative["0.0005"] == 1  # le is inclusive
    assert cumulative["0.001"] == 2
    assert cumulative["0.01"] == 3
    assert cumulative[repr(DURATION_BUCKETS_S[-1])] == 3
    assert cumulative["+Inf"] == 4 == hist.count
    assert hist.total == 0.0005 + 0.0006 + 0.01 + 1000.0


def test_quantiles_of_the_fine_buckets_are_within_a_bucket_of_the_truth() -> None:
    m = Metrics()
    for i in range(1, 1001):  # 1 ms .. 1 s, evenly: p50 = 0.5 s, p99 = 0.99 s
        m.served("alpha", "echo", 0.0, i / 1000, None, {"content": []})
    row = m.history.tools()[0]
    assert 0.5 / 1.25 <= row["p50Ms"] / 1000 <= 0.5 * 1.25
    assert 0.99 / 1.25 <= row["p99Ms"] / 1000 <= 0.99 * 1.25
    assert row["calls"] == 1000
    assert row["errors"] == 0


def test_the_history_keeps_the_last_hour_one_bucket_a_minute() -> None:
    m = Metrics()
    minute = 60.0
    for i in range(3 * HISTORY_MINUTES):  # three hours, one call a minute, the last ones failing
        error = CallTimeout("alpha", 1.0) if i >= 3 * HISTORY_MINUTES - 5 else None
        m.served("alpha", "echo", i * minute, i * minute + 0.002, error)
    now = (3 * HISTORY_MINUTES - 1) * minute + 1
    series = m.history.series("alpha", now)
    assert len(series["calls"]) == HISTORY_MINUTES
    assert series["calls"] == [1] * HISTORY_MINUTES
    assert series["errors"] == [0] * (HISTORY_MINUTES - 5) + [1] * 5
    assert all(p is not None and 1.6 <= p <= 2.5 for p in series["p50Ms"])
    # An hour later with no call, nothing of it is left.
    later = m.history.series("alpha", now + HISTORY_MINUTES * minute)
    assert later["calls"] == [0] * HISTORY_MINUTES
    assert later["p99Ms"] == [None] * HISTORY_MINUTES
    assert len(m.history._minutes["alpha"]) == HISTORY_MINUTES  # bounded, whatever the run's length


def test_outcomes_are_the_journals() -> None:
    assert outcome(None, {"isError": True}) == "tool_error"
    assert outcome(None, b'{"content":[],"isError": true}') == "tool_error"
    assert outcome(None, b'{"content":[{"text":"isError"}]}') == "ok"
    assert outcome(trio.Cancelled._create(), None) == "cancelled"
    assert outcome(CallTimeout("alpha", 1.0), None) == "timeout"


def test_restarts_and_breaker_opens_are_counted_by_a_bounded_reason() -> None:
    m = Metrics()
    secret_stderr = "exited with status 3: Traceback ... API_KEY=s3cret"
    m.state_changed("beta", 1.0, "backing_off", "back_off", secret_stderr)
    m.state_changed("beta", 2.0, "starting", "retry", secret_stderr)
    m.state_changed("beta", 3.0, "circuit_open", "open_circuit", "hung: 3 pings unanswered within 5s")
    m.state_changed("beta", 4.0, "starting", "restart", None)
    assert m.restarts == {("beta", "exit"): 1, ("beta", "hang"): 1, ("beta", "requested"): 1}
    assert m.breaker_opens == {("beta", "hang"): 1}
    assert failure_kind("did not start within 30s: ...") == "start_timeout"
    assert failure_kind("something new") == "other"
    states = m.history.series("beta", 10.0)["states"]
    assert [s[1:] for s in states] == [["backing_off", "exit"], ["starting", "retry"],
                                       ["circuit_open", "hang"], ["starting", "restart"]]
    assert "s3cret" not in repr(states)


def test_a_flood_of_tool_names_stays_bounded() -> None:
    m = Metrics()
    for i in range(MAX_SERIES + 10):
        m.served("alpha", f"tool_{i}", 0.0, 0.001, None)
    assert len(m.server_ops) == MAX_SERIES + 1
    assert m.server_ops["tools/call", OTHER_TOOL, "alpha", "ok", ""].count == 10
    assert len(m.history.tools()) == MAX_TOOLS_KEPT + 1


def test_a_tool_added_up_late_lands_in_its_own_minute() -> None:
    """Tools are added up at different times (each after 512 calls, at its minute's end, at
    a read): one tool's calls of minute 1 added after another's of minute 2 still count
    in minute 1 of the sparkline."""
    m = Metrics()
    ok: dict[str, object] = {"content": []}
    m.served("alpha", "fast", 0.0, 5.0, None, ok)     # minute 0: fast's slot comes first
    m.served("alpha", "slow", 0.0, 61.0, None, ok)    # minute 1, pending in slow's slot
    m.served("alpha", "fast", 0.0, 121.0, None, ok)   # minute 2: fast's minute 0 is added up
    m.served("alpha", "fast", 0.0, 122.0, None, ok)
    series = m.history.series("alpha", 125.0)  # adds up fast's minute 2, then slow's minute 1
    assert series["calls"][-3:] == [1, 1, 2]


def test_queued_batches_count_exactly_what_each_call_was() -> None:
    """Calls are queued and counted a batch at a time (whole batches of one tool in C
    loops, mixed ones call by call): whatever the mix, each call lands in its series,
    bucket and minute, and a raw result is a tool error exactly when it says
    ``"isError": true`` (small ones read with the batch, large ones at once)."""
    m = Metrics()
    expected_ok: dict[tuple[str, int], int] = {}
    expected_failed: dict[tuple[str, int], int] = {}
    by_bucket: dict[int, int] = {}
    ok_raw = msgspec.Raw(b'{"content":[],"isError": false}')
    failed_raw = msgspec.Raw(b'{"content":[],"isError" : true}')
    large_failed = msgspec.Raw(b'{"content":[{"type":"text","text":"' + b"x" * 4096 + b'"}],"isError":true}')
    n = 3 * BATCH + 7
    for i in range(n):
        # One tool for the first batch (the whole-batch path), then two interleaved, across minutes.
        tool = "echo" if i < BATCH or i % 3 else "slow"
        now = 50.0 + i * 0.05  # minute 0 into minute 1 and 2
        duration = 0.0003 * (1 + i % 40)
        failed = i % 97 == 5
        result = (large_failed if i % 2 else failed_raw) if failed else ok_raw
        m.served("alpha", tool, now - duration, now, None, result, upstream_too=True)
        key = (tool, int(now // 60))
        into = expected_failed if failed else expected_ok
        into[key] = into.get(key, 0) + 1
        if not failed and tool == "echo":
            bucket = bisect_left(DURATION_BUCKETS_S, duration)
            by_bucket[bucket] = by_bucket.get(bucket, 0) + 1
    ops = m.server_ops
    for tool in ("echo", "slow"):
        n_ok = sum(v for (t, _), v in expected_ok.items() if t == tool)
        n_failed = sum(v for (t, _), v in expected_failed.items() if t == tool)
        assert ops["tools/call", tool, "alpha", "ok", ""].count == n_ok
        assert m.client_ops["tools/call", tool, "alpha", "ok", ""].count == n_ok
        tool_errors = ops.get(("tools/call", tool, "alpha", "tool_error", "tool_error"), Histogram())
        assert tool_errors.count == n_failed
    assert {i: c for i, c in enumerate(ops["tools/call", "echo", "alpha", "ok", ""].counts) if c} == by_bucket
    calls = m.history.series("alpha", 50.0 + n * 0.05)["calls"][-3:]
    errors = m.history.series("alpha", 50.0 + n * 0.05)["errors"][-3:]
    for minute in range(3):
        assert calls[minute] == sum(v for (_, mi), v in (*expected_ok.items(), *expected_failed.items())
                                    if mi == minute)
        assert errors[minute] == sum(v for (_, mi), v in expected_failed.items() if mi == minute)
