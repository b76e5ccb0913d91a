"""Waiting on state that announces nothing to the test: the one polling loop.

A test waits on what it owns with that thing's event or channel. Some state announces
nothing to the test process: another process's (its status over the control socket, the
record file an upstream appends to, whether a pid has exited) or an in-process actor's
counter that publishes no event. The only way to see it change is to look again, so
`poll_until` is the one loop in the tests that sleeps between looks. The caller bounds it
with its own ``fail_after``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import trio

POLL_S = 0.05
"""Default pause between looks: short next to any bound, long next to one look."""


async def poll_until(ready: Callable[[], bool | Awaitable[bool]], *, every: float = POLL_S) -> None:
    """Return once ``ready()`` (plain or async) holds, looking again every ``every`` seconds."""
    while not await _holds(ready):
        await trio.sleep(every)


async def _holds(ready: Callable[[], bool | Awaitable[bool]]) -> bool:
    answer = ready()
    if inspect.isawaitable(answer):
        return await answer
    return answer
