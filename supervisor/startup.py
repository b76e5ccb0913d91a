"""What clients see while the servers start: list changes gathered into a few notifications.

Owns `ListChangeCoalescer`: during start-up every server that comes up changes the lists
(its tools arrive, or its remembered ones are replaced by the real ones), and a client
told ``notifications/tools/list_changed`` re-lists each time. Nine servers used to give
seven notifications in 0.8 s, thirty gave thirty. While start-up lasts, the coalescer
holds the changes and announces them together once the servers have been quiet for
`QUIET_S`, or after `MAX_HOLD_S` at the latest, both windows growing after each
announcement (`GROWTH`, up to `LONGEST_HOLD_S`); when start-up ends (every eager server
made its first start attempt, or ``startupWait`` passed) it announces what it holds at
once and from then on passes every change straight through (an equip is announced as
it happens).

`startup_gate` says when start-up ends: for requests naming something not listed yet,
and for the coalescer.

The first ``tools/list`` is answered at once from the router's snapshot (it never
waits), so a notification sent after the quiet window cannot overtake that answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

import trio

from mcpvisor.actors.core.catalog import Snapshot
from mcpvisor.actors.core.registry import Changes

logger = logging.getLogger(__name__)

QUIET_S: Final = 0.2
"""Announce once no server changed a list for this long. Servers started together come
up within a few hundred milliseconds of each other on a 2-core machine (the nine of
issue 25 within 0.8 s); 200 ms gathers a burst while a client still sees a new server's
tools well under a second after it is up."""

MAX_HOLD_S: Final = 1.0
"""Announce at the latest this long after the first change held, even while servers keep
coming up, so the first servers up are seen within a second."""

GROWTH: Final = 2.0
"""After each announcement of start-up, both windows double: servers that come up one by
one over ten seconds (npm and Python servers start in 0.3 to 3 s on 2 busy cores, a slow
one later) give a handful of notifications, not one a second."""

LONGEST_HOLD_S: Final = 4.0
"""The most any window grows to: a server up late in start-up is seen within 4 s."""

Announce = Callable[[Snapshot, Changes], None]


def merge(a: Changes, b: Changes) -> Changes:
    """Both sets of changes: a list is to be re-fetched if either says so."""
    return Changes(tools=a.tools or b.tools, resources=a.resources or b.resources,
                   prompts=a.prompts or b.prompts, catalog=a.catalog or b.catalog)


class ListChangeCoalescer:
    """Gathers the router's announcements during start-up; passes them through after.

    `offer` never blocks (the router calls it after each mutation); `run` is the task
    that announces what was held. Start it with ``await nursery.start(c.run)``.
    """

    def __init__(self, announce: Announce, *, quiet: float = QUIET_S, max_hold: float = MAX_HOLD_S) -> None:
        self._announce = announce
        self._quiet = quiet
        self._max_hold = max_hold
        self._holding = True
        self._pending = Changes()
        self._snapshot: Snapshot | None = None
        self._first_at: float | None = None
        self._last_at = 0.0
        self._wake = trio.Event()
        self._ended = trio.Event()
        self.announced = 0
        """Announcements made (held ones once each, passed-through ones each)."""
        self.offered = 0
        """Changes offered by the router."""

    @property
    def holding(self) -> bool:
        """True during start-up: changes are being gathered."""
        return self._holding

    def offer(self, snapshot: Snapshot, changes: Changes) -> None:
        """The router changed what clients see: announce now, or hold it (start-up)."""
        self.offered += 1
        if not self._holding:
            self._emit(snapshot, changes)
            return
        now = trio.current_time()
        if self._first_at is None:
            self._first_at = now
        self._last_at = now
        self._pending = merge(self._pending, changes)
        self._snapshot = snapshot
        self._wake.set()

    def end(self) -> None:
        """Start-up is over: announce what is held now, and every later change as it comes."""
        if not self._holding:
            return
        self._holding = False
        self._flush()
        self._ended.set()
        self._wake.set()

    async def wait_ended(self) -> None:
        """Wait until start-up is over and what it changed has been announced."""
        await self._ended.wait()

    def _flush(self) -> None:
        snapshot, changes = self._snapshot, self._pending
        self._snapshot, self._pending, self._first_at = None, Changes(), None
        if snapshot is not None and changes:
            self._emit(snapshot, changes)

    def _emit(self, snapshot: Snapshot, changes: Changes) -> None:
        self.announced += 1
        self._announce(snapshot, changes)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Announce held changes after each quiet window (or the longest hold); returns
        once start-up has ended."""
        task_status.started()
        while self._holding:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._holding and self._first_at is not None:
                due = min(self._last_at + self._quiet, self._first_at + self._max_hold)
                if trio.current_time() >= due:
                    self._flush()
                    self._quiet = min(self._quiet * GROWTH, LONGEST_HOLD_S)
                    self._max_hold = min(self._max_hold * GROWTH, LONGEST_HOLD_S)
                    break
                with trio.move_on_at(due):
                    await self._wake.wait()
                self._wake = trio.Event()


async def startup_gate(first_attempts: Sequence[trio.Event], wait: float, started: trio.Event,
                       coalescer: ListChangeCoalescer) -> None:
    """Start-up's end: ``started`` is set once every eager server's first start attempt has
    ended (``first_attempts``) or ``wait`` (``settings.startupWait``) passed, whichever is
    first; the coalescer ends once every one of them has ended."""
    with trio.move_on_after(wait):
        for done in first_attempts:
            await done.wait()
    started.set()
    # The list changes of a server slower than startupWait are still start-up's: gathered
    # with the others until every eager server made its first attempt (its startupTimeout).
    for done in first_attempts:
        if not done.is_set():
            await done.wait()
    coalescer.end()
