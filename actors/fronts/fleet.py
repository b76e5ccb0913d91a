"""What a load balancer sees of the HTTP front: ``/healthz``, ``/readyz`` and the drain's door.

Owns `FleetDoor`, the outermost ASGI layer of the streamable HTTP front
(`mcpvisor.actors.fronts.http.serve_http_front`), in front of the HTTP fast path, the
SDK's app and the dashboard:

* ``GET /healthz``: 200 ``{"status": "ok"}`` while the process serves (a liveness probe);
* ``GET /readyz``: 200 ``{"status": "ready"}`` when the front listens, the proxy is not
  draining and the store answers (the ``ready`` check the caller gives); otherwise 503
  ``{"status": "not ready", "reason": ...}``. Neither needs a token: they say nothing
  about servers, tools or clients, and a balancer's health check carries none;
* while the proxy drains (SIGTERM, `mcpvisor.actors.fronts.drain`): a new JSON-RPC
  request to ``/mcp`` (or a toolset's view) is answered 503 with ``Retry-After`` and
  ``Connection: close`` before anything else reads it, so a balancer that has not yet
  seen ``/readyz`` fail retries it on another replica and the client never sees it
  fail. That holds for a request of a session this replica holds too: the session ends
  with the replica anyway, and a drain that served its new requests could not end
  before ``drainTimeout`` while the client stays busy; refused here, the balancer's
  retry reaches a replica that answers 404 and the client re-initializes at once.
  What lets the requests already in flight finish still passes: a client's answers
  to a server's requests and its notifications (``notifications/cancelled``), a
  ``GET`` that resumes a stream with ``Last-Event-ID``, and ``DELETE``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.errors import ShuttingDown, error_data
from mcpvisor.actors.fronts.asgi import Receive, Scope, Send, read_body
from mcpvisor.actors.fronts.drain import ADMITTED
from mcpvisor.actors.fronts.frames import Refusal, decode_client_frame

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.drain import Drain

logger = logging.getLogger(__name__)

__all__ = ["HEALTH_PATH", "READY_PATH", "RETRY_AFTER_S", "STORE_CHECK_S", "FleetDoor", "Ready"]

HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` of a request refused while draining: a client that reaches this
replica directly (no balancer to retry for it) comes back after a second, by which time
the replica has stopped listening and its address leads elsewhere (or nowhere)."""
STORE_CHECK_S: Final = 2.0
"""How long ``/readyz`` waits for the store's answer: a balancer's check times out in a
few seconds, and a store that slow is not one to send calls through."""
SERVICE_UNAVAILABLE: Final = 503

Ready = Callable[[], Awaitable[str | None]]
"""The store's health: None when reachable, else a short reason (no secret in it)."""

_PASSING_METHODS: Final = frozenset({"DELETE"})


class FleetDoor:
    """``/healthz``, ``/readyz`` and the drain's 503 in front of ``app`` (see the module doc)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], drain: Drain, *,
                 ready: Ready | None, max_body: int, mcp_path: str) -> None:
        self.app = app
        self.drain = drain
        self.ready = ready
        self.max_body = max_body
        self.mcp_path = mcp_path
        self.listening = False
        """Set once the front's sockets are bound (by `serve_http_front`)."""
        self.refused = 0
        """Requests answered 503 while draining (for the log and tests)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path")
        if path == HEALTH_PATH:
            await _json(send, 200, {"status": "ok"})
            return
        if path == READY_PATH:
            reason = await self.not_ready()
            if reason is None:
                await _json(send, 200, {"status": "ready"})
            else:
                await _json(send, SERVICE_UNAVAILABLE, {"status": "not ready", "reason": reason})
            return
        if not self._ours(path):
            await self.app(scope, receive, send)
            return
        if not self.drain.draining:
            scope[ADMITTED] = True  # served to the end, whenever the drain begins
            await self.app(scope, receive, send)
            return
        method = scope.get("method")
        if method in _PASSING_METHODS or (method == "GET" and _resumes(scope)):
            await self.app(scope, receive, send)
            return
        rid: Any = None
        if method == "POST":
            body, replay = await read_body(receive, self.max_body)
            env = decode_client_frame(body) if body is not None else None
            if env is None or isinstance(env, Refusal) or env.method is UNSET or env.id is UNSET:
                # Too large, not JSON-RPC (the app's checks answer it), an answer to a
                # server's request or a notification: what lets a call in flight finish.
                await self.app(scope, replay, send)
                return
            rid = env.id
        self.refused += 1
        await self._refuse(send, rid)

    def _ours(self, path: Any) -> bool:
        return isinstance(path, str) and (path == self.mcp_path or path.startswith(self.mcp_path + "/"))

    async def not_ready(self) -> str | None:
        """Why the front should get no new work now (None: ready)."""
        if not self.listening:
            return "the front is not listening yet"
        if self.drain.draining:
            return "draining: this replica is shutting down"
        if self.ready is None:
            return None
        try:
            with trio.move_on_after(STORE_CHECK_S):
                return await self.ready()
            return f"the store did not answer within {STORE_CHECK_S:g}s"
        except Exception as exc:  # a failing check is an unready replica, never a 500
            logger.debug("the store's health check failed", exc_info=True)
            return f"the store's health check failed ({type(exc).__name__})"

    async def _refuse(self, send: Send, rid: Any) -> None:
        error = error_data(ShuttingDown())
        error["message"] = f"{error['message']}: retry, another replica will take it"
        body = wire.encode({"jsonrpc": "2.0", "id": rid, "error": error})
        await send({"type": "http.response.start", "status": SERVICE_UNAVAILABLE,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"retry-after", str(RETRY_AFTER_S).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _resumes(scope: Scope) -> bool:
    """A GET that comes back for the rest of a broken stream (a call in flight may be on it)."""
    return any(name.lower() == b"last-event-id" for name, _ in scope.get("headers") or ())


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = wire.encode(payload)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})
