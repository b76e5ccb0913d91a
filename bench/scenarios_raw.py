"""The ``raw`` scenario: stdio throughput with a raw JSON-RPC client, 32 calls in flight.

The SDK client tops out long before a lean proxy does (a few thousand calls/s), so the
``throughput`` scenario cannot tell a proxy that keeps up with a trivial upstream from one
that halves it. Here the client is a few lines of trio: it writes requests as bytes, keeps
`DEPTH` in flight (answers read in batches, as many new requests written back in one
write) and parses only each answer's id. Every call has arguments of its own. Each stdio
subject is started once, handshaken, warmed up, then measured in alternating rounds; a
row is calls/s and its ratio to the direct upstream in the same round.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.actors.framing import LineReader
from mcpvisor.bench import procs
from mcpvisor.bench.core import Params, Result, aggregate, rnd
from mcpvisor.bench.drivers import CONNECT_TIMEOUT_S, ServerDef, Subject, resolve_tool
from mcpvisor.bench.scenarios_calls import UPSTREAM, note_floor, note_stalls
from mcpvisor.bench.stalls import WATCH

DEPTH: Final = 32
"""Calls in flight."""
WARMUP: Final = 500
MAX_LINE: Final = 1 << 24
CALLS_PER_ROUND: Final = 20_000
"""Calls per measurement (a quarter with ``--quick``), or as many as ``measure_s`` allows."""
ROUND_LIMIT_S: Final = 120.0
"""Bound on one measurement on a loaded machine (a subject that stops answering fails)."""


class RawClient:
    """Newline-delimited JSON-RPC over a subject's stdin/stdout."""

    def __init__(self, subject: Subject, proc: trio.Process) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.subject = subject
        self.proc = proc
        self._send = proc.stdin
        self._lines = LineReader(proc.stdout, MAX_LINE).__aiter__()
        self._ids = 0
        self.tool = ""

    async def _read(self) -> list[bytes]:
        batch = await self._lines.__anext__()
        return [line for line in batch if isinstance(line, bytes)]

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._ids += 1
        rid = self._ids
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        await self._send.send_all(json.dumps(frame).encode() + b"\n")
        while True:
            for line in await self._read():
                reply = json.loads(line)
                if reply.get("id") == rid:
                    if "error" in reply:
                        raise RuntimeError(f"{self.subject.name}: {method} failed: {reply['error']}")
                    result: dict[str, Any] = reply["result"]
                    return result

    async def handshake(self) -> None:
        await self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "mcpvisor-bench-raw", "version": "1"}})
        await self._send.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        while True:
            names = [t["name"] for t in (await self.request("tools/list"))["tools"]]
            tool = resolve_tool(names, "echo")
            if tool is not None:
                self.tool = tool
                return
            await trio.sleep(0.1)

    def _call(self, serial: int) -> bytes:
        frame = {"jsonrpc": "2.0", "id": serial, "method": "tools/call",
                 "params": {"name": self.tool, "arguments": {"text": f"raw-{serial}"}}}
        return json.dumps(frame).encode() + b"\n"

    async def burst(self, total: int, limit_s: float = math.inf) -> tuple[int, float]:
        """``total`` calls, `DEPTH` in flight (none started after ``limit_s``): (calls, seconds)."""
        clock = time.perf_counter
        start = clock()
        deadline = start + limit_s
        first = self._ids + 1
        sent = min(DEPTH, total)
        await self._send.send_all(b"".join(self._call(first + i) for i in range(sent)))
        done = 0
        with trio.fail_after(ROUND_LIMIT_S):
            while done < sent:
                got = await self._read()
                for line in got:
                    if b'"error"' in line and b'"result"' not in line:
                        raise RuntimeError(f"{self.subject.name}: a call failed: {line[:300]!r}")
                done += len(got)
                more = min(len(got), total - sent) if clock() < deadline else 0
                if more > 0:
                    await self._send.send_all(b"".join(self._call(first + sent + i) for i in range(more)))
                    sent += more
        self._ids = first + sent
        return done, clock() - start


@asynccontextmanager
async def open_raw(subject: Subject, servers: Sequence[ServerDef], workdir: Path) -> AsyncIterator[RawClient]:
    """Start ``subject`` over stdio (its own process group, tagged for the sweep), handshaken."""
    tag = procs.new_tag()
    launch = subject.launch(servers, workdir, "stdio", 0, tag)
    log = workdir / f"{subject.name}-raw-{tag}.log"
    async with AsyncExitStack() as stack:
        errlog = stack.enter_context(open(log, "ab"))  # noqa: ASYNC230 - a local log file, opened once
        proc = await trio.lowlevel.open_process(launch.argv, env=dict(launch.env), cwd=launch.cwd,
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                                                start_new_session=True)
        stack.push_async_callback(procs.stop_process, proc)
        client = RawClient(subject, proc)
        with trio.fail_after(CONNECT_TIMEOUT_S):
            await client.handshake()
        yield client
        assert proc.stdin is not None
        with trio.move_on_after(1.0, shield=True):
            await proc.stdin.aclose()


async def run_raw(subjects: Sequence[Subject], params: Params, workdir: Path) -> Result:
    total = CALLS_PER_ROUND // 4 if params.quick else CALLS_PER_ROUND
    result = Result("raw", f"Throughput with a raw JSON-RPC client, {DEPTH} calls in flight (stdio)",
                    ["raw_calls_s", "raw_ratio"])
    result.params.update(calls=total, rounds=params.rounds, concurrency=DEPTH, tool="echo",
                         arguments="distinct per call", limit_s=params.measure_s)
    started = WATCH.total
    async with AsyncExitStack() as stack:
        clients: list[RawClient] = []
        for subject in subjects:
            if "stdio" not in subject.transports:
                result.skip(subject.name, "does not serve stdio")
                continue
            try:
                client = await stack.enter_async_context(open_raw(subject, [UPSTREAM], workdir))
                await client.burst(WARMUP)
            except Exception as exc:  # a peer that cannot start is reported, not fatal
                result.skip(subject.name, f"could not start or call: {exc!r:.300}")
                continue
            clients.append(client)
        if not any(c.subject.kind == "direct" for c in clients):
            result.error = "the direct baseline did not start; no ratio can be computed"
            return result
        per_round: dict[str, list[dict[str, float]]] = {c.subject.name: [] for c in clients}
        for r in range(params.rounds):
            for client in clients if r % 2 == 0 else list(reversed(clients)):
                name = client.subject.name
                if name not in per_round:
                    continue
                t_start = time.perf_counter()
                try:
                    made, seconds = await client.burst(total, params.measure_s)
                except Exception as exc:
                    result.skip(name, f"failed during round {r + 1}: {exc!r:.300}")
                    per_round.pop(name)
                    continue
                await WATCH.settle()
                paused = WATCH.overlap(t_start, t_start + seconds)
                per_round[name].append({"raw_calls_s": made / max(seconds - paused, 1e-9)})
    table = aggregate(per_round, ["raw_calls_s"], {"raw_ratio": "raw_calls_s"})
    for client in clients:
        row = table.get(client.subject.name)
        if row is not None:
            row["raw_calls_s"] = rnd(row["raw_calls_s"], 0)
            result.rows.append({"subject": client.subject.name, "kind": client.subject.kind,
                                "transport": "stdio", **row})
    note_stalls(result, WATCH.total - started)
    result.target("mcpvisor", "raw_ratio", ">=", 0.5,
                  f"raw client at {DEPTH} in flight at least 0.5x a trivial direct upstream")
    note_floor(result, "raw_calls_s", "calls/s")
    return result
