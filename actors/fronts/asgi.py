"""The ASGI pieces the HTTP front's layers share: the message types, and reading a POST's
body up to a bound while keeping it for the app behind (`read_body`).

The frame guard (`mcpvisor.actors.fronts.http.FrameGuard`) and the HTTP fast path
(`mcpvisor.actors.fronts.http_fast`) each read a body before deciding whether to answer it
themselves or hand it on; what they hand on must still see every message they read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["Message", "Receive", "Scope", "Send", "read_body"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def read_body(receive: Receive, max_body: int) -> tuple[bytes | None, Receive]:
    """A request's body, read until it ends or passes ``max_body`` bytes, and a ``receive``
    that replays what was read before reading on.

    The body is None when it did not end within the bound (too large) or the client went
    away: the app behind answers that (413, or nothing)."""
    chunks: list[Message] = []
    size = 0
    complete = False
    while size <= max_body:
        message = await receive()
        chunks.append(message)
        if message.get("type") != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            complete = True
            break
    replay = _replayer(chunks, receive)
    if not complete:
        return None, replay
    if len(chunks) == 1:
        return chunks[0].get("body", b""), replay
    return b"".join(m.get("body", b"") for m in chunks if m.get("type") == "http.request"), replay


def _replayer(chunks: list[Message], receive: Receive) -> Receive:
    pending = list(chunks)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
