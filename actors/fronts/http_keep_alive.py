"""Keep-alive comments on the HTTP fast path's SSE answers, as the SDK's own SSE answers send.

The SDK's streams (sse_starlette's ``EventSourceResponse``) write a comment line every
`KEEP_ALIVE_S` (``: ping - <UTC time>``), so a client or a load balancer with an idle
timeout (nginx's ``proxy_read_timeout`` is 60 s) does not cut a long, silent tool call. The
fast path's answers (`mcpvisor.actors.fronts.http_exchange`) write the same comment after as
long a silence. One `KeepAlive` timer serves every open answer of the path: a call's own
task only counts what it writes, so a call costs no timer, task or deadline of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Protocol

import trio

__all__ = ["KEEP_ALIVE_S", "KEEP_ALIVE_TICK_S", "QUIET_TICKS", "KeepAlive", "Silent", "ping_comment"]

KEEP_ALIVE_S: Final = 15.0
"""The silence after which an open SSE answer gets a comment: sse_starlette's default ping
interval, which the SDK's streams keep. A comment is not an event: clients skip it and
nothing of it is kept for a resume. A JSON answer gets none (it cannot carry one)."""
KEEP_ALIVE_TICK_S: Final = 1.0
"""The timer's step: a stream is pinged once it has been silent for more than `KEEP_ALIVE_S`
and at most this more, then every `KEEP_ALIVE_S` while it stays silent."""
QUIET_TICKS: Final = round(KEEP_ALIVE_S / KEEP_ALIVE_TICK_S)
"""Steps without a write after which a stream is pinged."""


class Silent(Protocol):
    """An open SSE answer, as the timer sees it."""

    def keep_alive_step(self) -> bool:
        """One step of the timer (a comment is due after `QUIET_TICKS` of them without a
        write); False: the stream is over."""
        ...


def ping_comment() -> bytes:
    """The comment sse_starlette writes (``ServerSentEvent(comment=f"ping - {now}")``)."""
    return b": ping - %s\r\n\r\n" % str(datetime.now(UTC)).encode()


class KeepAlive:
    """The fast path's one keep-alive timer: once a second, a step of every open SSE answer.

    It runs only while an answer is open (the first `watch` starts it, the last answer's
    end stops it), in the front's nursery.
    """

    __slots__ = ("_nursery", "_running", "open")

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._running = False
        self.open: set[Silent] = set()

    def watch(self, stream: Silent) -> None:
        """``stream``'s SSE answer is open: keep it alive until `forget` (or its end)."""
        self.open.add(stream)
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._run)

    def forget(self, stream: Silent) -> None:
        self.open.discard(stream)

    async def _run(self) -> None:
        try:
            while self.open:
                await trio.sleep(KEEP_ALIVE_TICK_S)
                for stream in list(self.open):
                    if not stream.keep_alive_step():
                        self.open.discard(stream)  # over without `forget` (a refusal's)
        finally:
            self._running = False
