"""One plain HTTP/1.1 connection of the HTTP front's server (`Connection`), and `held_writes`.

`mcpvisor.actors.fronts.http_server.serve` accepts; each connection is served here, as
hypercorn's would be but cheaper per request:

* h11 parses (the library hypercorn parses HTTP/1.1 with), so framing, header validation
  and their limits are the same; the app runs in the connection's own task, one request
  after the other (keep-alive), no task or queue per request;
* a write goes straight to the socket while nothing is queued (what the socket does not
  take at once is written the trio way, ahead of anything later); inside `held_writes`
  (the HTTP fast path around a response it writes in one go) the head, body and end of
  message are gathered and leave in one write;
* as hypercorn: the keep-alive timer (``keep_alive_timeout``) from the accept, and from
  each response's end, until a request's head is complete; ``http.disconnect`` when the
  client goes away while the app runs; a 500 when the app fails before answering, the
  connection closed when it fails mid-answer; ``100 Continue``; HEAD, 1xx, 204 and 304
  without a body; ``date`` and ``server`` headers; on shutdown, idle connections closed,
  answers in progress given ``graceful_timeout``.

An ``Upgrade`` request or HTTP/2's preface goes back to the server, connection and bytes
read so far (`mcpvisor.actors.fronts.http_server.Server.hand_over`).
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import h11
import trio

if TYPE_CHECKING:
    from mcpvisor.actors.fronts.asgi import Message, Scope
    from mcpvisor.actors.fronts.http_server import Server

logger = logging.getLogger("mcpvisor.actors.fronts.http_server")  # its log lines kept their name

__all__ = ["Connection", "held_writes"]

MAX_RECV: Final = 65536
MAX_SKIPPED_BODY: Final = 1 << 20
"""The most of an unread request body read past to keep the connection (more: it closes)."""
_NO_BODY_STATUS: Final = frozenset({204, 304})
_DISCONNECT: Final = {"type": "http.disconnect"}


class _Held:
    __slots__ = ("chunks", "connection", "task")

    def __init__(self, task: trio.lowlevel.Task | None) -> None:
        self.task = task
        self.connection: Connection | None = None
        self.chunks: list[bytes] = []


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("mcpvisor_http_held", default=None)


@asynccontextmanager
async def held_writes() -> AsyncIterator[None]:
    """Gather what this task writes to its connection until the block ends, then write it
    at once. Only for a block that waits on nothing else (a response written in one go):
    nothing reaches the client before the block ends. Tasks started inside the block write
    as usual (the holding task is remembered, not only the context)."""
    held = _Held(trio.lowlevel.current_task())
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
        held.task = None  # a copied context that outlives the block holds nothing
        if held.connection is not None and held.chunks:
            await held.connection.write(b"".join(held.chunks))


class Connection:
    """One HTTP/1.1 connection (see the module doc)."""

    def __init__(self, server: Server, stream: trio.SocketStream) -> None:
        self.server = server
        self.config = server.config
        self.stream = stream
        self.sock = stream.socket
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.config.h11_max_incomplete_size)
        self.lock = trio.Lock()
        self.seen = bytearray()
        """The bytes of the request being read (handed on with an Upgrade)."""
        self.client: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None
        self.requests = 0
        # the request being served
        self.method = ""
        self.started = False
        self.complete = False
        self.suppress = False
        self.body_done = False
        self.gone = False
        self.watching = False
        self.watch: trio.CancelScope | None = None
        self.left = trio.Event()

    async def run(self) -> None:
        try:
            self.client = _address(self.sock.getpeername())
            self.local = _address(self.sock.getsockname())
            while await self._one():
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client went away
        except Exception:  # one connection's failure is not the front's
            logger.exception("HTTP connection from %s failed", self.client)
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    async def _close(self) -> None:
        try:
            await self.stream.send_eof()
        except (trio.BrokenResourceError, trio.BusyResourceError, trio.ClosedResourceError, OSError):
            pass
        await self.stream.aclose()

    async def _one(self) -> bool:
        """Serve one request; False: the connection is done (or handed to hypercorn)."""
        event = await self._head()
        if event is None:
            return False
        if _upgrade(event):
            await self.server.hand_over(self.stream, bytes(self.seen))
            return False
        self.requests += 1
        self.method = event.method.decode("ascii").upper()
        self.started = self.complete = self.suppress = self.body_done = False
        self.watching = False
        self.left = trio.Event()
        path, _, query = event.target.partition(b"?")
        scope: Scope = {
            "type": "http", "http_version": event.http_version.decode(),
            "asgi": {"spec_version": "2.1", "version": "3.0"},
            "method": self.method, "scheme": "http", "path": unquote(path.decode("ascii")),
            "raw_path": path, "query_string": query, "root_path": self.config.root_path,
            "headers": list(event.headers), "client": self.client, "server": self.local,
            "state": self.server.state.copy(), "extensions": {},
        }
        try:
            await self.server.app(scope, self._receive, self._send)
        except Exception:
            logger.exception("Error in ASGI Framework")
        finally:
            self._leave()
        if self.watching:  # a task the app left behind reads the socket: let it stop first
            await trio.lowlevel.checkpoint()
            if self.watching:
                return False
        if not self.started:
            await self._error(500)
            return False
        if not self.complete or self.gone:
            return False  # the answer cannot be finished: the client sees the connection close
        h = self.h11
        if h.their_state is h11.SEND_BODY and not await self._skip_body():
            return False
        if h.our_state is not h11.DONE or h.their_state is not h11.DONE or self.server.closing:
            return False
        try:
            h.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        self.seen = bytearray(h.trailing_data[0])
        return True

    async def _skip_body(self) -> bool:
        """Read past the rest of a request body the app answered without reading (a refusal),
        so the connection serves the next request; False: too much of it, or too slow."""
        skipped = 0
        with trio.move_on_after(self.config.keep_alive_timeout):
            while skipped <= MAX_SKIPPED_BODY:
                try:
                    event = self.h11.next_event()
                except h11.RemoteProtocolError:
                    return False
                if event is h11.NEED_DATA:
                    data = await self.stream.receive_some(MAX_RECV)
                    if not data:
                        return False
                    self.h11.receive_data(data)
                elif isinstance(event, h11.Data):
                    skipped += len(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return True
                else:
                    return False
        return False

    async def _head(self) -> h11.Request | None:
        """The next request's head, read within the keep-alive timer (None: the connection ends)."""
        scope = trio.CancelScope(deadline=trio.current_time() + self.config.keep_alive_timeout)
        if self.server.closing:
            return None
        self.server.idle.add(scope)
        try:
            with scope:
                while True:
                    try:
                        event = self.h11.next_event()
                    except h11.RemoteProtocolError as error:
                        await self._error(error.error_status_hint)
                        return None
                    if event is h11.NEED_DATA:
                        data = await self.stream.receive_some(MAX_RECV)
                        self.seen += data
                        self.h11.receive_data(data)  # b"": the client closed
                        continue
                    if isinstance(event, h11.Request):
                        return event
                    return None  # ConnectionClosed, PAUSED without a request
        finally:
            self.server.idle.discard(scope)
        return None  # idle too long, or shutting down

    async def _error(self, status: int) -> None:
        headers = [(b"content-length", b"0"), (b"connection", b"close"), *self.server.response_headers()]
        try:
            data = self.h11.send(h11.Response(status_code=status, headers=headers))
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        await self.write(data)

    # --- ASGI --------------------------------------------------------------------------------
    async def _receive(self) -> Message:
        if not self.body_done:
            h = self.h11
            if h.they_are_waiting_for_100_continue:
                await self.write(h.send(h11.InformationalResponse(
                    status_code=100, headers=self.server.response_headers())))
            chunks: list[bytes] = []
            while True:
                try:
                    event = h.next_event()
                except h11.RemoteProtocolError:
                    self.body_done = self.gone = True
                    return _DISCONNECT
                if event is h11.NEED_DATA:
                    if chunks:
                        return {"type": "http.request", "body": b"".join(chunks), "more_body": True}
                    data = await self.stream.receive_some(MAX_RECV)
                    if not data:
                        self.body_done = self.gone = True
                        return _DISCONNECT
                    h.receive_data(data)
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self.body_done = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                else:  # ConnectionClosed
                    self.body_done = self.gone = True
                    return _DISCONNECT
        return await self._disconnected()

    async def _disconnected(self) -> Message:
        """Wait until the client goes away or the answer is done, as ASGI's receive does
        after the body. One caller reads the socket; any other waits for the app to end."""
        if self.gone or self.complete:
            return _DISCONNECT
        if self.watching:
            await self.left.wait()
            return _DISCONNECT
        self.watching = True
        try:
            with trio.CancelScope() as self.watch:  # cancelled when the answer is done
                await self._read_for_eof()
        finally:
            self.watching = False
            self.watch = None
        return _DISCONNECT

    async def _read_for_eof(self) -> None:
        """Read what the client sends after its request (kept for the next request) until it
        closes the connection."""
        while True:
            await trio.lowlevel.wait_readable(self.sock)
            try:
                data = os.read(self.sock.fileno(), MAX_RECV)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self.gone = True
                self.h11.receive_data(b"")
                self.left.set()
                return
            self.seen += data
            self.h11.receive_data(data)

    def _leave(self) -> None:
        """The answer is done, or the app returned: a receive() waiting for a disconnect returns."""
        self.left.set()
        if self.watch is not None:
            self.watch.cancel()

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        h = self.h11
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("the response has already started")
            self.started = True
            status = int(message["status"])
            self.suppress = self.method == "HEAD" or status < 200 or status in _NO_BODY_STATUS
            headers = [(bytes(n).strip(), bytes(v).strip()) for n, v in message.get("headers") or ()]
            headers.extend(self.server.response_headers())
            if self.requests >= self.config.keep_alive_max_requests:
                headers.append((b"connection", b"close"))
            await self._out(h.send(h11.Response(status_code=status, headers=headers)))
        elif kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError(f"unexpected {kind}")
            body = message.get("body", b"")
            data = h.send(h11.Data(data=bytes(body))) if body and not self.suppress else b""
            if not message.get("more_body", False):
                self.complete = True
                data = (data or b"") + (h.send(h11.EndOfMessage()) or b"")
                self._leave()
            if data:
                await self._out(data)
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    async def _out(self, data: bytes | None) -> None:
        if not data:
            return
        held = _HELD.get()
        if held is not None and held.task is trio.lowlevel.current_task() and held.connection in (None, self):
            held.connection = self
            held.chunks.append(data)
            return
        await self.write(data)

    async def write(self, data: bytes) -> None:
        """Write ``data``: straight to the socket while nothing is queued, else in turn."""
        if self.gone:
            return
        fd = self.sock.fileno()  # -1 once closed: never a number reused by another socket
        if fd >= 0 and not self.lock.locked():
            try:
                sent = os.write(fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:  # the client went away
                self.gone = True
                return
            if sent == len(data):
                return
            data = data[sent:]
        with trio.CancelScope(shield=True):  # the rest must follow what was written
            async with self.lock:
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.gone = True


def _upgrade(event: h11.Request) -> bool:
    if event.method == b"PRI":
        return True
    return any(name == b"upgrade" for name, _ in event.headers)


def _address(addr: Any) -> tuple[str, int] | None:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return str(addr[0]), int(addr[1])
    return None
