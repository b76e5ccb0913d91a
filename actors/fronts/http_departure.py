"""A client that stops reading or goes away while the HTTP fast path answers its call.

Owns `ClientDeparture`, a base class of `mcpvisor.actors.fronts.http_exchange.HttpExchange`:

* the stall watchdog: once the answer's queue is full, a client that takes no frame for
  `CLIENT_STALL_S` has its calls cancelled upstream and its session ended;
* the disconnect watch: a client that leaves before its answer has its calls cancelled
  upstream, unless its stream can be resumed;
* the resume: a resumable stream's later frames are kept for the client's
  ``Last-Event-ID`` and handed to the stream it came back on.

Separate from `mcpvisor.actors.fronts.http_exchange`, which writes the answer while the
client reads it: this is what happens when it does not. A base class rather than an
object the exchange holds, so the exchange calls it as its own methods, with no object
in between.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from mcpvisor.actors.fronts.http_own import OwnSession
from mcpvisor.actors.fronts.outbox import CLIENT_OUTBOX, CLIENT_STALL_S

if TYPE_CHECKING:
    from collections import deque

    from mcpvisor.actors.fronts.asgi import Receive
    from mcpvisor.actors.fronts.fastcall import FastCall
    from mcpvisor.actors.fronts.http_exchange import HttpSession
    from mcpvisor.actors.fronts.replay import SessionEvents

logger = logging.getLogger("mcpvisor.actors.fronts.http_fast")


class ClientDeparture:
    """The client's side going wrong mid-answer (`HttpExchange` sets these attributes)."""

    finished: bool
    detached: bool
    calls: dict[int | str, FastCall]
    nursery: trio.Nursery
    sess: HttpSession | None
    _queue: deque[tuple[bytes, bool]]
    _written: int
    _watching: bool
    _transport: Any
    _events: SessionEvents | None
    _stream_id: str
    _modern: bool

    if TYPE_CHECKING:
        def release(self, front_id: int | str, call: FastCall) -> bool: ...

    async def _watchdog(self) -> None:
        """The queue is full: the client is reading slowly or not at all. The server's
        socket writes cannot be interrupted, so the stall is seen here: no frame written
        for `CLIENT_STALL_S` while frames wait."""
        while not self.finished or self._queue:
            seen = self._written
            await trio.sleep(CLIENT_STALL_S)
            if self._written == seen and self._queue and not self.detached:
                await self._stalled()
                return
            if len(self._queue) < CLIENT_OUTBOX:
                break
        self._watching = False

    async def _stalled(self) -> None:
        """The client took nothing for `CLIENT_STALL_S`: cancel its calls, end its session."""
        session = self.sess
        calls = [c for c in (session.calls if session is not None else self.calls).values()]
        label = session.session_id if session is not None else "a 2026-07-28 client"
        logger.warning("client %s took no message for %.0f s: disconnecting it and cancelling its %d call(s)",
                       label, CLIENT_STALL_S, len(calls))
        self.finished = True
        self._queue.clear()
        for call in calls:
            if call.fast.release(call.front_id, call):
                # In the front's nursery: the link sends the cancel when its writer can,
                # however long the upstream's stdin stays full.
                self.nursery.start_soon(call.cancel, "the client stopped reading")
        if self._transport is not None:
            with trio.move_on_after(CLIENT_STALL_S):
                await self._transport.terminate()

    def _after_break(self, data: bytes, final: bool) -> None:
        """The client's stream broke: keep the event for its ``Last-Event-ID`` and hand it to
        the stream it resumed on, if it has come back."""
        assert self._events is not None
        number = self._events.store_raw(self._stream_id, data)  # first: nothing below may lose it
        transport = self._transport
        if isinstance(transport, OwnSession):  # a session the front opened: the SDK's once handed over
            transport = transport.transport
        if transport is None:
            return  # not handed over yet: the client's GET hands it over and is replayed the store
        # The SDK is loaded (the session is its manager's): no import of it here waits on another.
        from mcp.server.streamable_http import EventMessage
        from mcp_types import jsonrpc_message_adapter

        from mcpvisor.actors.sdk_compat import resumed_stream

        stream = resumed_stream(transport, self._stream_id)
        if stream is None:
            return
        message = jsonrpc_message_adapter.validate_json(data, by_name=False)
        try:
            stream.send_nowait(EventMessage(message, number))
            if final:
                stream.close()
        except Exception:  # full or closed: the client has what the event store keeps
            logger.debug("HTTP fast path: the resumed stream took no more", exc_info=True)

    async def _watch(self, receive: Receive, scope: trio.CancelScope) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        if self.finished and not self._queue:
            return
        await self._gone()
        scope.cancel()

    async def _gone(self) -> None:
        """The client disconnected before the answer was written."""
        if self._events is not None and not self._modern:
            self.detached = True  # resumable: the rest is kept for the client's Last-Event-ID
            while self._queue:
                self._after_break(*self._queue.popleft())
            return
        self._queue.clear()
        for front_id, call in list(self.calls.items()):
            if call.fast is self and self.release(front_id, call):
                self.nursery.start_soon(call.cancel, "client disconnected")  # outlives this request
        self.finished = True
