"""Calls and errors per minute and the p50 latency of each server, for the dashboard.

Owns `CallWindow`, a plain synchronous record of the finished calls of the last
`WINDOW_S` seconds per server (no clock reads: times are passed in), and `RecentEvents`,
the last state changes the page lists. The dashboard feeds both from `Supervisor.events`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

WINDOW_S: Final = 60.0
"""The page shows "per minute" figures: the window is one minute."""

MAX_CALLS_KEPT: Final = 10_000
"""Calls remembered per server within the window (bounds memory under a call flood; the
p50 then covers the most recent ones)."""

MAX_EVENTS_KEPT: Final = 50
"""State changes the page lists (the recent ones; older ones are in the log)."""


@dataclass
class _Server:
    calls: deque[tuple[float, float, bool]] = field(default_factory=lambda: deque(maxlen=MAX_CALLS_KEPT))


class CallWindow:
    """Finished calls per server over the last `WINDOW_S` seconds."""

    def __init__(self) -> None:
        self._servers: dict[str, _Server] = {}

    def record(self, server: str, at: float, duration: float, ok: bool) -> None:
        self._servers.setdefault(server, _Server()).calls.append((at, duration, ok))

    def summary(self, server: str, now: float) -> dict[str, Any]:
        """``{"callsPerMinute", "errorsPerMinute", "p50Ms"}`` for ``server`` at ``now``
        (``p50Ms`` is None with no call in the window)."""
        entry = self._servers.get(server)
        if entry is None:
            return {"callsPerMinute": 0, "errorsPerMinute": 0, "p50Ms": None}
        calls = entry.calls
        while calls and calls[0][0] < now - WINDOW_S:
            calls.popleft()
        durations = sorted(d for _, d, _ in calls)
        errors = sum(1 for _, _, ok in calls if not ok)
        p50 = durations[(len(durations) - 1) // 2] * 1000 if durations else None
        return {"callsPerMinute": len(calls), "errorsPerMinute": errors,
                "p50Ms": None if p50 is None else round(p50, 2)}


class RecentEvents:
    """The last `MAX_EVENTS_KEPT` events as JSON objects, newest last."""

    def __init__(self) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS_KEPT)

    def add(self, event: dict[str, Any]) -> None:
        self._events.append(event)

    def list(self) -> list[dict[str, Any]]:
        return list(self._events)
