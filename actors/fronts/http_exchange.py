"""One ``tools/call`` POST the HTTP fast path serves (`HttpExchange`), and the sessions
it serves them in.

`mcpvisor.actors.fronts.http_fast` checks and routes a request; an `HttpExchange` is that
request as the stdio fast path's connection (`mcpvisor.actors.fronts.fastpath.FastPath`):
it hosts the call (`mcpvisor.actors.fronts.fastcall.CallHost`), asks the client on an
upstream's behalf, and writes what the call sends to this request's response: JSON, or an
SSE stream with a priming event and numbered events kept for a resume, and the SDK's
keep-alive comment while it is silent (`mcpvisor.actors.fronts.http_keep_alive`); a client
that takes nothing for `CLIENT_STALL_S` is disconnected, and one that goes away has its
call cancelled upstream unless its stream can be resumed
(`mcpvisor.actors.fronts.http_departure`, a base class of `HttpExchange`).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor.actors import wire
from mcpvisor.actors.bridge import CAPABILITY_OF
from mcpvisor.actors.errors import UpstreamError
from mcpvisor.actors.fronts.asgi import Receive, Send
from mcpvisor.actors.fronts.fastask import SERVER_REQUEST_PREFIX
from mcpvisor.actors.fronts.fastpath import FastPath
from mcpvisor.actors.fronts.http_connection import held_writes
from mcpvisor.actors.fronts.http_departure import ClientDeparture
from mcpvisor.actors.fronts.http_keep_alive import QUIET_TICKS, ping_comment
from mcpvisor.actors.fronts.http_own import SESSION_HEADER
from mcpvisor.actors.fronts.outbox import CLIENT_OUTBOX
from mcpvisor.actors.fronts.replay import priming_event, sse_event
from mcpvisor.actors.harness import ClientSession
from mcpvisor.actors.messages import Reply

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.fastcall import FastCall
    from mcpvisor.actors.fronts.http_fast import HttpFast
    from mcpvisor.actors.fronts.replay import SessionEvents
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger("mcpvisor.actors.fronts.http_fast")

__all__ = ["PATH_HEADER", "SESSION_HEADER", "HttpExchange", "HttpSession", "ModernSession", "accepted"]

PATH_HEADER: Final = b"mcpvisor-path"
"""Response header of a call the fast path served (value ``fast``): which path answered."""
_RESPONSE_PREFIX: Final = b'{"jsonrpc":"2.0","id":'
"""How every final frame a call sends begins (a result or an error; notifications name a method)."""
_ERROR_AT: Final = b',"error":{'
HEADERS_GRACE_S: Final = 0.005
"""How long a handshake-era call's SSE headers wait for its answer, so that a quick answer
leaves with them in one write (a slow call's headers go out then, as the SDK's would)."""
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
                       (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no"), (PATH_HEADER, b"fast")]
_JSON_HEADERS: Final = [(b"content-type", b"application/json"), (PATH_HEADER, b"fast")]
_ACCEPTED: Final = 202
_OK: Final = 200
_error_code = msgspec.json.Decoder(wire.Envelope)


class ModernSession(ClientSession):
    """A 2026-07-28 call's session: none (the journal records no session for it, as on the
    SDK path; a session-scoped server's shared instance serves it)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self.label = None  # type: ignore[assignment]


class HttpSession:
    """The fast path's side of one handshake-era HTTP session: its calls in flight by the
    client's id, the requests sent to it on an upstream's behalf, what it declared."""

    __slots__ = ("calls", "capabilities", "client", "ids", "requests", "session_id")

    def __init__(self, session_id: str, capabilities: dict[str, Any]) -> None:
        self.session_id = session_id
        self.calls: dict[int | str, FastCall] = {}
        self.requests: dict[str, Reply[Any]] = {}
        self.capabilities = capabilities
        self.client = ClientSession(session_id)
        """The journal's label for this session's calls (the SDK path labels them the same)."""
        self.ids = 0


