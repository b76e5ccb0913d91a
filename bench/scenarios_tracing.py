"""Tool-call cost with telemetry off, with metrics only and with tracing:
``python -m mcpvisor.bench.scenarios_tracing``.

Three ``mcpvisor serve`` subjects (stdio, fast path on) over the same benchmark upstream:
``off`` (no ``OTEL_*``, no ``settings.telemetry``, no metrics port: today's proxy),
``metrics`` (``--metrics-port 0``: every call recorded for ``/metrics`` and the dashboard's
history) and ``traced`` (``settings.telemetry.endpoint`` pointing at a local OTLP/HTTP sink
on 127.0.0.1, every trace sampled: a SERVER and a CLIENT span per call, exported in
batches). Each round measures all three, rotating the order, at concurrency 32 (calls/s,
p50) and sequentially (p50); the ratios are medians of per-round ratios to ``off``. The
sink only counts what it is sent, so the figure is the proxy's cost of making and
exporting spans. (``mcpvisor.bench.metrics_cost`` measures the proxy's own CPU per call,
a stricter figure than the client's view measured here.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trio

from mcpvisor.bench.drivers import Session, mcpvisor_subject, open_session
from mcpvisor.bench.scenarios_calls import UPSTREAM, WARMUP_CALLS, call_ok, latency, throughput

ECHO_ARGS: dict[str, Any] = {"text": "x" * 64}


class Sink:
    """An OTLP/HTTP endpoint that answers 200 to every export and counts them."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                sink.exports += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[Sink]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(timeout=5)


async def run(rounds: int, calls: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, Sink().running() as sink:
        workdir = Path(tmp)
        subjects = [mcpvisor_subject("off"), mcpvisor_subject("metrics", metrics=True),
                    mcpvisor_subject("traced", telemetry={"endpoint": sink.url, "sampleRatio": 1.0})]
        async with AsyncExitStack() as stack:
            sessions: list[Session] = []
            for subject in subjects:
                session = await stack.enter_async_context(open_session(subject, [UPSTREAM], workdir))
                echo = await session.wait_tool("echo")
                for _ in range(WARMUP_CALLS):
                    await call_ok(session, echo, ECHO_ARGS)
                sessions.append(session)
            per_round: dict[str, list[dict[str, float]]] = {s.subject.name: [] for s in sessions}
            for r in range(rounds):
                shift = r % len(sessions)
                for session in sessions[shift:] + sessions[:shift]:
                    rate, p50_c, _ = await throughput(session, "echo", ECHO_ARGS, calls, concurrency)
                    seq = await latency(session, "echo", ECHO_ARGS, calls // 4)
                    per_round[session.subject.name].append(
                        {"cN_calls_s": rate, "cN_p50_ms": p50_c, "p50_ms": seq["p50_ms"]})
    off = per_round["off"]

    def ratio(name: str, key: str, invert: bool = False) -> float:
        pairs = zip(off, per_round[name], strict=True)
        values = [(o[key] / t[key]) if invert else (t[key] / o[key]) for o, t in pairs]
        return round(statistics.median(values), 3)

    def median(rows: list[dict[str, float]], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    out: dict[str, Any] = {"rounds": rounds, "calls": calls, "concurrency": concurrency}
    for name, rows in per_round.items():
        out[name] = {k: median(rows, k) for k in rows[0]}
    for name in ("metrics", "traced"):
        # Cost as a ratio to off: > 1 is slower (throughput: off's rate / this one's).
        prefix = "cost" if name == "traced" else f"cost_{name}"
        out[f"{prefix}_cN_throughput"] = ratio(name, "cN_calls_s", invert=True)
        out[f"{prefix}_cN_p50"] = ratio(name, "cN_p50_ms")
        out[f"{prefix}_sequential_p50"] = ratio(name, "p50_ms")
    out["exports"], out["export_bytes"] = sink.exports, sink.bytes
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    args = p.parse_args()
    print(json.dumps(trio.run(run, args.rounds, args.calls, args.concurrency), indent=2))


if __name__ == "__main__":
    main()
