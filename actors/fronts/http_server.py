"""The HTTP front's server: HTTP/1.1 served by the front itself, on h11; hypercorn for the rest.

hypercorn costs more per request than the HTTP fast path's own work: a task for the app
and one for the keep-alive timer per request, an ASGI message queue, and a write of its own
(under a lock, in a shielded scope, through a scheduler pass) for a response's head, each
body chunk and the end of the message. A profile at 50 clients put most of the proxy's
CPU there. `serve` serves plain HTTP/1.1 connections itself, one `Connection`
(`mcpvisor.actors.fronts.http_connection`, which lists what it keeps of hypercorn's
behaviour) per connection; this module holds what they share (`Server`: the app, the
config, the ``date``/``server`` headers, shutdown) and the listeners and lifespan.

An ``Upgrade`` request (the dashboard's websocket, h2c) and HTTP/2's preface are handed,
connection and bytes read so far, to hypercorn's own connection (`Server.hand_over`); TLS
fronts are served by hypercorn throughout (its TLS handshake and timeouts). hypercorn's
connection code (its trio package: HTTP/2, websockets) is imported for the first such
connection, not at start (~90 ms of a ``serve --transport http``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from mcpvisor.actors.fronts.http_connection import Connection

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.http_settings import ServerSettings

__all__ = ["Server", "serve"]


class _Replayed:
    """A socket stream whose first reads return bytes already read from it (for hypercorn)."""

    def __init__(self, stream: trio.SocketStream, data: bytes) -> None:
        self._stream = stream
        self._data = data
        self.socket = stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._data:
            data, self._data = self._data, b""
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


class Server:
    """What every connection shares: the app, the config, shutdown."""

    def __init__(self, app: Any, config: ServerSettings, state: dict[str, Any]) -> None:
        self.app = app
        self.config = config
        self.state = state
        self.context: Any = None
        """hypercorn's worker context, made for the first connection handed over to it."""
        self.idle: set[trio.CancelScope] = set()
        """The scopes of connections waiting for a request's head (closed on shutdown)."""
        self.closing = False
        self._headers_at = -1
        self._headers: list[tuple[bytes, bytes]] = []

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers the server adds to every response (``date``, ``server``), made once a second."""
        now = int(time.time())
        if now != self._headers_at:
            self._headers_at = now
            self._headers = self.config.response_headers("h11")
        return self._headers

    async def handle(self, stream: trio.SocketStream) -> None:
        await Connection(self, stream).run()

    async def hand_over(self, stream: trio.SocketStream, seen: bytes) -> None:
        """Serve the rest of a connection with hypercorn's own (websocket, h2c, HTTP/2),
        ``seen`` (what was read of it so far) read again first."""
        from hypercorn.trio.tcp_server import TCPServer
        from hypercorn.trio.worker_context import WorkerContext
        from hypercorn.typing import ConnectionState
        from hypercorn.utils import wrap_app

        if self.context is None:
            self.context = WorkerContext(None)
        if self.closing:  # shut down while these were imported
            await self.context.terminated.set()
        await TCPServer(wrap_app(self.app, self.config.wsgi_max_body_size, "asgi"), self.config.hypercorn(),
                        self.context,
                        ConnectionState(self.state.copy()),
                        _Replayed(stream, seen)).run()  # type: ignore[arg-type]  # a plain stream, as hypercorn serves too

    async def shut_down(self) -> None:
        """Stop the connections waiting for a request; those handed to hypercorn close when idle."""
        self.closing = True
        for scope in list(self.idle):
            scope.cancel()
        if self.context is not None:
            await self.context.terminated.set()


async def serve(
    app: Any,
    config: ServerSettings,
    *,
    lifespan: Callable[[], AbstractAsyncContextManager[Any]],
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` as ``hypercorn.trio.serve(app, config, shutdown_trigger=...)`` does
    (binds, shutdown, ``graceful_timeout``), plain HTTP/1.1 by `Connection`; with TLS
    (``config.certfile``), hypercorn serves it all.

    ``lifespan`` is what ``app``'s ASGI lifespan runs (the SDK's app: its session manager).
    Served plainly, it is entered around the server directly: hypercorn speaks the lifespan
    protocol from its trio package, whose import loads its HTTP/2 and websocket stacks (h2,
    hpack, wsproto: ~90 ms of a ``serve --transport http``) for connections that may never
    come. With TLS hypercorn drives ``app``'s lifespan itself, and ``lifespan`` is not used.
    """
    if config.ssl_enabled:
        import hypercorn.trio

        await hypercorn.trio.serve(app, config.hypercorn(), shutdown_trigger=shutdown_trigger,
                                   task_status=task_status)
        return
    server = Server(app, config, {})
    async with lifespan(), trio.open_nursery() as connections:
        listeners = []
        binds = []
        for sock in config.create_sockets():
            sock.listen(config.backlog)
            listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
            binds.append(f"http://{_address(sock)}")
        task_status.started(binds)
        try:
            async with trio.open_nursery() as accepting:
                accepting.start_soon(partial(trio.serve_listeners, server.handle, listeners,
                                             handler_nursery=connections))
                await shutdown_trigger()
                accepting.cancel_scope.cancel()
        finally:
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
            with trio.CancelScope(shield=True):
                await server.shut_down()


def _address(sock: socket.socket) -> str:
    """``host:port`` of a bound socket, an IPv6 host in brackets."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if sock.family == socket.AF_INET6 else f"{host}:{port}"
