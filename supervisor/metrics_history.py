"""The dashboard's memory of the proxy's calls: bounded histograms and an hour of minutes.

Owns `Histogram` (counts per bucket, as Prometheus and the dashboard both read them) and
`History`: per server, one bucket a minute over the last hour (calls, errors, a latency
histogram) and the state changes of that hour; per tool, its calls, errors and latencies
since the proxy started. Plain synchronous code fed explicit times (`mcpvisor.metrics`
adds calls up into it).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

HISTORY_MINUTES: Final = 60
"""The dashboard's sparklines cover the last hour, one bucket a minute."""

MINUTE_S: Final = 60.0

FINE_BUCKETS_S: Final = tuple(0.0001 * 1.25 ** i for i in range(72))
"""The dashboard's latency buckets: 0.1 ms to ~900 s, each 25 % wider than the last, so a
p50 or p99 read from them is within 12 % of the true one in any range (bounded memory:
72 integers per minute per server, however many calls)."""

MAX_TOOLS_KEPT: Final = 2000
"""Rows of the dashboard's tool table; further tools are counted under `OTHER_TOOL`
(bounded memory if a server invents tool names without end)."""

OTHER_TOOL: Final = "(other tools)"

MAX_STATE_CHANGES_KEPT: Final = 200
"""State changes kept per server for the restart timeline (the last hour's, at most this many)."""

