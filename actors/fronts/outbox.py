"""One client's bounded queue of what upstreams send it mid-call (progress, log messages).

Owns `Outbox`: the queue and its sender. An upstream's reader hands a message over
with `Outbox.put_nowait`, which never waits, so a client that stops reading cannot stall
an upstream (issue 23: one SSE client that stopped reading blocked a stdio upstream's
stdout reader; every other client's calls timed out and the healthy upstream was
restarted as hung). The sender delivers the queue in order; a client that takes no
message for `CLIENT_STALL_S` is stalled: its queue is dropped, its calls are cancelled
(the upstreams get ``notifications/cancelled``) and its owner disconnects it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol

import trio

logger = logging.getLogger(__name__)

CLIENT_OUTBOX: Final = 256
"""Messages queued for one client; beyond it new ones are dropped (progress and log
messages are advisory) until the client catches up or is disconnected. The same depth as
the list_changed queue of `mcpvisor.actors.fronts.clients`."""

CLIENT_STALL_S: Final = 10.0
"""A client that takes no message for this long is disconnected: a reader that keeps up
takes one in microseconds, and a slow network in well under a second; 10 s is what a
call's own timeout (60 s by default) can spare before the others notice."""


class Outbound(Protocol):
    """Where a queued message goes: the SDK's request-scoped or standalone channel."""

    async def notify(self, method: str, params: Any, opts: Any = None) -> None: ...


class Outbox:
    """One client's queue, its sender and the calls to cancel if it stalls."""

    def __init__(self, label: str, on_stall: Callable[[], Awaitable[None]]) -> None:
        self.label = label
        self._on_stall = on_stall
        self._queue: deque[tuple[int, Outbound, str, Any]] = deque()
        self._queued = 0
        self._sent = 0
        self._moved = trio.Event()
        self._calls: set[trio.CancelScope] = set()
        self.dropped = 0
        """Messages refused because the queue was full."""
        self.stalled = False
        """The client took nothing for `CLIENT_STALL_S`: the outbox takes no more."""
        self.closed = False

    def put_nowait(self, outbound: Outbound, method: str, params: Any) -> int:
        """Queue one message; never waits. Returns its sequence number for `wait_sent`
        (0 when it was dropped: the queue is full, or the outbox closed)."""
        if self.closed or len(self._queue) >= CLIENT_OUTBOX:
            self.dropped += 1
            return 0
        self._queued += 1
        self._queue.append((self._queued, outbound, method, params))
        self._wake()
        return self._queued

    async def wait_sent(self, seq: int) -> None:
        """Wait until message ``seq`` is delivered (or dropped with the outbox closing).

        Bounded: the sender delivers or gives up within `CLIENT_STALL_S` per message.
        """
        while self._sent < seq and not self.closed:
            await self._moved.wait()

    @contextmanager
    def call(self) -> Iterator[trio.CancelScope]:
        """A scope for one call this client made: cancelled if the client stalls."""
        scope = trio.CancelScope()
        if self.closed:
            scope.cancel(reason="the client stopped reading")
        self._calls.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._calls.discard(scope)

    def close(self) -> None:
        """The connection ended (or stalled): drop the queue, stop the sender."""
        self.closed = True
        self._queue.clear()
        self._wake()

    def _wake(self) -> None:
        self._moved.set()
        self._moved = trio.Event()

    async def run(self) -> None:
        """Deliver the queue in order until the outbox closes; on a stall, cancel this
        client's calls and call ``on_stall`` (the owner disconnects it)."""
        while not self.closed:
            if not self._queue:
                await self._moved.wait()
                continue
            seq, outbound, method, params = self._queue.popleft()
            with trio.move_on_after(CLIENT_STALL_S) as bound:
                try:
                    await outbound.notify(method, params)
                except Exception:  # the request's stream ended meanwhile: nothing to deliver to
                    logger.debug("%s: dropped %s: its stream is closed", self.label, method, exc_info=True)
            if bound.cancelled_caught:
                await self._stall()
                return
            self._sent = seq
            self._wake()

    async def _stall(self) -> None:
        self.stalled = True
        logger.warning("client %s took no message for %.0f s: disconnecting it and cancelling its %d call(s)",
                       self.label, CLIENT_STALL_S, len(self._calls))
        self.close()
        for scope in list(self._calls):
            scope.cancel(reason="the client stopped reading")
        await self._on_stall()
