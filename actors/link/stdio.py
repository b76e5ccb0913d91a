"""An upstream child process spoken to over our own pipes.

`StdioLink` owns the bytes: the stdout pump reads frames and dispatches them (answers
to our pending calls, notifications, server requests); the handshake and the lists go
out in our own frames too (`mcpvisor.actors.link.session`), so a stdio upstream never
loads the SDK. It also carries the fast path's public API (`reserve_fast`, `send_fast`,
`cancel_fast`, `run_deadlines`; the answer goes to the call's `FastSink`).
`open_stdio_link` spawns the server and runs it all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import trio
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.errors import CallTimeout, ProxyError, UpstreamDied
from mcpvisor.actors.framing import (
    FrameWriter,
    LineReader,
    OversizedLine,
    StreamBroken,
    end_batch,
    hold_writes,
    runs_of,
    widen_pipe,
    write_held_now,
)
from mcpvisor.actors.link.base import MAX_PENDING, PROXY_ID_PREFIX, FastSink, Link, LinkEvents, Pending
from mcpvisor.actors.link.session import handshake
from mcpvisor.actors.process import Reaper, StderrLog, describe_exit, spawn, stop_process

logger = logging.getLogger(__name__)

GARBAGE_LOG_LINES: Final = 5
"""Non-JSON stdout lines logged verbatim per connection; later ones are only counted."""

GARBAGE_LOG_BYTES: Final = 200
"""Bytes of a non-JSON stdout line quoted in the log: enough to recognise it."""

GARBAGE_FLOOD: Final = 1000
"""Non-JSON stdout lines within `GARBAGE_WINDOW_S` that make a connection unusable."""

GARBAGE_WINDOW_S: Final = 10.0
"""The window of `GARBAGE_FLOOD`: 100 bad lines a second for 10 s is a server that lost
its framing, not one stray print."""

EXIT_STATUS_WAIT_S: Final = 1.0
"""After stdout closes, how long to wait for the exit status for the error message."""

LAST_WORDS_S: Final = 0.25
"""After the server process exits, how long its stdout may take to close: what it wrote
before exiting is still read (an answer it sent just before a clean exit is delivered).
A grandchild holding the pipe (``npx``, ``uvx`` and shell wrappers) keeps it open
forever; past this bound the exit alone ends the connection."""


class StdioLink(Link):
    """An upstream child process spoken to over our own pipes."""

    def __init__(self, server: str, events: LinkEvents, proc: trio.Process, *, max_message: int,
                 stderr: StderrLog) -> None:
        super().__init__(server, events)
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        widen_pipe(proc.stdin)
        widen_pipe(proc.stdout)
        self.writer = FrameWriter(proc.stdin)
        self.max_message = max_message
        self.stderr = stderr
        self._garbage = 0
        self._garbage_window: list[float] = []
        self._wheel_scope: trio.CancelScope | None = None
        self._wheel_at = math.inf
        """The wheel scope's deadline, kept here: reading `CancelScope.deadline` per call costs
        more than the comparison it serves."""
        self._stdout_ended = trio.Event()

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        out = dict(params) if params else None
        if self._envelope is not None and self.modern:
            out = dict(out or {})
            meta = dict(out.get("_meta") or {})
            meta.update(self._envelope)
            out["_meta"] = meta
        await self.writer.send(wire.notification_frame(method, out))

    async def _send_and_wait(self, pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        try:
            await self.writer.send(wire.request_frame(pending.proxy_id, pending.method, params))
        except StreamBroken as exc:
            self.close(f"cannot write to it: {exc}")
            raise UpstreamDied(self.server, self.close_reason or str(exc)) from None
        return await self._wait(pending)

    # --- the fast path -------------------------------------------------------------
    def reserve_fast(self, sink: FastSink, timeout: float, max_time: float, now: float | None = None) -> str:
        """Register a fast-path call and return the id to send it under (``now``: the
        call's start, if the caller already read the clock).

        Raises:
            UpstreamDied: the connection is closing.
            TooManyRequests: the pending table is full.
        """
        if self.close_reason is not None or len(self._pending) >= MAX_PENDING:
            self._mint_id()  # raises the error that says which
        proxy_id = f"{PROXY_ID_PREFIX}{next(self._ids)}"  # `_mint_id`, one call fewer a call
        if now is None:
            now = trio.current_time()
        hard = now + max_time
        deadline = now + timeout
        if hard < deadline:
            deadline = hard
        self._pending[proxy_id] = Pending(proxy_id, "tools/call", sink, hard, timeout, None, sink=sink,
                                           deadline=deadline, started=now)
        if self._wheel_at > deadline and self._wheel_scope is not None:
            self._wheel_at = self._wheel_scope.deadline = deadline
        return proxy_id

    async def send_fast(self, frame: bytes) -> None:
        """Write a fast-path request; a broken pipe closes the link (failing the call)."""
        try:
            await self.writer.send(frame)
        except StreamBroken as exc:
            self.close(f"cannot write to it: {exc}")

    async def cancel_fast(self, proxy_id: str, reason: str) -> bool:
        """The client cancelled a fast-path call: forget it and tell the upstream."""
        pending = self._pending.pop(proxy_id, None)
        if pending is None:
            return False
        await self._abandon(pending)
        return True

    async def run_deadlines(self) -> None:
        """One timer for every fast-path call of this link (no task per call): a call with no
        answer or progress within its timeout, or past its hard cap, fails and is cancelled upstream."""
        while True:
            with trio.CancelScope(deadline=math.inf) as scope:
                self._wheel_scope = scope
                fast = [p for p in self._pending.values() if p.sink is not None]
                if fast:
                    scope.deadline = min(p.deadline for p in fast)
                self._wheel_at = scope.deadline
                await trio.sleep_forever()
            self._wheel_scope = None
            self._wheel_at = math.inf
            now = trio.current_time()
            for p in [p for p in self._pending.values() if p.sink is not None and p.deadline <= now]:
                del self._pending[p.proxy_id]
                hard = now >= p.hard_deadline
                # The hard cap counts from the call's start, not from its last progress
                # (which only moves the inactivity deadline): name the user's maxCallTime.
                limit = p.hard_deadline - p.started if hard else p.timeout
                assert p.sink is not None
                p.sink.failed(CallTimeout(self.server, round(limit) if hard else limit, hard_cap=hard))
                await self._abandon(p)

    # --- pumps -----------------------------------------------------------------
    async def pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        reason = "closed its stdout"
        stopped = False
        batches = LineReader(self.proc.stdout, self.max_message).__aiter__()
        table = self._pending  # the link's one table of requests in flight, looked up per answer
        try:
            async for batch in batches:
                # Several answers in one read: what they write leaves in one write per pipe.
                held = hold_writes() if len(batch) > 1 else None
                try:
                    for n, run in enumerate(runs_of(batch)):
                        if n and (wait := write_held_now()) is not None:
                            await wait  # the peer starts on the run before meanwhile
                        for line in run:
                            if type(line) is not bytes:  # cheaper than isinstance on a Struct, per answer
                                assert isinstance(line, OversizedLine)
                                reason = (f"sent a message larger than {self.max_message} bytes "
                                          f"({line.size}+ bytes)")
                                return
                            # An answer to a fast-path call is delivered here, with no coroutine
                            # made unless its write must wait (the proxy's busiest frame).
                            try:
                                env = wire.decode_envelope(line)
                            except (wire.DecodeError, wire.ValidationError, RecursionError):
                                await self._dispatch(line, None)
                                if self.close_reason is not None:
                                    return
                                continue
                            rid = env.id
                            # Any id may be looked up: only the str ids minted here are found.
                            if (env.method is UNSET and (pending := table.get(rid)) is not None  # type: ignore[arg-type]
                                    and (sink := pending.sink) is not None):
                                del table[rid]  # type: ignore[arg-type]
                                rest = sink.answer(env, line)
                                if rest is not None:
                                    await sink.finish(rest)
                                continue  # an answer never closes the link
                            await self._dispatch(line, env)
                            if self.close_reason is not None:
                                return
                finally:
                    if held is not None and (wait := end_batch(held)) is not None:
                        await wait
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except trio.Cancelled:
            # Stopped by us: open_stdio_link closes the link with its reason; waiting here
            # for an exit status the child has not been asked for would cost a second per stop.
            stopped = True
            raise
        finally:
            with trio.CancelScope(shield=True):
                # Left mid-stream (garbage flood, oversized line): close the reader here, not in GC.
                await batches.aclose()  # type: ignore[attr-defined]
                if self.close_reason is None and not stopped:
                    with trio.move_on_after(EXIT_STATUS_WAIT_S):
                        await self.proc.wait()
                    if self.proc.returncode is not None:
                        reason = describe_exit(self.proc.returncode)
                    tail = self.stderr.tail()
                    self.close(f"{reason}: {tail}" if tail else reason)
                self._stdout_ended.set()

    async def watch_exit(self) -> None:
        """The process itself exited: end the connection even if its stdout stays open.

        A wrapper's leader (``npx``, ``uvx``, ``sh -c``) can exit while a grandchild keeps
        the pipes open; stdout then never closes, and calls would wait for their timeout
        and the server for missed pings. The leader's exit is the server's death: pending
        calls fail at once, and the group (grandchild included) is stopped on the way out.
        """
        await self.proc.wait()
        with trio.move_on_after(LAST_WORDS_S):
            await self._stdout_ended.wait()
        if self.close_reason is None:
            reason = f"{describe_exit(self.proc.returncode)} (its stdout still held open by a child process)"
            tail = self.stderr.tail()
            self.close(f"{reason}: {tail}" if tail else reason)

    async def _dispatch(self, line: bytes, env: wire.Envelope | None) -> None:
        """``line`` as ``env`` decoded it; None: not a message (malformed, or nested too deeply
        for msgspec, which recurses up to Python's limit): dropped as garbage, the link and
        the proxy live on."""
        if env is None:
            self._on_garbage(line)
            return
        method = env.method
        if method is UNSET:
            rid = env.id
            if type(rid) is str and rid.startswith(PROXY_ID_PREFIX):
                pending = self._pending.get(rid)
                if pending is None:
                    logger.debug("%s: dropped a late response to %s", self.server, rid)
                elif pending.sink is not None:
                    del self._pending[rid]
                    await pending.sink.deliver(env, line)
                elif pending.done is not None and not pending.done.is_set():
                    pending.envelope = env
                    pending.line = line
                    pending.done.set()
                return
            logger.debug("%s: dropped a response to a request it was never sent (id %r)", self.server, rid)
            return
        if env.id is UNSET:
            await self._notification(method, env, line)
            return
        self._serve_request_soon(env)

    async def _notification(self, method: str, env: wire.Envelope, line: bytes) -> None:
        if method == "notifications/progress":
            if env.params is UNSET:
                return
            try:
                params = wire.decode_dict(env.params)
            except (wire.DecodeError, wire.ValidationError):
                return
            token = params.get("progressToken")
            if isinstance(token, str):
                await self._progress(token, params)
            return
        if method == "notifications/message":
            try:
                params = wire.decode_dict(env.params) if env.params is not UNSET else {}
            except (wire.DecodeError, wire.ValidationError):
                return
            self.events.log_message(params)
            await self.log_to_callers(params)
            return
        if method == "notifications/tools/list_changed":
            self.events.list_changed("tools")
        elif method == "notifications/resources/list_changed":
            self.events.list_changed("resources")
        elif method == "notifications/prompts/list_changed":
            self.events.list_changed("prompts")
        elif method == "notifications/resources/updated":
            try:
                params = wire.decode_dict(env.params) if env.params is not UNSET else {}
            except (wire.DecodeError, wire.ValidationError):
                return
            uri = params.get("uri")
            if isinstance(uri, str):
                self.events.resource_updated(uri)
        else:
            # notifications/cancelled (of a server request already answered or given up),
            # subscription acknowledgements, and what the proxy has no use for.
            logger.debug("%s: ignored %s", self.server, method)

    def _serve_request_soon(self, env: wire.Envelope) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(self._serve_request, env)

    async def _serve_request(self, env: wire.Envelope) -> None:
        assert isinstance(env.method, str)
        assert env.id is not UNSET
        assert env.id is not None
        request_id = env.id
        try:
            params = wire.decode_dict(env.params) if env.params is not UNSET else None
            result = await self.answer_server_request(env.method, params)
            frame = wire.result_frame(request_id, result)
        except ProxyError as exc:
            frame = wire.error_frame(request_id, exc.code, exc.message, exc.data)
        except (wire.DecodeError, wire.ValidationError):
            frame = wire.error_frame(request_id, wire.INVALID_PARAMS, "malformed params")
        try:
            await self.writer.send(frame)
        except StreamBroken:
            pass

    def _on_garbage(self, line: bytes) -> None:
        self._garbage += 1
        if self._garbage <= GARBAGE_LOG_LINES:
            logger.warning("%s wrote non-JSON to stdout (ignored): %r", self.server, line[:GARBAGE_LOG_BYTES])
        elif self._garbage == GARBAGE_LOG_LINES + 1:
            logger.warning("%s keeps writing non-JSON to stdout; further lines are only counted", self.server)
        now = trio.current_time()
        window = self._garbage_window
        window.append(now)
        if len(window) > GARBAGE_FLOOD:
            del window[: len(window) - GARBAGE_FLOOD]
            if now - window[0] < GARBAGE_WINDOW_S:
                self.close(f"garbage on stdout: {GARBAGE_FLOOD} non-JSON lines in under "
                           f"{GARBAGE_WINDOW_S:g}s")


@asynccontextmanager
async def open_stdio_link(
    server: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    events: LinkEvents,
    reaper: Reaper | None,
    protocol: str,
    max_message: int,
    shutdown_grace: float,
    on_spawn: Callable[[StdioLink], None] | None = None,
) -> AsyncIterator[StdioLink]:
    """Spawn the server, run its pumps, open its session; stop everything on exit.

    Raises:
        SpawnError: the command could not be started.
        UpstreamDied / HandshakeFailed: the handshake failed (the process is stopped).
    """
    stderr = StderrLog(server)
    proc = await spawn(argv, env=env, cwd=cwd, reaper=reaper)
    link = StdioLink(server, events, proc, max_message=max_message, stderr=stderr)
    if on_spawn is not None:
        on_spawn(link)
    try:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            assert proc.stderr is not None
            nursery.start_soon(stderr.drain, proc.stderr)
            nursery.start_soon(link.pump_stdout)
            nursery.start_soon(link.watch_exit)
            nursery.start_soon(link.run_deadlines)
            try:
                with trio.CancelScope() as handshake_scope:
                    nursery.start_soon(_cancel_when_closed, link, handshake_scope)
                    opened = await handshake(link, protocol)
                if handshake_scope.cancelled_caught or link.close_reason is not None:
                    raise UpstreamDied(server, link.close_reason or "closed during the handshake")
                link.adopt(opened)
                await link.apply_log_level()
                yield link
            finally:
                link.close(link.close_reason or "stopped by mcpvisor")
                if proc.poll() is not None:
                    # It exited: what it printed on its way out is read before anyone quotes
                    # it (a failed start's reason), however busy the machine is.
                    with trio.move_on_after(LAST_WORDS_S, shield=True):
                        await stderr.ended.wait()
                nursery.cancel_scope.cancel()
    finally:
        await stop_process(proc, grace=shutdown_grace, reaper=reaper)


async def _cancel_when_closed(link: Link, scope: trio.CancelScope) -> None:
    await link.closed.wait()
    scope.cancel()
