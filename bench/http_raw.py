"""Streamable HTTP with a raw JSON-RPC client: the SDK's own HTTP server vs mcpvisor, old and new path.

Three subjects in one run, each serving `bench/upstream.py`'s tools:

* ``sdk-http``: the tools behind the SDK's own streamable HTTP server (`bench/http_upstream.py`);
* ``mcpvisor-sdk-path``: ``mcpvisor serve --transport http`` with ``settings.fastPath: false``
  (every request through the SDK's session manager);
* ``mcpvisor``: the same with the fast path on (``tools/call`` served by the HTTP fast path).

The client is raw JSON-RPC over HTTP/1.1 framed by h11 (one keep-alive connection and one
handshake-era session per client; no SDK client, so the figures are the servers' cost). Each call
has its own argument (no cache helps). For 1 and ``--clients`` concurrent clients it
prints p50/p99 latency and throughput, and each subject's throughput ratio to ``sdk-http``.

Usage: ``python -m mcpvisor.bench.http_raw [--calls N] [--clients N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.drivers import HTTP_UPSTREAM, PYTHON, ServerDef, mcpvisor_config

HEADERS: Final = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INIT: Final = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "bench-raw", "version": "1"}}}
SUBJECTS: Final = ("sdk-http", "mcpvisor-sdk-path", "mcpvisor")


def _argv(subject: str, port: int, workdir: Path) -> list[str]:
    upstream = ServerDef("b")
    if subject == "sdk-http":
        return [PYTHON, str(HTTP_UPSTREAM), "--port", str(port), *upstream.argv()[1:]]
    cfg = workdir / f"{subject}.json"
    cfg.write_text(json.dumps(mcpvisor_config([upstream], {"fastPath": subject == "mcpvisor"})))
    return [PYTHON, "-m", "mcpvisor", "serve", "--config", str(cfg), "--transport", "http",
            "--host", "127.0.0.1", "--port", str(port)]


class H11Connection:
    """One keep-alive HTTP/1.1 connection, its requests framed by h11 (the library hypercorn
    itself parses with): far cheaper per request than a full HTTP client, so the client's
    CPU does not set the figures."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        import h11

        self._h11 = h11
        self.stream = stream
        self.host = host.encode()
        self.conn = h11.Connection(h11.CLIENT)

    async def send(self, path: str, data: bytes,
                   headers: Sequence[tuple[bytes, bytes]]) -> tuple[int, dict[str, str], bytes]:
        """POST ``data``: (status, response headers, body)."""
        h11 = self._h11
        fields = [(b"host", self.host), (b"content-length", str(len(data)).encode()), *headers]
        out = self.conn.send(h11.Request(method="POST", target=path, headers=fields))
        out += self.conn.send(h11.Data(data=data)) + self.conn.send(h11.EndOfMessage())
        await self.stream.send_all(out)
        status = 0
        got: dict[str, str] = {}
        chunks: list[bytes] = []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                got = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.conn.start_next_cycle()
                return status, got, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                raise RuntimeError("the server closed the connection")

    async def post(self, path: str, body: dict[str, Any],
                   headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        """POST ``body`` as JSON: (status, response headers, body text)."""
        status, got, data = await self.send(path, json.dumps(body).encode(),
                                            [(k.encode(), v.encode()) for k, v in headers.items()])
        return status, got, data.decode()


async def open_raw_session(http: H11Connection, path: str) -> dict[str, str]:
    status, got, text = await http.post(path, INIT, HEADERS)
    if status != 200:
        raise RuntimeError(f"initialize: HTTP {status}: {text[:200]}")
    headers = {**HEADERS, "mcp-protocol-version": "2025-11-25"}
    sid = got.get("mcp-session-id")
    if sid:
        headers["mcp-session-id"] = sid
    await http.post(path, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    return headers


async def _tool(http: H11Connection, path: str, headers: dict[str, str]) -> str:
    """The exposed name of the upstream's ``echo`` (a proxy may prefix it)."""
    _, _, text = await http.post(path, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers)
    names = [t["name"] for t in response_in(text)["result"]["tools"]]
    return str(next(n for n in names if n == "echo" or n.endswith("echo")))


def response_in(body: str) -> dict[str, Any]:
    """The JSON-RPC response in a JSON or SSE body."""
    if body.lstrip().startswith("{"):
        decoded: dict[str, Any] = json.loads(body)
        return decoded
    for line in reversed(body.splitlines()):
        if line.startswith("data:") and line[5:].strip():
            message: dict[str, Any] = json.loads(line[5:])
            if "id" in message and "method" not in message:
                return message
    raise ValueError(f"no response in {body[:200]!r}")


async def _client(url: str, calls: int, latencies: list[float], tag: int) -> None:
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    async with stream:
        http = H11Connection(stream, parts.netloc)
        headers = await open_raw_session(http, parts.path)
        tool = await _tool(http, parts.path, headers)
        for i in range(calls):
            body = {"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
                    "params": {"name": tool, "arguments": {"text": f"c{tag}-{i}"}}}
            t0 = time.perf_counter()
            _, _, text = await http.post(parts.path, body, headers)
            answer = response_in(text)
            latencies.append(time.perf_counter() - t0)
            if "result" not in answer:
                raise RuntimeError(f"call failed: {answer}")


async def _measure(url: str, clients: int, calls: int) -> dict[str, float]:
    latencies: list[float] = []
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for c in range(clients):
            nursery.start_soon(_client, url, calls, latencies, c)
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "calls_per_s": len(latencies) / wall}


async def _run_subject(subject: str, workdir: Path,
                       plan: Sequence[tuple[int, int]]) -> list[dict[str, float]]:
    import subprocess

    port = procs.free_port()
    proc = await trio.lowlevel.open_process(_argv(subject, port, workdir), cwd=str(workdir),
                                            env=procs.base_env(tag=f"raw-{subject}"),
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await procs.wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        await _measure(url, 2, 20)  # warm up: imports, first list, upstream ready
        return [await _measure(url, clients, calls) for clients, calls in plan]
    finally:
        proc.terminate()
        with trio.move_on_after(5, shield=True):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()


async def run(clients: int, calls: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each subject at 1 client and at ``clients``, ``rounds`` times interleaved; the median round."""
    plan = [(1, calls * 2), (clients, max(1, calls // 5))]
    runs: dict[str, list[list[dict[str, float]]]] = {s: [] for s in SUBJECTS}
    with tempfile.TemporaryDirectory(prefix="mcpvisor-bench-raw-") as tmp:
        for _ in range(rounds):
            for subject in SUBJECTS:
                procs.progress(f"bench http_raw: {subject}")
                runs[subject].append(await _run_subject(subject, Path(tmp), plan))
    out: dict[str, list[dict[str, float]]] = {}
    for subject, rs in runs.items():
        out[subject] = [{k: statistics.median(r[i][k] for r in rs) for k in rs[0][i]}
                        for i in range(len(plan))]
    return out


THROUGHPUT_TARGET: Final = 3.0
"""Issue 29: mcpvisor's streamable HTTP throughput at ``--clients`` over the SDK's own server's."""
P50_TARGET_MS: Final = 0.7
"""Issue 29: one client's p50 through mcpvisor's HTTP front, trivial upstream."""


def report(results: dict[str, list[dict[str, float]]], clients: int) -> str:
    base = results["sdk-http"]
    lines = ["| subject | clients | p50 ms | p99 ms | calls/s | throughput vs SDK's HTTP server |",
             "|---|---|---|---|---|---|"]
    for subject, rows in results.items():
        for row, n, ref in zip(rows, (1, clients), base, strict=True):
            lines.append(f"| {subject} | {n} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
                         f"{row['calls_per_s']:.0f} | {row['calls_per_s'] / ref['calls_per_s']:.2f}x |")
    ours = results.get("mcpvisor")
    if ours is not None:
        ratio = ours[1]["calls_per_s"] / base[1]["calls_per_s"]
        p50 = ours[0]["p50_ms"]
        lines += ["", f"target: at {clients} clients, at least {THROUGHPUT_TARGET:g}x the SDK's HTTP server: "
                      f"{ratio:.2f}x, {'met' if ratio >= THROUGHPUT_TARGET else 'missed'}",
                  f"target: one client's p50 at most {P50_TARGET_MS:g} ms: {p50:.2f} ms, "
                  f"{'met' if p50 <= P50_TARGET_MS else 'missed'}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcpvisor.bench.http_raw", description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--calls", type=int, default=200, help="calls per client at 1 client is twice this; "
                   "at --clients, a fifth of it each")
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    results = trio.run(run, args.clients, args.calls, args.rounds)
    sys.stdout.write(report(results, args.clients) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
