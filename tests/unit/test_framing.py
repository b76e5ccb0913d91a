"""Framing on real pipes (actors/framing.py): the writer and reader the stdio paths use.

The writer hands frames to a pipe's fd directly and, while a pump handles one read's
worth of lines (`hold_writes`), holds them to write once per pipe. What a user would
notice if this broke: frames reordered or interleaved, a frame never written (a call
that hangs), or a write to a closed pipe that does not fail.
"""

from __future__ import annotations

import os
import random
from contextlib import aclosing

import pytest
import trio
import trio.testing

from mcpvisor.actors.framing import (
    FrameWriter,
    LineReader,
    StreamBroken,
    flush_held_writes,
    flush_writes,
    hold_writes,
)

MAX_LINE = 1 << 20


def pipe() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    r, w = os.pipe()
    return trio.lowlevel.FdStream(r), trio.lowlevel.FdStream(w)


async def read_lines(stream: trio.lowlevel.FdStream, count: int) -> list[bytes]:
    lines: list[bytes] = []
    async with aclosing(LineReader(stream, MAX_LINE).__aiter__()) as batches:  # type: ignore[type-var]
        async for batch in batches:
            lines += [line for line in batch if isinstance(line, bytes)]
            if len(lines) >= count:
                break
    return lines


async def test_a_batch_holds_frames_until_flushed_then_writes_them_in_order_in_one_write() -> None:
    receive_a, send_a = pipe()
    receive_b, send_b = pipe()
    a, b = FrameWriter(send_a), FrameWriter(send_b)
    with trio.fail_after(10):
        token = hold_writes()
        await a.send(b"a1\n")
        await b.send(b"b1\n")
        await a.send(b"a2\n")
        # Nothing reaches a pipe while the batch is open.
        with pytest.raises(BlockingIOError):
            os.read(receive_a.fileno(), 100)
        await flush_writes(token)
        assert os.read(receive_a.fileno(), 100) == b"a1\na2\n"  # one write, in order
        assert os.read(receive_b.fileno(), 100) == b"b1\n"
        # After the batch, a write goes straight to the pipe.
        await a.send(b"a3\n")
        assert os.read(receive_a.fileno(), 100) == b"a3\n"
    for s in (receive_a, send_a, receive_b, send_b):
        await s.aclose()


async def test_another_tasks_frame_sent_during_a_batch_does_not_overtake_it_nor_strand() -> None:
    receive, send = pipe()
    writer = FrameWriter(send)
    go, sent_by_other, flushed = trio.Event(), trio.Event(), trio.Event()

    async def other() -> None:
        # Started before the batch: not part of it, yet its frame must queue behind the held one.
        await go.wait()
        await writer.send(b"other\n")
        sent_by_other.set()

    async def later() -> None:
        # Started inside the batch (so it inherits the batch's context), writes after it closed.
        await flushed.wait()
        await writer.send(b"later\n")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.testing.wait_all_tasks_blocked()
            token = hold_writes()
            await writer.send(b"first\n")
            nursery.start_soon(later)
            go.set()
            await sent_by_other.wait()
            await flush_writes(token)
            flushed.set()
        assert await read_lines(receive, 3) == [b"first", b"other", b"later"]
    await receive.aclose()
    await send.aclose()


async def test_a_frame_larger_than_the_pipe_arrives_whole_and_before_the_next() -> None:
    receive, send = pipe()
    writer = FrameWriter(send)
    big = b'"' + b"x" * (3 * 65536) + b'"\n'
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.send, big)
            await trio.testing.wait_all_tasks_blocked()  # the pipe is full, the rest still to write
            await writer.send(b"next\n")
            lines = await read_lines(receive, 2)
    assert lines == [big[:-1], b"next"]
    await receive.aclose()
    await send.aclose()


async def test_writing_to_a_pipe_whose_reader_is_gone_fails_and_keeps_failing() -> None:
    receive, send = pipe()
    writer = FrameWriter(send)
    await receive.aclose()
    with trio.fail_after(10):
        with pytest.raises(StreamBroken):
            await writer.send(b"lost\n")
        with pytest.raises(StreamBroken):
            await writer.send(b"lost again\n")
    await send.aclose()


async def test_a_closed_writer_never_writes_to_the_fd_number_again() -> None:
    receive, send = pipe()
    writer = FrameWriter(send)
    await writer.aclose()
    # The OS may hand the same number to the next file opened: it must not receive our frame.
    r2, w2 = os.pipe()
    try:
        with pytest.raises(StreamBroken):
            await writer.send(b"stray\n")
        os.set_blocking(r2, False)
        with pytest.raises(BlockingIOError):
            os.read(r2, 100)
    finally:
        os.close(r2)
        os.close(w2)
        await receive.aclose()


async def test_a_pump_about_to_wait_writes_what_its_open_batch_held_so_far() -> None:
    receive, send = pipe()
    writer = FrameWriter(send)
    with trio.fail_after(10):
        token = hold_writes()
        await writer.send(b"before the wait\n")
        await flush_held_writes()  # what a pump does before it may block on a full queue
        assert os.read(receive.fileno(), 100) == b"before the wait\n"
        await writer.send(b"after the wait\n")  # the batch is still open: held again
        with pytest.raises(BlockingIOError):
            os.read(receive.fileno(), 100)
        await flush_writes(token)
        assert os.read(receive.fileno(), 100) == b"after the wait\n"
    await receive.aclose()
    await send.aclose()


