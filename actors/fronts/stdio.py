"""The stdio front: our own file descriptors, the SDK server behind them.

Owns the client's stdin/stdout for one connection (what Claude Code launches):

* fds 0 and 1 are duplicated for the wire, then fd 0 is pointed at /dev/null and
  fd 1 at stderr, so a stray ``print`` anywhere in the process cannot corrupt the
  protocol (the SDK's own stdio server does the same);
* the reader classifies each frame by its envelope (msgspec): malformed JSON,
  batches, requests with a null or reused id are answered here with the JSON-RPC
  error the spec asks for; a handshake-era client's ``initialize``, ``ping`` and lists
  are answered without the SDK (`mcpvisor.actors.fronts.stdio_own`), ``tools/call`` by
  the fast path; everything else goes to the SDK `Server` over in-memory streams
  (docs/hotpath.md: the SDK's stdio transport moves every read and write to a worker
  thread, ~0.55 ms per call; ours does not), started for the connection by the first
  message that needs it, the client's handshake replayed into it first;
* the writer turns the SDK's outgoing messages into lines on one `FrameWriter`;
* the connection's `ClientSession`: one per connection, shared by the fast path and
  the SDK's handlers (`Front.serve_connection`), so a session-scoped server's calls
  reach one instance whichever way they go; it ends when the connection does, which
  stops that instance.

This is the seam the fast path of `tools/call` plugs into (actors/fastpath.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
import trio
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.core.vocabulary import DEFAULT_TIMEOUT_S
from mcpvisor.actors.framing import (
    FrameWriter,
    LineReader,
    OversizedLine,
    StreamBroken,
    end_batch,
    flush_held_writes,
    hold_writes,
    runs_of,
    widen_pipe,
    write_held_now,
)
from mcpvisor.actors.fronts.fastpath import FastPath
from mcpvisor.actors.fronts.frames import (
    Refusal,
    decode_client_frame,
    duplicate_id,
    request_refusal,
)
from mcpvisor.actors.fronts.sdk_load import load_sdk, sdk_loaded
from mcpvisor.actors.fronts.stdio_own import REPLAY_ID, OwnAnswers, StdioClient
from mcpvisor.actors.harness import ClientSession

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

SDK_BUFFER: Final = 256
"""Messages queued between our pumps and the SDK server in each direction."""


class StdioFrontStatistics(msgspec.Struct, frozen=True):
    """What one stdio connection has served so far (for tests and bench/)."""

    sdk_tool_calls: int
    """``tools/call`` requests the SDK served: the fast path was off, or could not take
    them (before the handshake, a server not ready or not on stdio, a management tool...)."""
    fast_in_flight: int
    """Fast-path calls waiting for their upstream's answer now."""
    sdk_in_flight: int
    """Requests the SDK is serving now."""
    sdk_started: bool
    """The SDK's server serves this connection (a message needed it, or own answers are off)."""


