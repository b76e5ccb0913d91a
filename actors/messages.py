"""Messages between actors and the events the supervisor publishes.

Frozen records, dispatched by type (docs/style.md rule 6). Requests that need an answer carry
a one-shot `Reply`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Final, Generic, TypeVar

import msgspec
import trio

T = TypeVar("T")


class Reply(Generic[T]):
    """A one-shot answer slot: the asker awaits `wait`, the actor calls `set` or `fail` once."""

    __slots__ = ("_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


# --- events published on the supervisor's stream ------------------------------------


class StateChanged(msgspec.Struct, frozen=True, tag=True):
    server: str
    state: str
    previous: str
    reason: str | None = None
    retry_at: float | None = None
    restarts: int = 0
    pid: int | None = None


class ListChanged(msgspec.Struct, frozen=True, tag=True):
    kinds: tuple[str, ...]
    version: int


class CallFinished(msgspec.Struct, frozen=True, tag=True):
    server: str
    tool: str
    duration: float
    ok: bool
    error: str | None = None


Event = StateChanged | ListChanged | CallFinished

SUBSCRIBER_BACKLOG: Final = 1000
"""Events kept for a subscriber that is not reading; older ones are dropped (and counted)."""


class _Subscriber:
    __slots__ = ("closed", "dropped", "queue", "wake")

    def __init__(self) -> None:
        self.queue: deque[Event] = deque(maxlen=SUBSCRIBER_BACKLOG)
        self.wake = trio.Event()
        self.dropped = 0
        self.closed = False


class EventBus:
    """Fan-out of `Event`s to any number of readers; publishing never blocks."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        """``on_change``: called when the bus gains its first subscriber or loses its last."""
        self._subs: list[_Subscriber] = []
        self._on_change = on_change
        self.has_subscribers = False
        """Someone reads the bus now (a plain attribute, kept current)."""

    def _count_changed(self) -> None:
        if self.has_subscribers != bool(self._subs):
            self.has_subscribers = bool(self._subs)
            if self._on_change is not None:
                self._on_change()

    def publish(self, event: Event) -> None:
        for sub in self._subs:
            if len(sub.queue) == SUBSCRIBER_BACKLOG:
                sub.dropped += 1
            sub.queue.append(event)
            sub.wake.set()

    def close(self) -> None:
        for sub in self._subs:
            sub.closed = True
            sub.wake.set()

    async def subscribe(self) -> AsyncIterator[Event]:
        """Yield events published from now on, until the bus closes."""
        sub = _Subscriber()
        self._subs.append(sub)
        self._count_changed()
        try:
            while True:
                while sub.queue:
                    yield sub.queue.popleft()
                if sub.closed:
                    return
                await sub.wake.wait()
                sub.wake = trio.Event()
        finally:
            self._subs.remove(sub)
            self._count_changed()
