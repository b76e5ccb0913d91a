"""Throughput of 1, 2 and 3 mcpvisor replicas behind HAProxy (deploy/haproxy.cfg).

Each replica is ``mcpvisor serve --transport http --replica mcpvisor-N`` in front of
`bench/upstream.py`; HAProxy runs the shipped deploy/haproxy.cfg with its server lines
pointed at them (one, two or three). The client sends 2026-07-28 ``tools/call`` requests
(no session: any replica may take each), ``--concurrency`` in flight, each on its own
keep-alive HTTP/1.1 connection framed by h11 (so the client's own CPU sets the figures
as little as it can), each call with its own argument.

Printed: calls/s per replica count and its ratio to one replica behind HAProxy, and one
replica without a balancer (what HAProxy itself costs). Everything, client included,
shares this machine's cores: on a 2-core box the ratio says more than the number (more
replicas than cores cannot add throughput; what it shows is that a balancer and more
replicas cost little).

Usage: ``python -m mcpvisor.bench.replicas [--calls N] [--concurrency N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.drivers import PYTHON, ServerDef, mcpvisor_config
from mcpvisor.bench.http_raw import H11Connection

DEPLOY: Final = Path(__file__).resolve().parents[1] / "deploy"
"""deploy/ of the checkout this file is in (the bench runs from a checkout)."""
EXAMPLE_PORT: Final = 8848
MODERN: Final = "2026-07-28"
META: Final = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientInfo": {"name": "bench-replicas", "version": "1"},
               "io.modelcontextprotocol/clientCapabilities": {}}
COUNTS: Final = (1, 2, 3)


def _headers(method: str, name: str | None = None) -> list[tuple[bytes, bytes]]:
    fields = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
              (b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", method.encode())]
    if name is not None:
        fields.append((b"mcp-name", name.encode()))
    return fields


async def _echo_tool(http: H11Connection) -> str:
    frame = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    status, _, body = await http.send("/mcp", json.dumps(frame).encode(), _headers("tools/list"))
    if status != 200:
        raise RuntimeError(f"tools/list: HTTP {status}: {body[:200]!r}")
    names = [t["name"] for t in json.loads(body)["result"]["tools"]]
    return str(next(n for n in names if n.endswith("echo")))


async def _measure(port: int, calls: int, concurrency: int) -> float:
    """Calls per second: ``calls`` echo calls, ``concurrency`` connections each sending in turn."""
    streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(concurrency)]
    conns = [H11Connection(s, f"127.0.0.1:{port}") for s in streams]
    tool = await _echo_tool(conns[0])
    ids = iter(range(calls))
    headers = _headers("tools/call", tool)

    async def client(http: H11Connection) -> None:
        for i in ids:
            frame = {"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
                     "params": {"name": tool, "arguments": {"text": f"c{i}"}, "_meta": META}}
            status, _, body = await http.send("/mcp", json.dumps(frame).encode(), headers)
            if status != 200 or b'"result"' not in body:
                raise RuntimeError(f"call failed: HTTP {status}: {body[:200]!r}")

    try:
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for http in conns:
                nursery.start_soon(client, http)
        return calls / (time.perf_counter() - t0)
    finally:
        for s in streams:
            await s.aclose()


@asynccontextmanager
async def _replicas(count: int, workdir: Path) -> AsyncIterator[list[int]]:
    config = workdir / "mcpvisor.json"
    config.write_text(json.dumps(mcpvisor_config([ServerDef("b")], {})))
    async with AsyncExitStack() as stack:
        ports = []
        for n in range(1, count + 1):
            port = procs.free_port()
            home = workdir / f"replica-{count}-{n}"
            home.mkdir()
            env = procs.base_env({"MCPVISOR_STATE_DIR": str(home)}, tag=f"replicas-{count}-{n}")
            proc = await procs.open_server_process(
                [PYTHON, "-m", "mcpvisor", "serve", "--config", str(config), "--transport", "http",
                 "--port", str(port), "--replica", f"mcpvisor-{n}"], env, home / "log")
            stack.push_async_callback(procs.stop_process, proc)
            await procs.wait_port(port, proc)
            ports.append(port)
        yield ports


def haproxy_config(ports: Sequence[int], listen: int) -> str:
    """deploy/haproxy.cfg with its server lines pointed at ``ports`` (the others dropped)
    and its ``bind`` at ``listen``."""
    lines = []
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        words = line.split()
        if words[:1] == ["server"] and words[1].startswith("mcpvisor-"):
            n = int(words[1].rsplit("-", 1)[1])
            if n > len(ports):
                continue
            line = line.replace(f"mcpvisor-{n}:{EXAMPLE_PORT}", f"127.0.0.1:{ports[n - 1]}")
        elif words[:1] == ["bind"]:
            line = f"    bind 127.0.0.1:{listen}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@asynccontextmanager
async def _haproxy(ports: Sequence[int], workdir: Path) -> AsyncIterator[int]:
    binary = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise RuntimeError("haproxy is not installed (tests/setup.sh installs Debian's)")
    listen = procs.free_port()
    cfg = workdir / f"haproxy-{len(ports)}.cfg"
    cfg.write_text(haproxy_config(ports, listen))
    proc = await trio.lowlevel.open_process([binary, "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            env=procs.base_env(tag="replicas-haproxy"))
    try:
        await procs.wait_port(listen, proc)
        yield listen
    finally:
        await procs.stop_process(proc)


async def run(calls: int, concurrency: int, rounds: int) -> dict[str, float]:
    """calls/s per subject (the median of ``rounds``): ``direct`` (one replica, no balancer),
    then 1, 2 and 3 replicas behind HAProxy."""
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="mcpvisor-bench-replicas-") as tmp:
        for r in range(rounds):
            for count in COUNTS:
                work = Path(tmp) / f"round-{r}-{count}"
                work.mkdir()
                procs.progress(f"bench replicas: {count} replica(s), round {r + 1}")
                async with _replicas(count, work) as ports, _haproxy(ports, work) as listen:
                    await _measure(listen, 200, min(concurrency, 8))  # warm up every replica
                    if count == 1:
                        runs.setdefault("direct", []).append(await _measure(ports[0], calls, concurrency))
                    runs.setdefault(str(count), []).append(await _measure(listen, calls, concurrency))
    return {subject: statistics.median(values) for subject, values in runs.items()}


def report(results: dict[str, float], concurrency: int) -> str:
    base = results["1"]
    lines = [f"| replicas behind HAProxy | calls/s at {concurrency} in flight | ratio to 1 replica |",
             "|---|---|---|",
             f"| 1, no balancer | {results['direct']:.0f} | {results['direct'] / base:.2f}x |"]
    lines += [f"| {n} | {results[str(n)]:.0f} | {results[str(n)] / base:.2f}x |" for n in COUNTS]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcpvisor.bench.replicas", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=4000, help="calls per measurement (default 4000)")
    p.add_argument("--concurrency", type=int, default=32, help="calls in flight (default 32)")
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    results = trio.run(run, args.calls, args.concurrency, args.rounds)
    sys.stdout.write(report(results, args.concurrency) + "\n")
    sys.stdout.write(json.dumps({"bench": "replicas", "concurrency": args.concurrency, "calls": args.calls,
                                 "calls_per_s": results}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