class StdioFront:
    """One client connection over a pair of byte streams (normally our stdin/stdout)."""

    def __init__(self, front: Any, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream,
                 *, max_message: int, fast_path: bool = True) -> None:
        self.front = front
        self._receive = receive
        self.writer = FrameWriter(send)
        self.max_message = max_message
        self._use_fast_path = fast_path
        self.fast_path: FastPath | None = None
        # Typed by annotation only: the SDK's message type is imported once the SDK serves,
        # and the streams to and from its server are made then (`_start_sdk`): anyio's
        # memory streams cost ~6 ms of imports a connection the proxy answers itself never needs.
        self._to_sdk: MemoryObjectSendStream[SessionMessage | Exception]
        self._sdk_in: MemoryObjectReceiveStream[SessionMessage | Exception]
        self._sdk_out: MemoryObjectSendStream[SessionMessage]
        self._from_sdk: MemoryObjectReceiveStream[SessionMessage]
        self._in_flight: set[int | str] = set()
        self.session = ClientSession()
        """This connection's session: the key of its session-scoped instances, on both paths."""
        self._sdk_tool_calls = 0
        self.own = OwnAnswers(front) if fast_path else None
        """What this connection answers without the SDK (None: ``settings.fastPath`` is off,
        the SDK serves everything but the envelope checks)."""
        self.client = StdioClient(self.session.label, self.writer, self._ask_client)
        """The connection as the client registry sees it while the SDK does not serve it."""
        self._sdk_started = False
        self._nursery: trio.Nursery | None = None

    def statistics(self) -> StdioFrontStatistics:
        """Calls served the SDK way so far and requests in flight (a frozen record)."""
        fast = self.fast_path
        return StdioFrontStatistics(self._sdk_tool_calls, len(fast.calls) if fast is not None else 0,
                                    len(self._in_flight), self._sdk_started)

    async def serve(self) -> None:
        """Serve until the client closes its end (EOF on stdin), or until the proxy's
        drain is done (`mcpvisor.actors.fronts.drain`: every request in flight has its answer), then end
        the session (its session-scoped instances stop; `mcpvisor.sessions` bounds the wait)."""
        drain = getattr(self.front, "drain", None)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._use_fast_path:
                    self.fast_path = FastPath(self.front.backend, self.writer, nursery,
                                              self.front.server_info_stamp, self.session,
                                              log_level=lambda: self.front.log_level, drain=drain,
                                              hand_back=self._hand_back)
                    if drain is not None:
                        drain.add_fast_path(self.fast_path)
                if self.own is None:
                    await self._start_sdk()
                try:
                    async with trio.open_nursery() as reading:
                        if drain is not None:
                            reading.start_soon(_cancel_when_set, drain.done, reading.cancel_scope)
                        await self._pump_in()
                        reading.cancel_scope.cancel()
                finally:
                    # Past here the connection ends as at EOF: the SDK's answers already
                    # queued are written by _pump_out before it returns.
                    if self.fast_path is not None:
                        if drain is not None:
                            drain.discard_fast_path(self.fast_path)
                        await self.fast_path.close()
                    if self._sdk_started:  # else no SDK server, and no streams to it
                        await self._to_sdk.aclose()
        finally:
            self.client.exit_stack.close()
            await self.session.end()

    async def _run_server(self) -> None:
        await self.front.serve_connection(self._sdk_in, self._sdk_out, self.session)

    async def _ask_client(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Ask the client ``method`` outside any call (`StdioClient`): the fast path's way, bounded
        like a call's quiet time (the client may have to ask a person)."""
        assert self.fast_path is not None  # own answers, and so a tracked StdioClient, need it
        return await self.fast_path.ask_client(method, params, lambda: DEFAULT_TIMEOUT_S)

    async def _start_sdk(self) -> None:
        """Start the SDK's server for this connection (once), the client's handshake first:
        the SDK's session is then initialized as if it had answered it (`OwnAnswers.replay`)."""
        if self._sdk_started:
            return
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        assert self._nursery is not None
        self._to_sdk, self._sdk_in = anyio.create_memory_object_stream(SDK_BUFFER)
        self._sdk_out, self._from_sdk = anyio.create_memory_object_stream(SDK_BUFFER)
        self._sdk_started = True
        self._nursery.start_soon(self._pump_out)
        self._nursery.start_soon(self._run_server)
        for frame in self.own.replay() if self.own is not None else ():
            await self._to_sdk.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(frame)))

    async def _reply(self, frame: bytes) -> None:
        try:
            await self.writer.send(frame)
        except StreamBroken:
            pass

    async def _pump_in(self) -> None:
        try:
            async for batch in LineReader(self._receive, self.max_message):
                # Several frames in one read: what they write leaves in one write per pipe.
                held = hold_writes() if len(batch) > 1 else None
                now: float | None = None  # the clock, read once for the calls of this read
                try:
                    for n, run in enumerate(runs_of(batch)):
                        if n:  # the peer starts on the run before meanwhile
                            wait = write_held_now()
                            if wait is not None:
                                await wait
                                now = None
                        for line in run:
                            if type(line) is not bytes:  # cheaper than isinstance on a Struct, per frame
                                assert isinstance(line, OversizedLine)
                                await self._reply(wire.error_frame(
                                    None, wire.INVALID_REQUEST,
                                    f"message of {line.size}+ bytes is larger than the limit of "
                                    f"{self.max_message} bytes"))
                                now = None
                                continue
                            # Crash barrier: whatever goes wrong with one frame ends that frame,
                            # answered (when it was a request) and logged, never the connection.
                            try:
                                if now is None:
                                    now = trio.current_time()
                                taken = self._take(line, now)
                                if taken is True:
                                    continue
                                now = None  # what follows may wait: read the clock again after it
                                if taken is False:
                                    await self._frame(line)
                                elif type(taken) is wire.Envelope:
                                    await self._frame(line, taken)
                                else:
                                    await taken  # type: ignore[misc]
                            except Exception:
                                now = None
                                await self._frame_failed(line)
                finally:
                    if held is not None:
                        wait = end_batch(held)
                        if wait is not None:
                            await wait
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _frame_failed(self, line: bytes) -> None:
        logger.exception("stdio front: failed to handle a frame")
        rid = _id_of(line)
        if rid is not None:
            self._in_flight.discard(rid)
            await self._reply(wire.error_frame(rid, wire.INTERNAL_ERROR,
                                               "internal error while handling this request"))

    def _take(self, line: bytes, now: float) -> bool | wire.Envelope | Awaitable[None]:
        """The reader's lane for its busiest frame: a ``tools/call`` on a connection past its
        first request, taken by the fast path with no coroutine made (True, or the wait left
        for the reader to await). False: `_frame` handles ``line`` from the start; an envelope:
        a call the fast path declined, for `_frame` to give the SDK."""
        fast, own = self.fast_path, self.own
        if fast is None or own is None or (own.initialize is None and own.modern_meta is None):
            return False
        taken = fast.take_line(line, now, self._in_flight)
        if taken is None:
            return False
        if taken is False:
            return wire.decode_envelope(line)  # declined: the SDK's, as the envelope `_frame` reads
        return taken

    async def _frame(self, line: bytes, declined: wire.Envelope | None = None) -> None:
        """Handle one client frame (``declined``: a call `_take` offered the fast path, which
        declined it: it goes to the SDK)."""
        if declined is not None:
            env: wire.Envelope | Refusal = declined
        else:
            env = decode_client_frame(line)
        if isinstance(env, Refusal):
            await self._reply(env.frame())
            return
        rid = env.id
        if env.method is UNSET:
            if env.result is UNSET and env.error is UNSET:
                refusal = request_refusal(env)
                assert refusal is not None
                await self._reply(refusal.frame())
                return
            if self.fast_path is not None and self.fast_path.client_response(env, line):
                return
        elif rid is not UNSET:
            if rid is None:
                await self._reply(wire.error_frame(None, wire.INVALID_REQUEST,
                                                   "invalid request: id must not be null"))
                return
            if rid in self._in_flight or (self.fast_path is not None and self.fast_path.owns(rid)):
                await self._reply(duplicate_id(rid).frame())
                return
            if self.own is not None and env.method == "tools/call":
                if self.own.modern_meta is None and self.own.initialize is None and env.jsonrpc == "2.0":
                    self.own.note_call(env, line)  # a connection's first request: its era
            elif self.own is not None and env.jsonrpc == "2.0":
                started = trio.current_time()
                frame = self.own.answer(env.method, env, line)
                if frame is not None and self.front.on_served is not None:
                    self.front.on_served(env.method, started, trio.current_time(), None)
                if frame is None:
                    pass
                elif env.method == "initialize":
                    # Tracked from its first request on, as the SDK's middleware does.
                    self.client.client_capabilities = self.own.capabilities()
                    self.front.clients.track_own(self.client)
                    if self.fast_path is not None:
                        self.fast_path.observe(env)
                    await self._reply(frame)
                    if self.fast_path is not None:
                        self.fast_path.sdk_answered(rid)  # the init gate, as for the SDK's answer
                    return
                else:
                    await self._reply(frame)
                    return
            fast = self.fast_path if declined is None else None
            if fast is not None and await fast.client_request(env, line):
                return
            self._in_flight.add(rid)
            if env.method == "tools/call":
                self._sdk_tool_calls += 1  # counted off the fast path: it costs that path nothing
        elif env.method == "notifications/cancelled":
            if self.fast_path is not None and await self.fast_path.client_cancel(env):
                return
            if env.params is not UNSET:
                try:
                    cancelled = wire.decode_cancel(env.params).requestId
                except (wire.DecodeError, wire.ValidationError):
                    return  # MCP cancellation: malformed cancels SHOULD be ignored
                if cancelled is not None:
                    self._in_flight.discard(cancelled)
        if self.fast_path is not None and (env.method == "initialize"
                                           or env.method == "notifications/initialized"):
            self.fast_path.observe(env)
        if env.jsonrpc != "2.0":
            if env.method is not UNSET and rid is not UNSET:
                await self._reply(wire.error_frame(rid, wire.INVALID_REQUEST,
                                                   'invalid request: "jsonrpc" must be "2.0"'))
                self._in_flight.discard(rid)
            return
        own = self.own
        if env.method == "notifications/initialized" and own is not None and own.initialize is not None:
            own.note_initialized(env)
            if not self._sdk_started:
                return  # replayed into the SDK's server if it is ever started
        await self._to_sdk_server(env, line)

    async def _hand_back(self, env: wire.Envelope, line: bytes) -> None:
        """A call the fast path held while its server started, given to the SDK's path (the
        server did not come up in time: the SDK's answer says why)."""
        self._in_flight.add(env.id)  # type: ignore[arg-type]
        self._sdk_tool_calls += 1
        await self._to_sdk_server(env, line)

    async def _to_sdk_server(self, env: wire.Envelope, line: bytes) -> None:
        """The SDK serves what is left: its model of the message (the SDK is loaded for it,
        off the event loop: `mcpvisor.actors.fronts.sdk_load`)."""
        if not sdk_loaded():
            await flush_held_writes()  # what this read answered leaves before the wait
            await load_sdk()
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        rid = env.id
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception:
            if env.method is not UNSET and rid is not UNSET:
                self._in_flight.discard(rid)
                await self._reply(wire.error_frame(rid, wire.INVALID_REQUEST,
                                                   "invalid request: malformed message"))
            return
        await self._start_sdk()
        try:
            self._to_sdk.send_nowait(SessionMessage(message))
        except anyio.WouldBlock:
            await flush_held_writes()  # the SDK is behind: what this read wrote leaves before we wait
            await self._to_sdk.send(SessionMessage(message))

    async def _pump_out(self) -> None:
        """Write what the SDK's server sends (runs from `_start_sdk` on, until it closes its side)."""
        import mcp_types as types

        async with self._from_sdk:
            async for message in self._from_sdk:
                msg = message.message
                if isinstance(msg, types.JSONRPCResponse | types.JSONRPCError):
                    if msg.id == REPLAY_ID:
                        if isinstance(msg, types.JSONRPCError):
                            logger.warning("stdio front: the SDK refused the replayed handshake: %s",
                                           msg.error.message)
                        continue  # the answer to the replayed handshake: the client had its own
                    self._in_flight.discard(msg.id)
                data = msg.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                try:
                    await self.writer.send(data)
                except StreamBroken:
                    return
                if self.fast_path is not None and isinstance(msg, types.JSONRPCResponse):
                    # The init gate opens only once the initialize reply is written or queued
                    # in the writer, so no fast-path answer can leave ahead of it.
                    self.fast_path.sdk_answered(msg.id)


def _id_of(line: bytes) -> int | str | None:
    """The request id of ``line`` if it is a request whose envelope reads, else None."""
    env = decode_client_frame(line)
    if isinstance(env, Refusal) or env.method is UNSET or env.id is UNSET:
        return None
    return env.id


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    """The proxy is stopping and every request has its answer: stop reading (as at EOF)."""
    await event.wait()
    scope.cancel(reason="mcpvisor is shutting down")


@asynccontextmanager
async def claim_stdio() -> AsyncIterator[tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]]:
    """Take fds 0/1 for the wire; divert the originals so stray output cannot corrupt it."""
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    saved_in, saved_out = os.dup(0), os.dup(1)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    receive = trio.lowlevel.FdStream(wire_in)
    send = trio.lowlevel.FdStream(wire_out)
    widen_pipe(receive)
    widen_pipe(send)
    try:
        yield receive, send
    finally:
        with trio.CancelScope(shield=True):
            await send.aclose()
            await receive.aclose()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