class HttpExchange(FastPath, ClientDeparture):
    """One POSTed ``tools/call`` as the stdio fast path's connection: its routing and its
    calls' host (`mcpvisor.actors.fronts.fastcall.CallHost`), writing to this request's response.

    It shares the session's tables (calls in flight, requests to the client) so a client's
    cancel, answers and duplicate ids are seen across its requests; the stdio connection's
    constructor is not run (the tables come from the session, the rest from the front).
    """

    def __init__(self, fast: HttpFast, send: Send, session: HttpSession | None, modern: bool,
                 snapshot: Snapshot | None, transport: Any, events: SessionEvents | None,
                 stream_id: str) -> None:
        front = fast.front
        self.http = fast
        self.backend = fast.backend
        self.drain = None
        self.log_level = lambda: front.log_level
        self.nursery = fast.nursery
        self.ready = True
        self.era = None if modern else "legacy"
        self.stamp = fast.stamp
        self._envelopes = {}
        self._fitted = None
        self._plain = None  # one call per exchange: no routes worth keeping
        self._catalog = None
        self._ids = itertools.count(1)
        self.parked = fast.parked
        self.sess = session
        if session is not None:
            self.calls = session.calls
            self.requests = session.requests
            self.client_capabilities = session.capabilities
            self.session = session.client
        else:
            self.calls = {}
            self.requests = {}
            self.client_capabilities = {}
            self.session = fast.modern_session
        self.view = snapshot
        self._send = send
        self._transport = transport
        self._events = events
        self._stream_id = stream_id
        self._modern = modern
        self.started = False
        self.closed = False
        self.finished = False
        """The call's answer is queued (or the call ended unanswered): nothing more is sent."""
        self.detached = False
        """The client's stream broke and can be resumed: frames go to the event store."""
        self._queue: deque[tuple[bytes, bool]] = deque()
        self._wake = trio.Event()
        self._written = 0
        self._timer = fast.keep_alive
        self._ping = False
        self._heard = -1
        """`_written` when the keep-alive timer last looked (-1: not yet; its first step
        starts the count, as a write does)."""
        self._quiet = 0
        """The keep-alive timer's steps since this answer last wrote."""
        self._watching = False
        self.dropped = 0
        self.trace_headers: dict[str, str] | None = None
        self.protocol_version: str | None = None
        """The request's ``MCP-Protocol-Version`` (its spans say it; set while tracing)."""

    # --- routing: what differs from a stdio connection ----------------------------------------
    def trace_origin(self) -> tuple[Mapping[str, str] | None, str, str | None]:
        return self.trace_headers, "http", self.sess.session_id if self.sess is not None else None

    def session_instance(self, server: str) -> Upstream | None:
        return None  # a session-scoped server: the SDK path's (its session owns the instance)

    def client_capable(self, method: str) -> bool:
        needed = CAPABILITY_OF.get(method)
        return needed is None or needed in self.client_capabilities

    async def ask_client(self, method: str, params: dict[str, Any] | None,
                         max_time: Callable[[], float]) -> dict[str, Any]:
        """Send the handshake-era client ``method`` on this call's stream; its answer comes
        as a POST (`HttpFast._client_response`)."""
        session = self.sess
        if session is None:
            raise UpstreamError(wire.INTERNAL_ERROR, f"no session to send {method} to")
        session.ids += 1
        rid = f"{SERVER_REQUEST_PREFIX}h{session.ids}"
        reply: Reply[dict[str, Any]] = Reply()
        session.requests[rid] = reply
        try:
            self._emit(wire.request_frame(rid, method, params), final=False)
            with trio.fail_after(max_time()):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT, f"the client did not answer {method}") from None
        finally:
            session.requests.pop(rid, None)

    # --- the response ------------------------------------------------------------------------
    # The upstream's reader task hands frames over with `send` (never waits, so a client that
    # stops reading cannot stall an upstream); this request's own task writes them (`wait`).
    async def send(self, frame: bytes) -> None:
        self._emit(frame, final=frame.startswith(_RESPONSE_PREFIX))

    def try_send(self, frame: bytes) -> None:
        self._emit(frame, final=frame.startswith(_RESPONSE_PREFIX))

    def _emit(self, frame: bytes, *, final: bool) -> None:
        if self.finished:
            return
        data = frame[:-1] if frame.endswith(b"\n") else frame
        if final:
            self.finished = True  # nothing after the answer
        elif len(self._queue) >= CLIENT_OUTBOX:
            self.dropped += 1  # progress and log messages are advisory
            if not self._watching:
                self._watching = True
                self.nursery.start_soon(self._watchdog)
            return
        if self.detached:
            self._after_break(data, final)
            return
        self._queue.append((data, final))
        self._wake.set()

    def finish(self) -> None:
        """The call ends unanswered (the client cancelled it): end the stream."""
        self.finished = True
        self._wake.set()

    async def refuse(self, rid: int | str, limit: int) -> None:
        """Over the session's in-flight cap: the SDK's error, at once."""
        frame = wire.error_frame(rid, wire.TOO_MANY_IN_FLIGHT,
                                 f"too many requests in flight on this session (limit {limit}); "
                                 "wait for some to finish",
                                 {"error": "too_many_requests_in_flight", "limit": limit})
        self._emit(frame, final=True)
        await self._deliver_all()

    async def wait(self, receive: Receive) -> None:
        """Write the call's frames until its answer; a client that disconnects first has the
        call cancelled upstream (unless its stream can be resumed: the call then runs on for
        the resume), one that takes no frame for `CLIENT_STALL_S` is disconnected."""
        # A quick answer is written without watching for a disconnect (a client gone by
        # then has its answer dropped, as one that leaves just after it), and a
        # handshake-era one leaves with the headers' priming event in one write.
        if not self._queue and not self.finished:
            with trio.move_on_after(HEADERS_GRACE_S):
                await self._wake.wait()
        try:
            if self.finished:
                await self._write_all()
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, receive, nursery.cancel_scope)
                await self._write_all()
                nursery.cancel_scope.cancel()
        finally:
            self._timer.forget(self)

    async def _write_all(self) -> None:
        answered = False
        if not self._modern:
            if self._queue and self._queue[0][1] and not self.started:
                await self._quick_json(self._queue.popleft()[0])
                return
            try:
                async with held_writes():  # the head, priming event and a quick answer: one write
                    answered = await self._open_sse(self._queue.popleft() if self._queue else None)
            except Exception:  # the connection closed under the write: as a disconnect
                logger.debug("HTTP fast path: the client left before its stream opened", exc_info=True)
                await self._gone()
                answered = True
        if not answered:
            await self._deliver_all()

    async def _deliver_all(self) -> None:
        while not self.detached:
            if not self._queue:
                if self.finished:
                    break
                await self._wake.wait()
                self._wake = trio.Event()
                if self._ping:
                    self._ping = False
                    if not self._queue and not self.finished and not await self._write_ping():
                        return
                continue
            data, final = self._queue.popleft()
            try:
                async with held_writes():  # an event, and the end of the stream after the answer
                    await self._deliver(data, final)
            except Exception:  # the connection closed under the write: as a disconnect
                logger.debug("HTTP fast path: the client left mid-stream", exc_info=True)
                if final:
                    self._queue.appendleft((data, final))
                await self._gone()
                return
            self._written += 1
            if final:
                return
        if self.started and not self.closed and not self.detached:
            await self._write(b"", more=False)  # cancelled by the client: no answer, the stream ends

    def keep_alive_step(self) -> bool:
        """One step of the keep-alive timer (`mcpvisor.actors.fronts.http_keep_alive`): after
        `QUIET_TICKS` without a write, this request's task writes a comment. False: the
        stream is over."""
        if self.closed or self.detached or (self.finished and not self._queue):
            return False
        if self._written != self._heard:
            self._heard = self._written
            self._quiet = 0
            return True
        self._quiet += 1
        if self._quiet >= QUIET_TICKS:
            self._quiet = 0
            self._ping = True
            self._wake.set()
        return True

    async def _write_ping(self) -> bool:
        """Write the SDK's keep-alive comment on the silent stream; False: the client left."""
        try:
            await self._write(ping_comment(), more=True)
        except Exception:  # the connection closed under the write: as a disconnect
            logger.debug("HTTP fast path: the client left during a silent call", exc_info=True)
            await self._gone()
            return False
        return True

    async def _deliver(self, data: bytes, final: bool) -> None:
        if not self.started:
            if not self._modern:
                await self._open_sse()
            elif final:
                await self._json(data)
                return
            else:
                self.started = True
                self._timer.watch(self)
                await self._send({"type": "http.response.start", "status": _OK, "headers": _SSE_HEADERS})
        await self._write(self._event(data), more=not final)

    async def _open_sse(self, first: tuple[bytes, bool] | None = None) -> bool:
        """Start a handshake-era call's SSE response, with its priming event when resumable
        and ``first`` (a queued frame) in the same write. True: that frame was the answer."""
        if self.started:
            return False
        self.started = True
        headers = list(_SSE_HEADERS)
        if self.sess is not None:
            headers.append((SESSION_HEADER, self.sess.session_id.encode("latin-1")))
        body = b""
        if self._events is not None:
            body = priming_event(self._events.store_raw(self._stream_id, None))
        final = False
        if first is not None:
            body += self._event(first[0])
            final = first[1]
        if final:  # the whole stream is known: its length frames it (no chunks to encode or end)
            headers.append((b"content-length", b"%d" % len(body)))
        else:
            self._timer.watch(self)
        await self._send({"type": "http.response.start", "status": _OK, "headers": headers})
        if body:
            await self._write(body, more=not final)
        if first is not None:
            self._written += 1
        return final

    def _event(self, data: bytes) -> bytes:
        """``data`` as one SSE event, numbered and kept when the stream can be resumed."""
        if self._events is not None:
            return sse_event(self._events.store_raw(self._stream_id, data), data)
        return b"event: message\r\ndata: %s\r\n\r\n" % data

    async def _quick_json(self, data: bytes) -> None:
        """A handshake-era call answered before its headers went out: the answer as JSON
        (which the client's ``Accept`` admits), one write, nothing kept to resume."""
        self.started = self.closed = True
        headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(data))]
        if self.sess is not None:
            headers.append((SESSION_HEADER, self.sess.session_id.encode("latin-1")))
        try:
            async with held_writes():
                await self._send({"type": "http.response.start", "status": _OK, "headers": headers})
                await self._send({"type": "http.response.body", "body": data})
        except Exception:  # the connection closed under the write: as a disconnect
            logger.debug("HTTP fast path: the client left before its answer", exc_info=True)
        self._written += 1

    async def _json(self, data: bytes) -> None:
        status = _OK
        if data.find(_ERROR_AT, 0, 256) >= 0:
            from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS

            try:
                error = wire.decode_error(_error_code.decode(data).error)  # type: ignore[arg-type]
                status = ERROR_CODE_HTTP_STATUS.get(error.code, _OK)
            except (wire.DecodeError, wire.ValidationError, msgspec.DecodeError, TypeError):
                status = _OK
        self.started = True
        self.closed = True
        headers = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": data})

    async def _write(self, body: bytes, *, more: bool) -> None:
        self.closed = not more
        await self._send({"type": "http.response.body", "body": body, "more_body": more})


async def accepted(send: Send) -> None:
    async with held_writes():
        await send({"type": "http.response.start", "status": _ACCEPTED,
                          "headers": [(b"content-length", b"0"), (PATH_HEADER, b"fast")]})
        await send({"type": "http.response.body", "body": b""})