DURATION_BUCKETS_S: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                             1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The histogram buckets (seconds): the OpenTelemetry MCP conventions' advice (0.01 s to
300 s) below four finer ones, since a call through the proxy to a local server often
takes under 10 ms."""


class Histogram:
    """Counts per bucket (the last is +Inf), their sum and count."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # Prometheus `le`: a value counts in the first bucket whose bound is >= it.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def add_placed(self, placed: Placed) -> None:
        """Values already placed by `place` (this histogram's bounds are the coarse or the
        fine ones: each is a subset of the joint bounds `place` searched)."""
        if self.bounds is FINE_BUCKETS_S:
            table = _TO_FINE
        elif self.bounds is DURATION_BUCKETS_S:
            table = _TO_COARSE
        else:
            raise ValueError("add_placed: only the duration or the fine bounds are placed")
        counts = self.counts
        for joint, n in placed.counts.items():
            counts[table[joint]] += n
        self.total += placed.total
        self.count += placed.n

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus buckets are (cumulative, ending with +Inf)."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile, read as the geometric middle of the bucket it falls in
        (None with no observation; the last finite bound for the +Inf bucket)."""
        if self.count == 0:
            return None
        rank = q * self.count
        running = 0
        for i, n in enumerate(self.counts):
            running += n
            if running >= rank and n:
                if i >= len(self.bounds):
                    return self.bounds[-1]
                lower = self.bounds[i - 1] if i else self.bounds[0] / 1.25
                return float((lower * self.bounds[i]) ** 0.5)
        return self.bounds[-1]

    def merge(self, other: Histogram) -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.total += other.total
        self.count += other.count


_JOINT: Final = tuple(sorted({*DURATION_BUCKETS_S, *FINE_BUCKETS_S}))
"""Both sets of bounds as one: a value's bucket here names its bucket in each (every
joint bucket lies inside one coarse and one fine bucket), so one search places a value
for the four histograms a successful call goes to."""
_TO_COARSE: Final = (*(bisect_left(DURATION_BUCKETS_S, b) for b in _JOINT), len(DURATION_BUCKETS_S))
_TO_FINE: Final = (*(bisect_left(FINE_BUCKETS_S, b) for b in _JOINT), len(FINE_BUCKETS_S))


@dataclass(frozen=True, slots=True)
class Placed:
    """Values counted per joint bucket, with their number and sum (see `place`)."""

    counts: Mapping[int, int]
    n: int
    total: float


def place(values: Sequence[float]) -> Placed:
    """Count ``values`` per joint bucket: sorted once (in C), then one search per bound
    from where the last one ended. A batch of calls then goes into any number of
    histograms at the cost of a few dozen bucket additions each, not a search and an
    addition per value per histogram."""
    ordered = sorted(values)
    n = len(ordered)
    counts: dict[int, int] = {}
    below = 0
    for i, bound in enumerate(_JOINT):
        if below == n:
            break
        at = bisect_right(ordered, bound, below)  # values <= bound: Prometheus's inclusive `le`
        if at != below:
            counts[i] = at - below
            below = at
    if below < n:
        counts[len(_JOINT)] = n - below
    return Placed(counts, n, sum(ordered))


@dataclass(slots=True)
class _Minute:
    minute: int
    calls: int = 0
    errors: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(FINE_BUCKETS_S))


@dataclass(slots=True)
class _Tool:
    calls: int = 0
    errors: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(FINE_BUCKETS_S))


class History:
    """What the dashboard draws, kept from the proxy's start in bounded memory."""

    def __init__(self) -> None:
        self._minutes: dict[str, deque[_Minute]] = {}
        self._states: dict[str, deque[tuple[float, str, str, str]]] = {}
        self._tools: dict[tuple[str, str], _Tool] = {}

    def calls(self, server: str, tool: str, minute: int, placed: Placed, failed: bool) -> None:
        """Calls of ``tool`` finished within ``minute`` (``now // 60``), their durations
        `place`d. Tools are added up at different times, so a minute may come after a
        later one: it goes in its place."""
        ring = self._minutes.get(server)
        if ring is None:
            ring = self._minutes[server] = deque(maxlen=HISTORY_MINUTES)
        bucket = _minute_of(ring, minute)
        n = placed.n
        key = (server, tool)
        row = self._tools.get(key)
        if row is None:
            if len(self._tools) >= MAX_TOOLS_KEPT:
                key = (server, OTHER_TOOL)
            row = self._tools.setdefault(key, _Tool())
        row.calls += n
        row.errors += n if failed else 0
        row.latency.add_placed(placed)
        if bucket is not None:  # None: a minute older than the ring holds
            bucket.calls += n
            bucket.errors += n if failed else 0
            bucket.latency.add_placed(placed)

    def state(self, server: str, now: float, state: str, reason: str) -> None:
        ring = self._states.get(server)
        if ring is None:
            ring = self._states[server] = deque(maxlen=MAX_STATE_CHANGES_KEPT)
        ring.append((now, state, reason, ""))

    def series(self, server: str, now: float) -> dict[str, Any]:
        """The last hour of ``server``, oldest minute first, one entry a minute (the current
        minute last, partly over): ``calls``, ``errors``, ``p50Ms``, ``p99Ms`` (None in a
        minute without calls), and ``states``: ``[seconds ago, state, reason]`` of the
        state changes of the last hour."""
        current = int(now // MINUTE_S)
        by_minute = {m.minute: m for m in self._minutes.get(server, ())}
        calls: list[int] = []
        errors: list[int] = []
        p50: list[float | None] = []
        p99: list[float | None] = []
        for minute in range(current - HISTORY_MINUTES + 1, current + 1):
            m = by_minute.get(minute)
            calls.append(m.calls if m else 0)
            errors.append(m.errors if m else 0)
            p50.append(_ms(m.latency.quantile(0.5)) if m else None)
            p99.append(_ms(m.latency.quantile(0.99)) if m else None)
        states = [[round(now - at, 1), state, reason] for at, state, reason, _ in self._states.get(server, ())
                  if now - at <= HISTORY_MINUTES * MINUTE_S]
        return {"calls": calls, "errors": errors, "p50Ms": p50, "p99Ms": p99, "states": states}

    def tools(self) -> list[dict[str, Any]]:
        """Every tool called since start: ``server``, ``tool``, ``calls``, ``errors``,
        ``p50Ms``, ``p99Ms``."""
        return [{"server": server, "tool": tool, "calls": row.calls, "errors": row.errors,
                 "p50Ms": _ms(row.latency.quantile(0.5)), "p99Ms": _ms(row.latency.quantile(0.99))}
                for (server, tool), row in self._tools.items()]


def _minute_of(ring: deque[_Minute], minute: int) -> _Minute | None:
    """The bucket of ``minute`` in ``ring`` (oldest first), made in its place if missing;
    None for a minute older than a full ring keeps."""
    if not ring or ring[-1].minute < minute:
        ring.append(_Minute(minute))
        return ring[-1]
    for i in range(len(ring) - 1, -1, -1):
        if ring[i].minute == minute:
            return ring[i]
        if ring[i].minute < minute:
            break
    else:
        i = -1
    if len(ring) == ring.maxlen:
        if i < 0:
            return None
        ring.popleft()
        i -= 1
    ring.insert(i + 1, _Minute(minute))
    return ring[i + 1]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