async def test_try_write_writes_holds_or_leaves_the_rest_and_frames_keep_their_order() -> None:
    """The hot paths' checkpoint-free write: what it cannot finish, ``send`` finishes, in order."""
    receive, send = pipe()
    writer = FrameWriter(send)
    with trio.fail_after(10):
        assert writer.try_write(b"now\n") is None  # an idle pipe takes it at once
        assert os.read(receive.fileno(), 100) == b"now\n"
        token = hold_writes()
        assert writer.try_write(b"held\n") is None  # an open batch holds it
        with pytest.raises(BlockingIOError):
            os.read(receive.fileno(), 100)
        await flush_writes(token)
        assert os.read(receive.fileno(), 100) == b"held\n"
        # Larger than the pipe: the part it took is gone, the rest is for send, ahead of the next.
        big = b'"' + b"y" * (3 * 65536) + b'"\n'
        rest = writer.try_write(big)
        assert rest is not None
        assert 0 < len(rest) < len(big)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.send, rest)
            await trio.testing.wait_all_tasks_blocked()
            assert writer.try_write(b"after\n") == b"after\n"  # a write is in progress: send queues it
            nursery.start_soon(writer.send, b"after\n")
            assert await read_lines(receive, 2) == [big[:-1], b"after"]
    await receive.aclose()
    with trio.fail_after(10):
        assert writer.try_write(b"lost\n") == b"lost\n"  # the reader is gone: send raises
        with pytest.raises(StreamBroken):
            await writer.send(b"lost\n")
    await send.aclose()


async def test_whole_lines_in_one_read_and_lines_cut_across_reads_frame_alike() -> None:
    """Carriage returns and empty lines dropped, a line over the limit reported by its size,
    whether a read holds whole lines only or cuts one in two."""
    from mcpvisor.actors.framing import OversizedLine

    limit = 16
    long = b"x" * (limit + 1)
    cases = [(stream, cut) for stream in (b"a\r\n\r\n\n" + long + b"\nb\n", b"\na\n\n" + long + b"\nb\n",
                                         b"\na\n\nb\n")
             for cut in (len(stream), 1, 10, len(stream) - 1)]
    # One read of whole lines (with carriage returns, without, short of the limit); a cut
    # inside "a\r\n", inside the long line, before the last newline.
    for stream, cut in cases:
        receive, send = pipe()
        frames: list[bytes | OversizedLine] = []

        async def write_in_two(send: trio.lowlevel.FdStream = send, cut: int = cut,
                               stream: bytes = stream) -> None:
            os.write(send.fileno(), stream[:cut])
            await trio.testing.wait_all_tasks_blocked()  # the reader has read the first part
            os.write(send.fileno(), stream[cut:])
            await send.aclose()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_in_two)
                async for batch in LineReader(receive, limit):
                    frames += batch
        await receive.aclose()
        want = [b"a", ("oversized", limit + 1), b"b"] if long in stream else [b"a", b"b"]
        assert [f if isinstance(f, bytes) else ("oversized", f.size) for f in frames] == want, (
            f"{stream!r} cut at {cut}")


class _Chunks(trio.abc.ReceiveStream):
    """A stream that returns the given chunks, one per read, then EOF."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self._chunks.pop(0) if self._chunks else b""

    async def aclose(self) -> None:
        self._chunks.clear()


def _expected(stream: bytes, limit: int) -> list[bytes | str]:
    """What a reader must yield for ``stream``, whatever its reads: each newline-terminated
    line less a trailing carriage return, empty ones dropped, one over ``limit`` reported as
    oversized, the unterminated tail dropped."""
    lines = stream.split(b"\n")[:-1]
    stripped = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
    return [ln if len(ln) <= limit else "oversized" for ln in stripped if ln]


async def test_lines_read_in_any_pieces_frame_as_the_stream_reads_whole() -> None:
    """A large result arrives in many reads, and calls in flight share reads: every way of
    cutting the stream gives the same frames (long lines, carriage returns on either side of
    a cut, empty and oversized lines, a partial line at EOF)."""
    from mcpvisor.actors.framing import OversizedLine

    limit = 64
    rng = random.Random(29)
    for case in range(400):
        lines = []
        for _ in range(rng.randint(1, 8)):
            size = rng.choice([0, 1, 5, limit - 1, limit + 2, 3 * limit])  # never at the limit's edge
            body = bytes(rng.choice(b"ab{}\"") for _ in range(size))
            lines.append(body + rng.choice([b"\n", b"\r\n"]))
        stream = b"".join(lines) + rng.choice([b"", b"tail without newline"])
        cuts = sorted(rng.sample(range(1, len(stream)), min(rng.randint(0, 6), len(stream) - 1)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        frames: list[bytes | str] = []
        with trio.fail_after(10):
            async for batch in LineReader(_Chunks(chunks), limit):
                for frame in batch:
                    if isinstance(frame, OversizedLine):
                        assert frame.size > limit
                        frames.append("oversized")
                    else:
                        frames.append(frame)
        assert frames == _expected(stream, limit), f"case {case}: cut at {cuts}"
