"""The events the HTTP front keeps so that a client whose SSE stream breaks gets the rest.

The 2025-11-25 streamable HTTP transport lets a server number the events of its SSE
streams (``id:``), open each stream with a priming event (an id and no data) and a
``retry:`` hint, and replay what a client missed when it comes back with a GET carrying
``Last-Event-ID``. The SDK's session manager does all of that once it has an event store;
this module is ours, bounded in memory (the SDK ships only an unbounded example):

* `ReplayBudget`, one per front: the bound on events and bytes kept across every session,
  oldest evicted first (a client that comes back after its events were evicted gets
  nothing replayed, as if it had never numbered them);
* `SessionEvents`, one per HTTP session (the SDK's ``EventStore``): a session replays only
  its own events. The SDK keys a POST's stream by its request id, so two sessions each
  have a stream "1"; one store shared by every session would mix them, and a client could
  read another session's results by naming one of its event ids.

An event is kept as the JSON it was sent as, so the bytes counted are the bytes kept.

Importing this module loads no SDK: a session the HTTP front opens itself numbers its
events here before the SDK is needed (the SDK's transport only calls `store_event` and
`replay_events_after`, which import what they use).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mcp.server.streamable_http import EventCallback, EventId, StreamId
    from mcp_types import JSONRPCMessage

__all__ = ["DEFAULT_VERSION", "MAX_EVENTS", "MAX_EVENT_BYTES", "PRIMING_SINCE", "RETRY_MS", "ReplayBudget",
           "SessionEvents", "primed", "priming_event", "sse_event"]

MAX_EVENTS: Final = 4096
"""Events kept for replay across every session of a front (priming events included)."""
MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
"""Bytes of events kept for replay across every session of a front: room for a few
results at the default ``maxMessageBytes`` (16 MiB)."""
RETRY_MS: Final = 1000
"""The ``retry:`` a priming event suggests: how long a client whose stream broke waits
before it comes back with ``Last-Event-ID``."""


def sse_event(number: str, data: bytes) -> bytes:
    """``data`` (one JSON-RPC message) as the numbered SSE event the SDK's transport writes."""
    return b"id: %s\r\nevent: message\r\ndata: %s\r\n\r\n" % (number.encode(), data)


PRIMING_SINCE: Final = "2025-11-25"
"""The first revision whose clients read a priming event (older ones would choke on it)."""
DEFAULT_VERSION: Final = "2025-03-26"
"""The version a handshake-era request without ``MCP-Protocol-Version`` is taken to speak
(the SDK's default)."""


def primed(version: str | None) -> bool:
    """Whether a stream answering a client of ``version`` (None: no header) opens with a
    priming event, as the SDK's transport decides."""
    return (version or DEFAULT_VERSION) >= PRIMING_SINCE  # ISO dates compare as strings


def priming_event(number: str) -> bytes:
    """The event a resumable stream opens with, as the SDK's transport writes it: an id, no
    data, and the `RETRY_MS` a client whose stream breaks waits before it comes back."""
    return b"id: %s\r\ndata: \r\nretry: %d\r\n\r\n" % (number.encode(), RETRY_MS)


class ReplayBudget:
    """The bound on what every `SessionEvents` of one front keeps: at most ``max_events``
    events and ``max_bytes`` bytes, the oldest evicted first, whichever session they are of."""

    def __init__(self, max_events: int = MAX_EVENTS, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.events = 0
        self.bytes = 0
        self._ids = itertools.count(1)
        self._order: deque[tuple[SessionEvents, int, int]] = deque()
        """(session, event number, size), oldest first."""

    def mint(self) -> int:
        """A new event's number: unique across the front, increasing."""
        return next(self._ids)

    def session(self) -> SessionEvents:
        """A new session's own event store."""
        return SessionEvents(self)

    def keep(self, owner: SessionEvents, number: int, size: int) -> None:
        """Account for ``owner``'s event ``number`` and evict the oldest over the bounds
        (the new event too, when it alone is over the byte bound)."""
        self._order.append((owner, number, size))
        self.events += 1
        self.bytes += size
        while self._order and (self.events > self.max_events or self.bytes > self.max_bytes):
            old_owner, old_number, old_size = self._order.popleft()
            old_owner.forget(old_number)
            self.events -= 1
            self.bytes -= old_size


class SessionEvents:
    """One HTTP session's events, for its replays only (what the SDK's ``EventStore`` does:
    the SDK's transport calls only these two coroutines, and tests the store for truth)."""

    def __init__(self, budget: ReplayBudget) -> None:
        self._budget = budget
        self._events: dict[int, tuple[StreamId, bytes | None]] = {}
        """Kept events by number: their stream and their JSON (None: a priming event)."""
        self._streams: dict[StreamId, deque[int]] = {}
        """Each stream's kept event numbers, oldest first."""

    def kept(self) -> int:
        """How many of this session's events are kept. (Not ``__len__``: the SDK tests the
        store for truth, and an empty one must still count as a store.)"""
        return len(self._events)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        # As the SDK writes it on the wire (`StreamableHTTPServerTransport._create_event_data`).
        data = None if message is None else message.model_dump_json(by_alias=True,
                                                                     exclude_unset=True).encode()
        return self.store_raw(stream_id, data)

    def store_raw(self, stream_id: StreamId, data: bytes | None) -> EventId:
        """`store_event` for a message already encoded as it goes on the wire (the HTTP fast
        path's frames; None: a priming event)."""
        number = self._budget.mint()
        self._events[number] = (stream_id, data)
        self._streams.setdefault(stream_id, deque()).append(number)
        self._budget.keep(self, number, len(data) if data is not None else 0)
        return str(number)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send this session's events of ``last_event_id``'s stream that came after it;
        None (nothing replayed) for an id this session does not keep."""
        try:
            number = int(last_event_id)
        except ValueError:
            return None
        kept = self._events.get(number)
        if kept is None:
            return None
        from mcp.server.streamable_http import EventMessage
        from mcp_types import jsonrpc_message_adapter

        stream_id = kept[0]
        for later in self._after(stream_id, number):
            data = self._events[later][1]
            if data is not None:  # priming events carry no message
                message = jsonrpc_message_adapter.validate_json(data, by_name=False)
                await send_callback(EventMessage(message, str(later)))
        return stream_id

    def _after(self, stream_id: StreamId, number: int) -> Iterator[int]:
        # A list first: sending may let new events in (and old ones out) meanwhile.
        return iter([n for n in self._streams.get(stream_id, ()) if n > number])

    def forget(self, number: int) -> None:
        """The budget evicted event ``number`` (always this stream's oldest)."""
        kept = self._events.pop(number, None)
        if kept is None:
            return
        stream = self._streams.get(kept[0])
        if stream is not None:
            stream.popleft()
            if not stream:
                del self._streams[kept[0]]
