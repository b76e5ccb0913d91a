"""Calls in flight over streamable HTTP from several client processes (the HTTP call scenarios).

One SDK client process tops out near a thousand calls a second on this 2-core machine: the
client's own CPU, about 1 ms a call whichever server answers (measured against mcpvisor and
mcp-proxy alike). With 8 or 32 calls in flight from one process, every server that costs
less than that is held to the client's pace, and the rows measure the client. So at more
than one call in flight the HTTP scenarios spread the calls over `CLIENTS` processes, each
its own SDK client (``mcp.Client(url, mode="legacy", cache=None)``, the client of every other
row) with its own session and its share of the calls in flight; the machine's CPU is then
shared between the clients and the server, as it would be with several users, and a server
that costs less a call serves more of them.

* `ClientPool`: the helper processes for one subject's URL, started on first use and stopped
  with the session (each carries the run's token, so the final sweep finds any left);
* ``python -m mcpvisor.bench.http_clients URL [--sse]``: one helper. It connects, prints
  ``{"ready": true}``, then for each JSON line on stdin (``tool``, ``total``,
  ``concurrency``, ``limit_s``, and ``args`` or ``distinct``: a prefix that makes every
  call's arguments its own) makes the calls and prints ``{"spans": [[start, end], ...]}``
  (`time.perf_counter`, the same monotonic clock in every process on Linux, so the spans of
  all helpers are read on one time line). End of stdin ends it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.actors.framing import LineReader
from mcpvisor.bench import procs

CLIENTS: Final = 2
"""Helper processes a session's calls are spread over (one per core of the 2-core machine)."""
READY_TIMEOUT_S: Final = 120.0
"""Bound on a helper importing the SDK and connecting (a loaded machine)."""
MIN_CALLS: Final = 10
"""Each helper makes at least this many calls even past ``limit_s`` (a percentile needs some)."""
MAX_LINE: Final = 1 << 24
"""Bound on one line between the bench and a helper (a reply lists every call's span)."""


class ClientPool:
    """`CLIENTS` helper processes, each with its own session on ``url``."""

    def __init__(self, url: str, sse: bool, log: Path) -> None:
        self.url = url
        self.sse = sse
        self.log = log
        self._procs: list[trio.Process] = []
        self._lines: list[_Lines] = []

    async def start(self) -> None:
        argv = [sys.executable, "-m", "mcpvisor.bench.http_clients", self.url]
        if self.sse:
            argv.append("--sse")
        with open(self.log, "ab") as errlog:  # noqa: ASYNC230 - a local log file, opened once per pool
            for _ in range(CLIENTS):
                proc = await trio.lowlevel.open_process(
                    argv, env=procs.base_env(tag=procs.new_tag()), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=errlog, start_new_session=True)
                self._procs.append(proc)
                assert proc.stdout is not None
                self._lines.append(_Lines(proc.stdout))
        with trio.fail_after(READY_TIMEOUT_S):
            for lines in self._lines:
                if not (await lines.next()).get("ready"):
                    raise RuntimeError(f"an HTTP client process could not connect to {self.url}")

    async def calls(self, tool: str, total: int, concurrency: int, limit_s: float, *,
                    args: dict[str, Any] | None = None,
                    distinct: str | None = None) -> list[tuple[float, float]]:
        """``total`` calls of ``tool``, ``concurrency`` in flight, shared out between the helpers
        (each makes its share, no new call after ``limit_s``): every call's (start, end)."""
        shares = _split(total, len(self._procs))
        depths = _split(concurrency, len(self._procs))
        spans: list[tuple[float, float]] = []

        async def one(n: int) -> None:
            proc, lines = self._procs[n], self._lines[n]
            command = {"tool": tool, "total": shares[n], "concurrency": max(1, depths[n]),
                       "limit_s": limit_s if math.isfinite(limit_s) else None, "args": args,
                       "distinct": f"{distinct}-{n}" if distinct is not None else None}
            assert proc.stdin is not None
            await proc.stdin.send_all(json.dumps(command).encode() + b"\n")
            reply = await lines.next()
            if "error" in reply:
                raise RuntimeError(f"an HTTP client process failed: {reply['error']}")
            spans.extend((float(a), float(b)) for a, b in reply["spans"])

        async with trio.open_nursery() as nursery:
            for n in range(len(self._procs)):
                nursery.start_soon(one, n)
        return spans

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            for proc in self._procs:
                if proc.stdin is not None:
                    with trio.move_on_after(1.0):
                        await proc.stdin.aclose()
            for proc in self._procs:
                await procs.stop_process(proc)
            for lines in self._lines:
                await lines.aclose()


