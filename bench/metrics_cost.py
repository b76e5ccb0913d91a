"""What recording metrics (or tracing) costs a tool call, in CPU, with it toggled in one proxy.

``python -m mcpvisor.bench.metrics_cost [--traces] [--pairs N] [--calls N] [--concurrency C] [--same]``

One proxy runs in this process (`mcpvisor.open_supervisor`, the benchmark upstream as a
real subprocess) behind the stdio front it runs under ``serve`` (fast path and all), on
OS pipes; a raw JSON-RPC client keeps ``C`` calls of ``echo`` in flight. Batches of
calls alternate between metrics on (``sup.metrics`` and every actor's meter set, as
``serve --metrics-port`` or the HTTP front has them) and off, in the order on-off,
off-on, ... so a drift of the machine falls on both alike. Each batch's CPU time of this
process (`time.process_time`: the proxy and the small client, not the upstream) per call
is one value; the result is the median over pairs of on / off, and the median
difference in microseconds a call.

``--traces``: the same with tracing toggled instead (every call sampled, its two spans
exported by the OTLP/HTTP exporter to a sink in a subprocess, so the sink's CPU is not
counted); each batch with tracing on ends by flushing what it queued, inside its time,
so the export's work (making the spans, encoding and posting them, on the batch
processor's thread) counts where it was caused.

Why CPU and not calls a second: on a shared 2-core machine the wall clock of a batch
moves by tens of percent with other jobs, while the CPU a call takes moves by a few;
the stdio throughput scenario (``mcpvisor-metrics`` against ``mcpvisor``) and
`mcpvisor.bench.scenarios_tracing` measure the same over real processes, with that noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import psutil
import trio

from mcpvisor.bench import procs
from mcpvisor.bench.drivers import UPSTREAM

PAIRS: Final = 12
CALLS: Final = 3000
CONCURRENCY: Final = 32
TARGET: Final = 1.03
"""Recording metrics may cost a call at most 3 %."""
TRACES_TARGET: Final = 1.15
"""Tracing every call may cost it at most 15 % (issue 28's target is at c=32 in calls a
second; a CPU ratio is the stricter reading: it is what a proxy that is the bottleneck pays)."""

EXPORT_MODULE: Final = "mcpvisor.actors.span_export"
"""The span export process's module (a name, not an import: the bench also measures older trees)."""

