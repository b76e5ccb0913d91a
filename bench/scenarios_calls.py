"""Tool-call scenarios: latency, throughput and a 1 MiB result, over stdio and streamable HTTP.

Every subject (direct, mcpvisor with the fast path on and off, each peer) is connected
once over one benchmark upstream, warmed up, and then measured in alternating rounds
(A B C ... then ... C B A), so slow phases of a shared machine hit every subject alike.
Each round yields one value per metric per subject; a row reports the median over
rounds, and each ratio is the median of per-round ratios against the direct row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.core import Params, Result, aggregate, mb, percentile, rnd
from mcpvisor.bench.drivers import METRICS_SUBJECT, ServerDef, Session, Subject, open_session
from mcpvisor.bench.http_clients import CLIENTS, ClientPool, call_spans
from mcpvisor.bench.stalls import WATCH

WARMUP_CALLS: Final = 30
MIN_CALLS: Final = 20
"""A time-limited measurement still makes at least this many calls (a p50 needs a sample)."""
CALL_TIMEOUT_S: Final = 60.0
CALL_BUDGET_S: Final = 0.5
"""Per-call allowance on top of CALL_TIMEOUT_S: a loaded shared box stalls processes for seconds."""
UPSTREAM: Final = ServerDef("b")
HTTP_CALL_DIVISOR: Final = 4
"""An HTTP call costs about ten times a stdio one (the SDK's HTTP client and server on both ends):
the HTTP scenarios make a quarter of the calls, so they take about as long as the stdio ones."""

Measure = Callable[[Session], Awaitable[dict[str, float]]]


async def call_ok(session: Session, tool: str, args: dict[str, Any]) -> Any:
    result = await session.client.call_tool(tool, args)
    if getattr(result, "is_error", False):
        raise RuntimeError(f"{session.subject.name}: {tool} returned an error: {result.content!r:.200}")
    return result


async def latency(session: Session, base: str, args: dict[str, Any], n: int,
                  limit_s: float = math.inf) -> dict[str, float]:
    """``n`` sequential calls (fewer if ``limit_s`` runs out first): p50/p99 ms, the server
    side's CPU per call."""
    tool = session.tool(base)
    call = session.client.call_tool
    server = session.proxy_procs()
    cpu0 = procs.cpu_seconds(server)
    spans = []
    clock = time.perf_counter
    deadline = clock() + limit_s
    with trio.fail_after(CALL_TIMEOUT_S + n * CALL_BUDGET_S):
        for _ in range(n):
            t0 = clock()
            await call(tool, args)
            spans.append((t0, clock()))
            if t0 > deadline and len(spans) >= MIN_CALLS:
                break
    cpu = procs.cpu_seconds(server) - cpu0
    await WATCH.settle()
    times, stalled = WATCH.clean(spans)
    times.sort()
    return {"p50_ms": percentile(times, 0.5) * 1e3, "p99_ms": percentile(times, 0.99) * 1e3,
            "cpu_ms_per_call": cpu / len(spans) * 1e3, "stalled_calls": stalled, "calls": len(spans)}


async def throughput(session: Session, base: str, args: dict[str, Any], total: int,
                     concurrency: int, limit_s: float = math.inf) -> tuple[float, float, int]:
    """``total`` calls from ``concurrency`` tasks at once (no new call after ``limit_s``):
    (calls/s, p50 ms, calls made)."""
    rate, times, made = await _timed_calls(session, base, total, concurrency, limit_s, args=args)
    return rate, percentile(times, 0.5) * 1e3, made


async def distinct_calls(session: Session, total: int, concurrency: int,
                         limit_s: float = math.inf) -> tuple[float, list[float]]:
    """``total`` echo calls from ``concurrency`` tasks, each call with arguments of its own (so
    no cache or coalescing in a subject can help): (calls/s, the sorted call times in s)."""
    rate, times, _ = await _timed_calls(session, "echo", total, concurrency, limit_s,
                                        distinct=f"c{concurrency}")
    return rate, times


async def _timed_calls(session: Session, base: str, total: int, concurrency: int, limit_s: float, *,
                       args: dict[str, Any] | None = None,
                       distinct: str | None = None) -> tuple[float, list[float], int]:
    """``total`` calls of ``base`` from ``concurrency`` tasks, each with ``args``, or with
    arguments of its own (``distinct``: their prefix), no new call after ``limit_s``:
    (calls/s, the sorted clean call times in s, calls made). Over HTTP, more than one call
    in flight comes from the session's client processes (`mcpvisor.bench.http_clients`)."""
    tool = session.tool(base)
    clock = time.perf_counter
    with trio.fail_after(CALL_TIMEOUT_S + total * CALL_BUDGET_S):
        if session.transport == "http" and concurrency > 1:
            pool = await client_pool(session)
            t_start = clock()
            spans = await pool.calls(tool, total, concurrency, limit_s, args=args, distinct=distinct)
        else:
            t_start = clock()
            spans = await call_spans(session.client.call_tool, tool, total, concurrency, limit_s, args=args,
                                     distinct=distinct, min_calls=MIN_CALLS)
    t_end = clock()
    await WATCH.settle()
    times, _ = WATCH.clean(spans)
    times.sort()
    return len(spans) / (t_end - t_start - WATCH.overlap(t_start, t_end)), times, len(spans)


async def client_pool(session: Session) -> ClientPool:
    """The session's HTTP client processes, started (and connected) on first use; `_hold`
    stops them with the session."""
    if session.pool is None:
        assert session.url is not None
        pool = ClientPool(session.url, session.sse, session.log.with_suffix(".clients.log"))
        session.pool = pool
        await pool.start()
    assert isinstance(session.pool, ClientPool)
    return session.pool


async def interleave(sessions: Sequence[Session], rounds: int, measure: Measure,
                     result: Result) -> dict[str, list[dict[str, float]]]:
    """Run ``measure`` on each session, alternating direction each round; a failing subject is dropped."""
    per_round: dict[str, list[dict[str, float]]] = {s.subject.name: [] for s in sessions}
    stalled: dict[str, int] = {}
    fewest: dict[str, int] = {}
    alive = list(sessions)
    start = WATCH.total
    for r in range(rounds):
        order = alive if r % 2 == 0 else list(reversed(alive))
        for session in order:
            name = session.subject.name
            try:
                values = await measure(session)
            except Exception as exc:  # a peer falling over must not end the run
                result.skip(name, f"failed during round {r + 1}: {exc!r:.300}")
                alive.remove(session)
                per_round.pop(name, None)
                continue
            stalled[name] = stalled.get(name, 0) + int(values.pop("stalled_calls", 0))
            made = values.pop("calls", None)
            if made is not None:
                fewest[name] = int(min(made, fewest.get(name, made)))
            per_round[name].append(values)
    note_stalls(result, WATCH.total - start, stalled)
    asked = result.params.get("calls")
    short = {name: n for name, n in fewest.items() if asked and n < asked}
    if short:
        result.notes.append("time limit per measurement reached (fewest calls in a round): "
                            + ", ".join(f"{name} {n}" for name, n in short.items()))
    return per_round


def note_stalls(result: Result, seconds: float, calls: dict[str, int] | None = None) -> None:
    """Say how much of the scenario the machine spent paused, and what that left out."""
    result.params["machine_stalled_s"] = round(result.params.get("machine_stalled_s", 0.0) + seconds, 2)
    if WATCH.unavailable is not None:
        if not any("uncorrected" in n for n in result.notes):
            result.notes.append(f"figures uncorrected for machine pauses: the canary could not run "
                                f"({WATCH.unavailable})")
        return
    if seconds <= 0:
        return
    text = (f"the machine was paused for {seconds:.1f} s in all (seen by bench/canary.py); paused time is "
            "taken out of calls/s and spans")
    if calls and any(calls.values()):
        text += "; calls that overlapped a pause are left out of the percentiles: " + ", ".join(
            f"{name} {n}" for name, n in calls.items() if n)
    result.notes.append(text)


def rows_from(result: Result, sessions: Sequence[Session], table: dict[str, dict[str, Any]]) -> None:
    for session in sessions:
        row = table.get(session.subject.name)
        if row is None:
            continue
        result.rows.append({"subject": session.subject.name, "kind": session.subject.kind,
                            "transport": session.transport, **row})


def note_floor(result: Result, metric: str, what: str) -> None:
    """A note setting mcpvisor's ``metric`` beside the trio relay's (``kind`` floor): what the
    least a trio proxy does costs on this machine, in this run."""
    ours = result.row("mcpvisor")
    floor = next((r for r in result.rows if r["kind"] == "floor"), None)
    if not ours or not floor or ours.get(metric) is None or floor.get(metric) is None:
        return
    ratio = f"{ours[metric] / floor[metric]:.2f}" if floor[metric] else "n/a (too few calls to read)"
    result.notes.append(f"{what}: mcpvisor {ours[metric]:g}, {floor['subject']} {floor[metric]:g} "
                        f"(copying the bytes and nothing else, the least any trio proxy does): "
                        f"mcpvisor / {floor['subject']} = {ratio}")


def beats_peers(result: Result, metric: str, lower_is_better: bool, subject: str = "mcpvisor") -> None:
    """Target: mcpvisor's ``metric`` (its row ``subject``) is better than every peer's in this run
    (a row with ``upstreams`` is compared with the peers' rows of as many upstreams)."""
    ours = result.row(subject)
    peers = [r for r in result.rows if r["kind"] == "peer" and r.get(metric) is not None
             and (ours is None or r.get("upstreams") == ours.get("upstreams"))]
    if ours is None or ours.get(metric) is None or not peers:
        return
    value = ours[metric]
    if lower_is_better:
        met = all(value < p[metric] for p in peers)
        best = min(p[metric] for p in peers)
    else:
        met = all(value > p[metric] for p in peers)
        best = max(p[metric] for p in peers)
    result.targets.append({"subject": subject, "metric": metric, "target": "better than every peer",
                           "value": value, "best_peer": best, "met": met, "what": f"{metric} vs peers"})


async def _hold(subject: Subject, workdir: Path, transport: str, stop: trio.Event, lost: dict[str, str], *,
                task_status: trio.TaskStatus[Session | Exception] = trio.TASK_STATUS_IGNORED) -> None:
    """Own one subject's session in its own task until ``stop``: a session whose connection
    breaks later (its SDK tasks fail) ends only itself, never the scenario or the others."""
    started = False
    try:
        async with open_session(subject, [UPSTREAM], workdir, transport=transport) as session:
            echo = await session.wait_tool("echo")
            for _ in range(WARMUP_CALLS):
                await call_ok(session, echo, {"text": "warm"})
            task_status.started(session)
            started = True
            try:
                await stop.wait()
            finally:
                if session.pool is not None:
                    await session.pool.aclose()
    except Exception as exc:
        if not started:
            task_status.started(exc)
        else:
            lost[subject.name] = f"{exc}"


async def open_all(nursery: trio.Nursery, stop: trio.Event, subjects: Sequence[Subject], workdir: Path,
                   transport: str, results: Sequence[Result], lost: dict[str, str]) -> list[Session]:
    """Connect every subject over one benchmark upstream; a subject that fails is skipped in ``results``."""
    sessions = []
    for subject in subjects:
        if transport not in subject.transports:
            for r in results:
                r.skip(subject.name, f"does not serve {transport}")
            continue
        got = await nursery.start(_hold, subject, workdir, transport, stop, lost)
        if isinstance(got, Exception):
            for r in results:
                r.skip(subject.name, f"could not start or call: {got}")
            continue
        sessions.append(got)
        procs.progress(f"  {subject.name} over {transport}: connected in {got.connect_s:.2f} s")
    if not any(s.subject.kind == "direct" for s in sessions):
        raise RuntimeError("the direct baseline did not start; no ratio can be computed")
    return sessions


HTTP_CLIENTS_NOTE: Final = (
    f"more than one call in flight over HTTP comes from {CLIENTS} SDK client processes, each with its "
    "own session and its share of the calls (bench/http_clients.py): one client process tops out "
    "near 1,000 calls/s here on its own CPU, whoever answers, which would hide the servers' costs")

STDIO_P50_RATIO: Final = 1.5
"""Issue 29: a stdio call's p50 through the proxy, SDK client, trivial upstream, over direct."""
STDIO_ADDED_MS: Final = 0.15
"""Issue 29: what the proxy adds to that p50, in milliseconds."""
STDIO_CPU_MS: Final = 0.12
"""Issue 29: the proxy's CPU per sequential stdio call (its process's utime+stime per call)."""
PAYLOAD_RATIO: Final = 1.2
"""Issue 29: a 1 MiB result's p50 through the proxy over direct."""

LAT_COLUMNS: Final = ["p50_ms", "p99_ms", "ratio_p50", "ratio_p99", "added_p50_ms", "cpu_ms_per_call"]
TP_COLUMNS: Final = ["c1_calls_s", "ratio_c1", "cN_calls_s", "ratio_cN", "cN_p50_ms"]


async def run_latency(name: str, title: str, sessions: Sequence[Session], params: Params,
                      base: str, args: dict[str, Any], result: Result) -> None:
    calls = params.calls // HTTP_CALL_DIVISOR if name.startswith("http") else params.calls
    result.params.update(calls=calls, rounds=params.rounds, tool=base, arguments=args,
                         limit_s=params.measure_s)
    per_round = await interleave(sessions, params.rounds,
                                 lambda s: latency(s, base, args, calls, params.measure_s), result)
    table = aggregate(per_round, ["p50_ms", "p99_ms", "cpu_ms_per_call"],
                      {"ratio_p50": "p50_ms", "ratio_p99": "p99_ms"}, differences={"added_p50_ms": "p50_ms"})
    rows_from(result, sessions, table)
    beats_peers(result, "ratio_p50", lower_is_better=True)


async def run_throughput(sessions: Sequence[Session], params: Params, result: Result) -> None:
    n, c = params.throughput_calls, params.concurrency
    if result.scenario.startswith("http"):
        n = max(c, n // HTTP_CALL_DIVISOR)
    result.params.update(calls=n, rounds=params.rounds, concurrency=[1, c], tool="echo",
                         limit_s=params.measure_s)
    args = {"text": "hello"}

    async def measure(session: Session) -> dict[str, float]:
        c1, _, made1 = await throughput(session, "echo", args, n, 1, params.measure_s)
        cn, cn_p50, made_n = await throughput(session, "echo", args, n, c, params.measure_s)
        return {"c1_calls_s": c1, "cN_calls_s": cn, "cN_p50_ms": cn_p50, "calls": min(made1, made_n)}

    per_round = await interleave(sessions, params.rounds, measure, result)
    table = aggregate(per_round, ["c1_calls_s", "cN_calls_s", "cN_p50_ms"],
                      {"ratio_c1": "c1_calls_s", "ratio_cN": "cN_calls_s"})
    for row in table.values():
        row["c1_calls_s"] = rnd(row["c1_calls_s"], 0)
        row["cN_calls_s"] = rnd(row["cN_calls_s"], 0)
    rows_from(result, sessions, table)
    beats_peers(result, "ratio_cN", lower_is_better=False)
    metrics_cost(result, per_round, c)


def metrics_cost(result: Result, per_round: dict[str, list[dict[str, float]]], c: int) -> None:
    """What recording metrics costs a call at concurrency ``c``: per round, the time per call
    with metrics over the time without (``mcpvisor``'s calls/s over ``mcpvisor-metrics``'),
    the median over rounds; as a target, at most 1.03."""
    if METRICS_SUBJECT not in per_round or "mcpvisor" not in per_round:
        return
    pair = {s: per_round[s] for s in ("mcpvisor", METRICS_SUBJECT)}
    cost = aggregate(pair, [], {"cN_cost_vs_off": "cN_calls_s", "c1_cost_vs_off": "c1_calls_s"},
                     baseline="mcpvisor")[METRICS_SUBJECT]
    row = result.row(METRICS_SUBJECT)
    if row is None:
        return
    # aggregate divides subject by baseline (calls/s on / off); time per call is its inverse.
    for key in ("cN_cost_vs_off", "c1_cost_vs_off"):
        row[key] = rnd(1 / cost[key]) if cost.get(key) else None
    result.notes.append(f"{METRICS_SUBJECT}: time per call with metrics / without, median over rounds: "
                        f"{row['c1_cost_vs_off']} at concurrency 1, {row['cN_cost_vs_off']} at {c}")
    result.target(METRICS_SUBJECT, "cN_cost_vs_off", "<=", 1.03,
                  f"recording metrics costs at most 3 % a call at concurrency {c}")


PEER_LEVELS: Final = (1, 8, 32)
"""Calls in flight at once in the peers scenarios."""


def peer_columns() -> list[str]:
    cols = []
    for c in PEER_LEVELS:
        cols += [f"at{c}_calls_s", f"at{c}_ratio", f"at{c}_p50_ms", f"at{c}_p95_ms", f"at{c}_p99_ms"]
    return cols


async def run_peers(sessions: Sequence[Session], params: Params, result: Result) -> None:
    """Every subject at each of `PEER_LEVELS` calls in flight: calls/s (and its ratio to
    direct) and the p50/p95/p99 of a call, distinct arguments on every call."""
    n = params.throughput_calls
    if result.scenario.startswith("http"):
        n = max(max(PEER_LEVELS), n // HTTP_CALL_DIVISOR)
    result.params.update(calls=n, rounds=params.rounds, concurrency=list(PEER_LEVELS), tool="echo",
                         arguments="distinct per call", limit_s=params.measure_s)

    async def measure(session: Session) -> dict[str, float]:
        values: dict[str, float] = {}
        made = n
        for c in PEER_LEVELS:
            rate, times = await distinct_calls(session, n, c, params.measure_s)
            made = min(made, len(times))
            values[f"at{c}_calls_s"] = rate
            for q in (50, 95, 99):
                values[f"at{c}_p{q}_ms"] = percentile(times, q / 100) * 1e3
        values["calls"] = made
        return values

    per_round = await interleave(sessions, params.rounds, measure, result)
    metrics = [f"at{c}_{m}" for c in PEER_LEVELS for m in ("calls_s", "p50_ms", "p95_ms", "p99_ms")]
    table = aggregate(per_round, metrics, {f"at{c}_ratio": f"at{c}_calls_s" for c in PEER_LEVELS})
    for row in table.values():
        for c in PEER_LEVELS:
            row[f"at{c}_calls_s"] = rnd(row[f"at{c}_calls_s"], 0)
    rows_from(result, sessions, table)
    for c in PEER_LEVELS:
        beats_peers(result, f"at{c}_ratio", lower_is_better=False)


async def run_payload(sessions: Sequence[Session], params: Params, result: Result) -> None:
    size = params.payload_bytes
    result.params.update(calls=params.payload_calls, rounds=params.rounds, bytes=size)
    result.notes.append("peak RSS is the server side's VmHWM "
                        "(the proxy alone; for direct, the upstream itself)")
    before = {s.subject.name: s.rss() for s in sessions}
    per_round = await interleave(sessions, params.rounds,
                                 lambda s: latency(s, "payload", {"size": size}, params.payload_calls,
                                                   params.measure_s), result)
    table = aggregate(per_round, ["p50_ms", "p99_ms"], {"ratio_p50": "p50_ms", "ratio_p99": "p99_ms"})
    for session in sessions:
        row = table.get(session.subject.name)
        if row is not None:
            row["rss_mb"] = mb(before[session.subject.name])
            row["peak_rss_mb"] = mb(session.hwm())
    rows_from(result, sessions, table)
    beats_peers(result, "ratio_p50", lower_is_better=True)


STDIO_SCENARIOS: Final = ("latency", "latency_work", "throughput", "payload", "peers")
HTTP_SCENARIOS: Final = ("http_latency", "http_throughput", "http_peers")


def new_results(names: Sequence[str], params: Params) -> dict[str, Result]:
    titles = {
        "latency": ("Sequential tool-call latency, trivial echo tool (stdio)", LAT_COLUMNS),
        "latency_work": (f"Sequential tool-call latency, a tool doing {params.work_ms:g} ms of CPU work "
                         "(stdio)", LAT_COLUMNS),
        "throughput": (f"Throughput, echo, concurrency 1 and {params.concurrency} (stdio)", TP_COLUMNS),
        "payload": (f"{params.payload_bytes >> 20} MiB tool result (stdio)",
                    ["p50_ms", "ratio_p50", "rss_mb", "peak_rss_mb"]),
        "http_latency": ("Sequential tool-call latency over streamable HTTP", LAT_COLUMNS),
        "http_throughput": (f"Throughput over streamable HTTP, concurrency 1 and {params.concurrency}",
                            TP_COLUMNS),
        "peers": ("Every subject at 1, 8 and 32 calls in flight, distinct arguments per call (stdio)",
                  peer_columns()),
        "http_peers": ("Every subject at 1, 8 and 32 calls in flight, distinct arguments per call "
                       "(streamable HTTP)", peer_columns()),
    }
    return {n: Result(n, titles[n][0], list(titles[n][1])) for n in names}


async def run_call_group(transport: str, wanted: Sequence[str], subjects: Sequence[Subject], params: Params,
                         workdir: Path) -> list[Result]:
    """Connect every subject once over ``transport`` and run the wanted call scenarios on those sessions."""
    results = new_results(wanted, params)
    started = time.perf_counter()
    lost: dict[str, str] = {}
    try:
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            try:
                await _run_group(nursery, stop, transport, results, subjects, params, workdir, lost)
            finally:
                stop.set()  # every held session closes, concurrently
    except Exception as exc:
        for result in results.values():
            if not result.rows:
                result.error = f"{exc}"
    elapsed = time.perf_counter() - started
    for result in results.values():
        result.seconds = result.seconds or elapsed
    return list(results.values())


async def _run_group(nursery: trio.Nursery, stop: trio.Event, transport: str, results: dict[str, Result],
                     subjects: Sequence[Subject], params: Params, workdir: Path,
                     lost: dict[str, str]) -> None:
    """Connect every subject, then run each wanted scenario on those sessions."""
    sessions = await open_all(nursery, stop, subjects, workdir, transport, list(results.values()), lost)
    for name, result in results.items():
        t0 = time.perf_counter()
        if name in ("latency", "http_latency"):
            await run_latency(name, result.title, sessions, params, "echo", {"text": "hello"}, result)
            if name == "latency":
                result.target("mcpvisor", "ratio_p50", "<=", STDIO_P50_RATIO,
                              f"p50 at most {STDIO_P50_RATIO:g}x direct, SDK client")
                result.target("mcpvisor", "added_p50_ms", "<=", STDIO_ADDED_MS,
                              f"p50 adds at most {STDIO_ADDED_MS:g} ms to a call")
                result.target("mcpvisor", "cpu_ms_per_call", "<=", STDIO_CPU_MS,
                              f"proxy CPU at most {STDIO_CPU_MS:g} ms a call")
                note_floor(result, "cpu_ms_per_call", "CPU per call, ms")
            else:
                result.target("mcpvisor", "ratio_p50", "<=", 2.0, "p50 latency at most 2.0x direct")
        elif name == "latency_work":
            await run_latency(name, result.title, sessions, params, "work", {"ms": params.work_ms},
                              result)
        elif name in ("throughput", "http_throughput"):
            await run_throughput(sessions, params, result)
            result.target("mcpvisor", "ratio_cN", ">=", 0.9,
                          f"throughput at concurrency {params.concurrency} at least 0.9x direct")
        elif name in ("peers", "http_peers"):
            await run_peers(sessions, params, result)
        elif name == "payload":
            await run_payload(sessions, params, result)
            result.target("mcpvisor", "ratio_p50", "<=", PAYLOAD_RATIO,
                          f"1 MiB result at most {PAYLOAD_RATIO:g}x direct")
        result.seconds = time.perf_counter() - t0
        if transport == "http":
            result.notes.append("direct over HTTP = the same tools behind the SDK's own streamable "
                                "HTTP server (bench/http_upstream.py)")
            if name in ("http_throughput", "http_peers"):
                result.notes.append(HTTP_CLIENTS_NOTE)
        for name_lost, why in lost.items():
            result.notes.append(f"{name_lost}'s connection broke: {why[:200]}")
