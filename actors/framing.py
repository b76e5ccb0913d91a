"""Newline-delimited JSON-RPC framing over trio byte streams.

Owns the two halves every stdio pipe needs:

* `LineReader` turns a byte stream into batches of complete lines, with a hard cap
  on the length of one line so a peer that never sends a newline cannot make us
  hold unbounded memory (MCP stdio: messages are newline-delimited and MUST NOT
  contain embedded newlines).
* `FrameWriter` is the single gate to a send stream: the first writer sends,
  concurrent writers append to a batch the active writer flushes with one
  ``send_all`` (frames coalesce under load, which is what lets concurrency 32 keep
  up with a direct connection; docs/hotpath.md).

Both halves talk to the file descriptor itself when the stream is a pipe
(`trio.lowlevel.FdStream`: a child's stdin/stdout, our own stdio): trio's
``send_all``/``receive_some`` yield to the scheduler before every write and read,
which on a proxied call is two extra scheduler passes and a failed ``read`` per
frame, most of what the proxy spent per call. A write the pipe takes whole returns
at once; a read waits for the fd only when nothing is there, and yields once when
it did not wait, so a peer that never pauses cannot starve the other tasks.

A reader's pump that handles several frames from one read (`hold_writes`) holds
what it writes meanwhile and writes each writer's share with one ``write`` every
`HELD_FRAMES` frames and at the end (`flush_writes`): 32 calls in flight then cost a few
writes a batch, not 64, and the peer starts on the first frames before the last are handled.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextvars import ContextVar, Token
from typing import Final, TypeVar

import msgspec
import trio

logger = logging.getLogger(__name__)

READ_CHUNK: Final = 65536
"""Bytes asked of the OS per read; lines are reassembled across reads."""

MAX_READ_CHUNK: Final = 1 << 20
"""Bytes asked of a pipe per read while it keeps filling whole reads (a large result):
the chunk doubles from `READ_CHUNK` up to this, and falls back once a read comes up short."""

PIPE_SIZE: Final = 1 << 20
"""Capacity asked for the pipes the proxy reads and writes (Linux's default ceiling for
an unprivileged process, ``/proc/sys/fs/pipe-max-size``): a 1 MiB result then crosses
in a few reads and writes instead of sixteen 64 KiB hand-offs, each a wake-up of both
ends. The kernel commits pages only for bytes actually queued."""

_F_SETPIPE_SZ: Final = 1031
"""``fcntl.F_SETPIPE_SZ`` (Linux; the constant is in `fcntl` from Python 3.10 on Linux only)."""


def widen_pipe(stream: object) -> None:
    """Ask for `PIPE_SIZE` on ``stream``'s pipe; anything that is not a pipe, or a refusal, is left as is."""
    if type(stream) is not trio.lowlevel.FdStream:
        return
    try:
        import fcntl
    except ImportError:  # not on a Unix
        return
    try:
        fcntl.fcntl(stream.fileno(), _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # not a pipe (a tty, a file), or above this system's ceiling

WRITE_TIMEOUT_S: Final = 30.0
"""A write that cannot complete in this long means the peer stopped reading: the
stream is declared broken instead of wedging every caller (python-sdk bounds its
courtesy writes the same way, `_ABANDON_WRITE_TIMEOUT`)."""

CLOSE_TIMEOUT_S: Final = 1.0
"""Bound on closing the stream (shielded, docs/style.md rule 16): a pipe closes at once or never."""

HELD_FRAMES: Final = 8
"""A pump holding its writes (`hold_writes`) writes what it holds after every this many
frames of a read, not only at the end: with 32 calls in flight the peer (an upstream, the
client) starts on the first eight while the pump handles the rest, on the other core.
Measured with the raw client at 32 in flight (bench ``raw``, quiet 2-core machine): calls/s
0.32-0.37x direct holding all of a read, 0.42-0.52x flushing every 8 (every 4 alike, every
16 0.36-0.41x, every frame 0.39-0.41x)."""

MAX_BUFFERED_BYTES: Final = 8 * 1024 * 1024
"""Bytes queued behind an in-progress write before further writers wait."""


class OversizedLine(msgspec.Struct, frozen=True):
    """Stands in for a line longer than the reader's cap; its bytes were discarded."""

    size: int
    """Bytes seen before the reader gave up on the line (at least the cap)."""


def _frame(out: list[bytes | OversizedLine], line: bytes | OversizedLine, cap: int) -> None:
    """Add ``line`` to ``out``: an empty line is skipped, one over ``cap`` reported by its size."""
    if isinstance(line, OversizedLine):
        out.append(line)
    elif len(line) > cap:
        out.append(OversizedLine(len(line)))
    elif line:
        out.append(line)


class LineReader:
    """Split a receive stream into newline-terminated frames.

    Iterating yields lists of frames: everything complete in one read, so a burst of
    messages costs one scheduler round trip. Empty lines are skipped and a trailing
    ``\\r`` is removed. A line longer than ``max_line`` yields one `OversizedLine`
    and its remaining bytes are skipped up to the next newline, so memory stays
    bounded by ``max_line`` plus one read chunk. A partial line at EOF is dropped.
    """

    def __init__(self, stream: trio.abc.ReceiveStream, max_line: int) -> None:
        self._stream = stream
        self._max_line = max_line
        self._parts: list[bytes] = []
        """The line being read, as the pieces read so far (none holds a newline)."""
        self._held = 0
        """Their length."""
        self._skipping = 0
        self._chunk = READ_CHUNK
        self._emptied = False

    async def _receive(self) -> bytes | bytearray:
        """The next chunk of the stream (b"" at EOF), straight from the pipe's fd if it is one."""
        stream = self._stream
        if type(stream) is not trio.lowlevel.FdStream:
            return await stream.receive_some(READ_CHUNK)
        size = self._chunk
        # A short read emptied the pipe: wait for the fd before reading again, rather than
        # reading once more only to be told it is empty (a syscall per frame saved).
        waited = self._emptied
        if waited:
            fd = stream.fileno()
            if fd >= 0:
                await trio.lowlevel.wait_readable(fd)
        while True:
            try:
                chunk = os.read(stream.fileno(), size)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(stream.fileno())
                waited = True
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("file was already closed") from None
                raise trio.BrokenResourceError from exc
            if not waited:
                await trio.lowlevel.checkpoint()  # data was already there: let the others run
            full = len(chunk) == size
            self._emptied = not full
            self._chunk = min(size * 2, MAX_READ_CHUNK) if full else READ_CHUNK
            return chunk

    async def __aiter__(self) -> AsyncIterator[Sequence[bytes | OversizedLine]]:
        # A line that spans reads is held as the pieces read (no newline in any of them) and
        # joined once when its newline arrives: a 1 MiB result read in five pieces is copied
        # once, not grown in a buffer and then copied out of it twice (docs/hotpath.md).
        parts, cap = self._parts, self._max_line
        while True:
            chunk = await self._receive()
            if not chunk:
                if parts or self._skipping:
                    logger.debug("dropped a partial line of %d bytes at EOF", self._held + self._skipping)
                return
            if type(chunk) is not bytes:
                chunk = bytes(chunk)
            if not parts and not self._skipping and chunk[-1] == 0x0A:
                # The common case, whole lines only: split in C rather than line by line.
                lines = chunk.split(b"\n")
                lines.pop()
                if 0x0D in chunk:
                    lines = [ln[:-1] if ln[-1:] == b"\r" else ln for ln in lines]
                elif len(chunk) <= cap and all(lines):
                    yield lines  # the busiest case: no empty line, none over the cap
                    continue
                whole = [ln if len(ln) <= cap else OversizedLine(len(ln)) for ln in lines if ln]
                if whole:
                    yield whole
                continue
            out: list[bytes | OversizedLine] = []
            pos = 0
            if self._skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    self._skipping += len(chunk)
                    continue
                self._skipping = 0
                pos = nl + 1
            nl = chunk.find(b"\n", pos)
            if nl >= 0 and parts:
                # The held line ends here (a carriage return before its newline dropped
                # from its last piece, so the joined line is not copied again).
                if nl > pos:
                    parts.append(chunk[pos:nl - 1] if chunk[nl - 1] == 0x0D else chunk[pos:nl])
                elif parts[-1][-1] == 0x0D:
                    parts[-1] = parts[-1][:-1]
                size = sum(map(len, parts))
                _frame(out, OversizedLine(size) if size > cap else b"".join(parts), cap)
                parts.clear()
                self._held = 0
                pos = nl + 1
                nl = chunk.find(b"\n", pos)
            while nl >= 0:
                end = nl - 1 if nl > pos and chunk[nl - 1] == 0x0D else nl
                if end > pos:
                    _frame(out, chunk[pos:end], cap)
                pos = nl + 1
                nl = chunk.find(b"\n", pos)
            if pos < len(chunk):
                parts.append(chunk[pos:] if pos else chunk)
                self._held += len(chunk) - pos
                if self._held > cap:
                    out.append(OversizedLine(self._held))
                    self._skipping = self._held
                    parts.clear()
                    self._held = 0
            if out:
                yield out


class _Batch(msgspec.Struct, eq=False):
    """The frames one pump task writes while it handles one read's worth of lines."""

    open: bool = True
    writers: list[FrameWriter] = msgspec.field(default_factory=list)


_batch: ContextVar[_Batch | None] = ContextVar("mcpvisor_write_batch", default=None)
"""The batch of the task running now (a task started meanwhile inherits it; it holds
only while the batch is open, so such a task's later writes are never stranded)."""


_T = TypeVar("_T")


def runs_of(batch: Sequence[_T]) -> Sequence[Sequence[_T]]:
    """``batch`` in runs of at most `HELD_FRAMES` frames: a pump holding its writes flushes
    them between runs (one check a run, not one a frame)."""
    if len(batch) <= HELD_FRAMES:
        return (batch,)
    return [batch[i:i + HELD_FRAMES] for i in range(0, len(batch), HELD_FRAMES)]


def hold_writes() -> Token[_Batch | None]:
    """From now until `flush_writes`, this task's writes to an idle writer are held, not written."""
    return _batch.set(_Batch())


async def flush_writes(token: Token[_Batch | None]) -> None:
    """Write what the batch held, one ``write`` per writer, in the order it was sent.

    A writer that broke meanwhile drops its share, as a write to it would have failed;
    its owner learns of it from its next write or from the peer's end of the pipe.
    """
    rest = end_batch(token)
    if rest is not None:
        await rest


def end_batch(token: Token[_Batch | None]) -> Awaitable[None] | None:
    """`flush_writes` up to its wait: None when the pipes took everything, else the wait
    for the rest, to be awaited at once (a pump saves a coroutine a read this way)."""
    batch = _batch.get()
    _batch.reset(token)
    if batch is None:
        return None
    batch.open = False
    return _write_held(batch.writers)


async def flush_held_writes() -> None:
    """Write what the running task's open batch holds so far (the batch stays open).

    A pump calls this before it may wait on something else (a full queue towards the SDK):
    a frame it held must not wait with it, since what the pump waits for may need that
    frame to have reached its peer first.
    """
    rest = write_held_now()
    if rest is not None:
        await rest


def write_held_now() -> Awaitable[None] | None:
    """`flush_held_writes` up to its wait: None when the pipes took everything, else the
    wait for the rest, to be awaited at once (before anything else is written)."""
    batch = _batch.get()
    if batch is None or not batch.open or not batch.writers:
        return None
    writers = batch.writers
    batch.writers = []
    return _write_held(writers)


def _write_held(writers: list[FrameWriter]) -> Awaitable[None] | None:
    """Each writer's held frames as one write, in order: None when every pipe took its
    share, else the wait that writes the rest (that writer's, then the others')."""
    for n, writer in enumerate(writers):
        rest = writer.write_held()
        if rest is not None:
            return _write_rest(writer, rest, writers[n + 1:])
    return None


async def _write_rest(writer: FrameWriter, rest: bytes | memoryview, others: list[FrameWriter]) -> None:
    await writer.write_rest(rest)
    for other in others:
        left = other.write_held()
        if left is not None:
            await other.write_rest(left)


class StreamBroken(Exception):
    """The peer stopped reading or closed its end; nothing more can be written."""


class FrameWriter:
    """Serialize writes of whole frames to one send stream.

    ``send`` never interleaves two frames. The caller that finds the stream idle
    writes, and keeps flushing whatever other callers queued meanwhile, so under
    load many frames leave in one ``send_all``. Writes are shielded from the
    caller's cancellation (a cancelled ``send_all`` leaves a byte stream in an
    unknown state) but bounded by `WRITE_TIMEOUT_S`.
    """

    def __init__(self, stream: trio.abc.SendStream) -> None:
        self._stream = stream
        self._pipe = stream if type(stream) is trio.lowlevel.FdStream else None
        """The stream when it is a pipe: an idle writer writes to its fd directly (asked each
        time: a closed `FdStream` answers -1, so a number the OS reused is never written)."""
        self._queue: list[bytes | memoryview] = []
        self._held: list[bytes | memoryview] = []
        """Frames an open batch holds (`hold_writes`); written before anything sent later."""
        self._queued = 0
        self._busy = False
        self._broken: str | None = None
        self._drained = trio.Event()

    @property
    def broken(self) -> str | None:
        """Why the stream can no longer be written, or None while it is healthy."""
        return self._broken

    async def send(self, frame: bytes | memoryview) -> None:
        """Write ``frame`` (one or more complete lines, newline included).

        Raises:
            StreamBroken: the stream failed now or earlier.
        """
        if self._broken is not None:
            raise StreamBroken(self._broken)
        if self._held:
            self._held.append(frame)  # behind what a batch holds: its flush writes this too
            return
        if not self._busy:
            batch = _batch.get()
            if batch is not None and batch.open:
                self._held.append(frame)
                batch.writers.append(self)
                return
        await self._write(frame)

    def try_write(self, frame: bytes | memoryview) -> bytes | memoryview | None:
        """`send` without a checkpoint when it needs none: None if ``frame`` is written
        (or held by an open batch), else what is left of it for ``await send(rest)`` before
        anything else runs (the hot paths save a coroutine per frame this way)."""
        if self._broken is not None:
            return frame  # send raises
        if self._held:
            self._held.append(frame)
            return None
        if self._busy:
            return frame
        batch = _batch.get()
        if batch is not None and batch.open:
            self._held.append(frame)
            batch.writers.append(self)
            return None
        return self._to_fd(frame)

    def _to_fd(self, frame: bytes | memoryview) -> bytes | memoryview | None:
        """Hand ``frame`` to the pipe's fd if nothing is being written: None when it took all
        of it, else what is left (all of it when it is no pipe, is busy or the write failed),
        for `_write` to write or fail the usual way."""
        pipe = self._pipe
        if self._busy or pipe is None or (fd := pipe.fileno()) < 0:
            return frame
        try:
            sent = os.write(fd, frame)
        except OSError:  # BlockingIOError included
            return frame
        if sent == len(frame):
            return None
        return memoryview(frame)[sent:]

    async def _write(self, frame: bytes | memoryview) -> None:
        """Write ``frame`` now, or queue it behind the write in progress."""
        pipe = self._pipe
        if pipe is not None and not self._busy and (fd := pipe.fileno()) >= 0:
            # Nothing queued or being written: hand the frame to the pipe now. What it
            # does not take at once (full pipe) is written below, ahead of anything queued later.
            try:
                sent = os.write(fd, frame)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                raise StreamBroken(self._broken or "closed") from None
            if sent == len(frame):
                return
            frame = memoryview(frame)[sent:]
        if self._busy:
            while self._queued > MAX_BUFFERED_BYTES and self._busy:
                await self._drained.wait()
            if self._busy:
                self._queue.append(frame)
                self._queued += len(frame)
                return
        self._busy = True
        try:
            data = frame
            with trio.move_on_after(WRITE_TIMEOUT_S, shield=True) as scope:
                while True:
                    await self._stream.send_all(data)
                    if not self._queue:
                        break
                    data = b"".join(self._queue)
                    self._queue.clear()
                    self._queued = 0
            if scope.cancelled_caught:
                self._fail(f"write blocked for {WRITE_TIMEOUT_S:g}s")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        finally:
            self._busy = False
            self._drained.set()
            self._drained = trio.Event()
        if self._broken is not None:
            raise StreamBroken(self._broken)

    def write_held(self) -> bytes | memoryview | None:
        """Write the frames a batch held (and whatever was sent behind them) as one, if the
        pipe takes them now: None when it did (or the stream broke: they are dropped), else
        what is left for ``await write_rest(rest)``."""
        held = self._held
        if not held:
            return None
        data = b"".join(held) if len(held) > 1 else held[0]
        held.clear()
        if self._broken is not None:
            return None
        return self._to_fd(data)

    async def write_rest(self, rest: bytes | memoryview) -> None:
        """Write what `write_held` left (a broken stream drops it: its owner learns of it
        from its next write)."""
        try:
            await self._write(rest)
        except StreamBroken:
            pass

    def _fail(self, why: str) -> None:
        if self._broken is None:
            self._broken = why
        self._queue.clear()
        self._queued = 0
        self._held.clear()

    async def aclose(self) -> None:
        """Close the stream (idempotent); later sends raise `StreamBroken`."""
        self._fail("closed")
        with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            await self._stream.aclose()
