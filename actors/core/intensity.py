"""OTP's restart intensity, "at most MaxR restarts in MaxT seconds", as a sans-IO window.

The restart policy (`mcpvisor.actors.core.policy`) keeps two: one bounds restart storms
of servers that do work between crashes, the other counts the restarts of the last
minute for status views. The caller passes ``now`` (the Trio clock); nothing here reads
a clock.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final


class IntensityWindow:
    """OTP's restart intensity: at most ``max_restarts`` restarts within ``period`` seconds.

    A restart exactly ``period`` seconds old still counts, as in OTP's
    ``supervisor:add_restart/3`` (keeps restarts with ``R >= Now - Period``).
    """

    def __init__(self, max_restarts: int, period: float) -> None:
        """Create an empty window.

        Args:
            max_restarts: OTP's MaxR (intensity); 0 allows no restart at all.
            period: OTP's MaxT, in seconds.

        Raises:
            ValueError: for ``max_restarts < 0`` or a period that is not a finite
                number > 0.
        """
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts!r}")
        if not (math.isfinite(period) and period > 0):
            raise ValueError(f"period must be a finite number of seconds > 0, got {period!r}")
        self.max_restarts: Final = max_restarts
        self.period: Final = period
        self._restarts: deque[float] = deque()

    def record(self, now: float) -> bool:
        """Record a restart at ``now``.

        Args:
            now: the Trio clock.

        Returns:
            True while the restarts in the window, this one included, are at most
            ``max_restarts``; False when the limit is exceeded (OTP: the supervisor
            gives up). The restart is recorded either way.
        """
        self._prune(now)
        self._restarts.append(now)
        return len(self._restarts) <= self.max_restarts

    def __len__(self) -> int:
        """The restarts recorded and not yet pruned (as of the last call that passed a time)."""
        return len(self._restarts)

    def count(self, now: float) -> int:
        """Return the number of restarts within ``period`` seconds before ``now``."""
        self._prune(now)
        return len(self._restarts)

    def _prune(self, now: float) -> None:
        """Drop restarts older than the window."""
        threshold = now - self.period
        while self._restarts and self._restarts[0] < threshold:
            self._restarts.popleft()
