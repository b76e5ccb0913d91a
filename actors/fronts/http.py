"""The streamable HTTP front's frame checks, in front of the SDK's session manager.

Owns `FrameGuard`, an ASGI wrapper of the SDK's ``StreamableHTTPSessionManager.asgi_app``
(so it runs after the token and Host/Origin checks, for POSTs to ``/mcp`` only). It reads
each POST body (bounded by the body limit the SDK enforces) and answers at once, with
HTTP 400 and a JSON-RPC error, what the SDK would mishandle:

* a body nested deeper than `MAX_JSON_DEPTH`, not JSON, not one object, or with an id
  that is not a string or an integer (the SDK took a float, boolean, object or array id
  for a notification and answered 202, leaving the client waiting forever);
* a request whose id is already in flight on the same session: the SDK keys its
  per-request streams by ``str(id)``, so a second request with that id (``1`` and
  ``"1"`` alike) silently replaced the first, whose POST was then never answered.

Everything else reaches the SDK unchanged, the body replayed as it was read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.fronts.frames import (
    MAX_JSON_DEPTH,
    Refusal,
    decode_client_frame,
    duplicate_id,
    request_refusal,
)

logger = logging.getLogger(__name__)

__all__ = ["MAX_JSON_DEPTH", "FrameGuard"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_HEADER: Final = b"mcp-session-id"
VERSION_HEADER: Final = b"mcp-protocol-version"
BAD_REQUEST: Final = 400
"""The status the SDK gives its own parse and validation errors."""


class FrameGuard:
    """Check each POSTed JSON-RPC message before the SDK's session manager serves it."""

    def __init__(self, app: App, max_body: int) -> None:
        self.app = app
        self.max_body = max_body
        self._in_flight: dict[str, set[str]] = {}
        """Request ids in flight by session id, as ``str(id)`` (the SDK's own key)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        chunks: list[Message] = []
        size = 0
        complete = False
        while size <= self.max_body:
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
            await self.app(scope, replay, send)  # over the limit or disconnected: the SDK answers (413)
            return
        body = b"".join(m.get("body", b"") for m in chunks if m.get("type") == "http.request")
        env = decode_client_frame(body)
        if isinstance(env, Refusal):
            await _answer(send, env)
            return
        refusal = request_refusal(env)
        if refusal is not None:
            await _answer(send, refusal)
            return
        rid = env.id
        session = headers.get(SESSION_HEADER)
        version = headers.get(VERSION_HEADER)
        stateless = version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
        if env.method is UNSET or rid is UNSET or rid is None or session is None or stateless:
            await self.app(scope, replay, send)
            return
        key = str(rid)
        ids = self._in_flight.setdefault(session.decode("latin-1"), set())
        if key in ids:
            await _answer(send, duplicate_id(rid))
            return
        ids.add(key)
        try:
            await self.app(scope, replay, send)
        finally:
            ids.discard(key)
            if not ids:
                self._in_flight.pop(session.decode("latin-1"), None)


def _replayer(chunks: list[Message], receive: Receive) -> Receive:
    pending = list(chunks)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _answer(send: Send, refusal: Refusal) -> None:
    body = wire.encode(refusal.body())
    await send({"type": "http.response.start", "status": BAD_REQUEST,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