SINK: Final = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""An OTLP/HTTP endpoint that answers 200 to every export (in its own process)."""


async def measure(pairs: int, calls: int, concurrency: int, same: bool = False,
                  traces: bool = False) -> dict[str, Any]:
    """The figures of the module docstring; ``same``: both halves of a pair with metrics
    (or tracing) off, which shows the noise of the measurement itself (the ratio should be 1)."""
    if not traces:
        return await _measure(pairs, calls, concurrency, same, None)
    sink = await trio.lowlevel.open_process([sys.executable, "-c", SINK], stdout=subprocess.PIPE,
                                            env=procs.base_env())
    try:
        assert sink.stdout is not None
        port = b""
        with trio.fail_after(30):
            while not port.endswith(b"\n"):
                chunk = await sink.stdout.receive_some(64)
                if not chunk:
                    raise RuntimeError("the OTLP sink did not start")
                port += chunk
        return await _measure(pairs, calls, concurrency, same, f"http://127.0.0.1:{int(port)}")
    finally:
        sink.kill()
        with trio.CancelScope(shield=True):
            await sink.wait()


async def _measure(pairs: int, calls: int, concurrency: int, same: bool, sink: str | None) -> dict[str, Any]:
    from mcpvisor import open_supervisor
    from mcpvisor.actors import telemetry
    from mcpvisor.actors.fronts.stdio import StdioFront
    from mcpvisor.metrics import Metrics

    if sink is not None:
        telemetry.configure(telemetry.TelemetryConfig(sink, sample_ratio=1.0, source="the bench"))
    tracer, telemetry.tracer = telemetry.tracer, None
    with tempfile.TemporaryDirectory(prefix="mcpvisor-metrics-cost-") as tmp:
        config = {"mcpServers": {"up": {"command": sys.executable, "args": [str(UPSTREAM)]}},
                  "settings": {"exposure": "all", "startupWait": "60s"}}
        async with open_supervisor(config, state_dir=Path(tmp), watch=False) as sup:
            await sup.wait_ready()
            tool = next(t["name"] for t in sup.tools() if t["name"].endswith("echo"))
            up_r, up_w = os.pipe()
            down_r, down_w = os.pipe()
            front_in, client_out, client_in, front_out = (trio.lowlevel.FdStream(fd)
                                                          for fd in (up_r, up_w, down_r, down_w))
            async with front_in, front_out, client_in, client_out, trio.open_nursery() as nursery:
                front = StdioFront(sup.front, front_in, front_out, max_message=sup.settings.max_message_bytes,
                                   fast_path=True)
                nursery.start_soon(front.serve)
                buf = bytearray()

                async def answers(n: int) -> None:
                    seen = 0
                    while seen < n:
                        chunk = await client_in.receive_some(1 << 16)
                        buf.extend(chunk)
                        seen += chunk.count(b"\n")
                    del buf[:]

                hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "metrics-cost", "version": "1"}}
                await client_out.send_all(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                                      "params": hello}).encode() + b"\n")
                await answers(1)
                await client_out.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
                # Ids 1..C: each call of a window answered before the next window reuses them.
                params = {"name": tool, "arguments": {"text": "hello"}}
                window = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                              "params": params}).encode() + b"\n"
                                  for i in range(1, concurrency + 1))

                async def batch() -> float:
                    started = time.process_time()
                    for _ in range(calls // concurrency):
                        await client_out.send_all(window)
                        await answers(concurrency)
                    if telemetry.tracer is not None:
                        telemetry._provider.force_flush()  # this batch's spans, exported within its time
                    return (time.process_time() - started) / (calls // concurrency * concurrency) * 1e6

                metrics = Metrics()

                def switch(on: bool) -> None:
                    if sink is not None:
                        telemetry.tracer = tracer if on and not same else None
                        return
                    sup.metrics = metrics if on and not same else None
                    for up in sup.upstreams.values():
                        up.meter = sup.metrics

                await batch()  # warm-up
                helpers_before = await _helpers_cpu()
                per: dict[bool, list[float]] = {True: [], False: []}
                for i in range(pairs):
                    for on in ((True, False) if i % 2 == 0 else (False, True)):
                        switch(on)
                        per[on].append(await batch())
                switch(False)
                helpers_s = await _helpers_cpu() - helpers_before
                counted = sum(h.count for h in metrics.server_ops.values())
                nursery.cancel_scope.cancel()
    if sink is not None:
        telemetry.tracer = tracer
        await telemetry.shutdown()
    ratios = [a / b for a, b in zip(per[True], per[False], strict=True)]
    return {"pairs": pairs, "calls_per_batch": calls // concurrency * concurrency, "concurrency": concurrency,
            "cpu_us_per_call_off": round(statistics.median(per[False]), 1),
            "cpu_us_per_call_on": round(statistics.median(per[True]), 1),
            "cost_us_per_call": round(statistics.median(a - b for a, b in zip(per[True], per[False],
                                                                             strict=True)), 2),
            "ratio_on_off": round(statistics.median(ratios), 4), "target": TRACES_TARGET if sink else TARGET,
            # CPU of the span export process a call made with tracing on: the work moved out
            # of the proxy, shown beside what the proxy pays.
            "helper_cpu_us_per_call_on": round(helpers_s / max(len(per[True]), 1)
                                               / (calls // concurrency * concurrency) * 1e6, 1),
            "counted_calls": counted}


async def _helpers_cpu() -> float:
    """CPU seconds of the proxy's span export process (`mcpvisor.actors.span_export`), once
    it is idle (it posts its queue after the proxy hands it over)."""
    me = psutil.Process()
    last = -1.0
    for _ in range(50):
        now = 0.0
        for child in me.children():
            try:
                if EXPORT_MODULE in child.cmdline():
                    times = child.cpu_times()
                    now += times.user + times.system
            except psutil.Error:
                pass
        if now == last:
            return now
        last = now
        await trio.sleep(0.2)
    return last


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcpvisor.bench.metrics_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=PAIRS, help=f"on/off pairs of batches (default {PAIRS})")
    p.add_argument("--calls", type=int, default=CALLS, help=f"calls per batch (default {CALLS})")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY,
                   help=f"calls in flight (default {CONCURRENCY})")
    p.add_argument("--same", action="store_true",
                   help="metrics off in both halves: the measurement's own noise (the ratio should be 1)")
    p.add_argument("--traces", action="store_true",
                   help="toggle tracing (every call sampled, exported over OTLP/HTTP) instead of metrics")
    args = p.parse_args(argv)
    result = trio.run(measure, args.pairs, args.calls, args.concurrency, args.same, args.traces)
    met = result["ratio_on_off"] <= result["target"]
    what = "tracing" if args.traces else "metrics"
    print(f"{what} cost at concurrency {result['concurrency']}: {result['ratio_on_off']:.3f}x CPU a call "
          f"({result['cost_us_per_call']:+.2f} us on {result['cpu_us_per_call_off']} us), "
          f"target <= {result['target']}: {'met' if met else 'missed'}"
          f"; export process {result['helper_cpu_us_per_call_on']} us a call", file=sys.stderr)
    print(json.dumps({"scenario": "tracing_cost" if args.traces else "metrics_cost", **result, "met": met}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