def _split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares differing by at most one, the larger first."""
    return [total // parts + (1 if n < total % parts else 0) for n in range(parts)]


class _Lines:
    """JSON objects, one per line, from a helper's stdout (or a helper's stdin)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._batches = LineReader(stream, MAX_LINE).__aiter__()
        self._ready: deque[bytes] = deque()

    async def next(self) -> dict[str, Any]:
        while not self._ready:
            try:
                batch = await self._batches.__anext__()
            except StopAsyncIteration:
                raise RuntimeError("an HTTP client process ended (its log says why)") from None
            self._ready.extend(line for line in batch if isinstance(line, bytes))
        value = json.loads(self._ready.popleft())
        assert isinstance(value, dict)
        return value

    async def aclose(self) -> None:
        """End the reader here rather than in the garbage collector."""
        await self._batches.aclose()  # type: ignore[attr-defined]


# --- the helper process -------------------------------------------------------------------------
async def _serve(url: str, sse: bool) -> None:
    from mcp import Client

    from mcpvisor.bench.drivers import client_kwargs

    target: Any = url
    if sse:
        from mcp.client.sse import sse_client

        target = sse_client(url)
    out = trio.lowlevel.FdStream(sys.stdout.fileno())
    stdin = _Lines(trio.lowlevel.FdStream(sys.stdin.fileno()))
    async with Client(target, **client_kwargs()) as client:
        await out.send_all(b'{"ready": true}\n')
        while True:
            try:
                command = await stdin.next()
            except RuntimeError:
                return  # end of stdin: the pool is done with this helper
            try:
                spans = await _run(client.call_tool, command)
                reply: dict[str, Any] = {"spans": spans}
            except Exception as exc:
                reply = {"error": f"{exc!r:.300}"}
            await out.send_all(json.dumps(reply).encode() + b"\n")


async def call_spans(call: Callable[[str, dict[str, Any]], Awaitable[Any]], tool: str, total: int,
                     concurrency: int, limit_s: float, *, args: dict[str, Any] | None = None,
                     distinct: str | None = None, min_calls: int = MIN_CALLS) -> list[tuple[float, float]]:
    """``total`` calls of ``tool`` through ``call`` from ``concurrency`` tasks, each with
    ``args`` or with arguments of its own (``distinct``: their prefix), no new call after
    ``limit_s`` once ``min_calls`` are made: every call's (start, end), `time.perf_counter`.
    The bench's in-process client and each helper here make their calls this way."""
    clock = time.perf_counter
    deadline = clock() + limit_s
    spans: list[tuple[float, float]] = []
    remaining, serial = total, 0

    async def worker() -> None:
        nonlocal remaining, serial
        while remaining > 0 and (clock() < deadline or len(spans) < min_calls):
            remaining -= 1
            serial += 1
            t0 = clock()
            await call(tool, {"text": f"{distinct}-{serial}"} if distinct is not None else args or {})
            spans.append((t0, clock()))

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return spans


async def _run(call: Any, command: dict[str, Any]) -> list[tuple[float, float]]:
    async def checked(tool: str, args: dict[str, Any]) -> None:
        result = await call(tool, args)
        if getattr(result, "is_error", False):
            raise RuntimeError(f"{tool} returned an error: {result}")

    limit = command.get("limit_s")
    return await call_spans(checked, command["tool"], int(command["total"]), int(command["concurrency"]),
                            limit if limit is not None else math.inf, args=command.get("args"),
                            distinct=command.get("distinct"))


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        sys.exit("usage: python -m mcpvisor.bench.http_clients URL [--sse]")
    trio.run(_serve, args[0], "--sse" in args[1:])


if __name__ == "__main__":
    main()
