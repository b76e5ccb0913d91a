"""What the dashboard costs the proxy: RSS and tool-call latency with the page open vs not.

Not a test (no thresholds): run it by hand and read the figures::

    PYTHONPATH=. python -m tests.integration.measure_dashboard [ROUNDS] [CALLS]

Starts two identical ``mcpvisor serve --transport http`` proxies with one fixture server
each: A never has its dashboard opened; B has the page open in headless Chromium (live
feed connected, status pushed every second, call figures kept). Sequential ``alpha_echo``
calls with the SDK client over streamable HTTP alternate between A and B in ROUNDS blocks
of CALLS, so a busy machine slows both alike; the p50 of each and their ratio are printed,
with both proxies' RSS (and B's before its page was opened).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import psutil
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import http_client
from tests.integration.cdp import open_browser
from tests.integration.dashboard import Dashboard, fleet, serving

WARMUP = 200


async def block(client: Any, calls: int, into: list[float]) -> None:
    for i in range(calls):
        started = time.perf_counter()
        await client.call_tool("alpha_echo", {"text": f"m{i}"})
        into.append(time.perf_counter() - started)


def rss_mb(dash: Dashboard) -> float:
    return float(psutil.Process(dash.proxy.process.pid).memory_info().rss) / 2**20


async def main(rounds: int, calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with AsyncExitStack() as stack:
            dashes, clients = [], []
            for name in ("a", "b"):
                (root / name).mkdir()
                dash = await stack.enter_async_context(serving(root / name, fleet(root / name)))
                http = await stack.enter_async_context(http_client())
                client = await stack.enter_async_context(
                    Client(streamable_http_client(f"{dash.base}/mcp", http_client=http), mode="legacy",
                           cache=None))
                await block(client, WARMUP, [])
                dashes.append(dash)
                clients.append(client)
            a, b = dashes
            rss_b_before = rss_mb(b)
            browser = await stack.enter_async_context(open_browser(root / "profile"))
            page = await browser.page()
            await page.navigate(f"{b.base}/login?token={b.token}")
            await page.wait_for("document.querySelector('#conn').dataset.state === 'live'")
            await block(clients[1], WARMUP, [])
            samples: list[list[float]] = [[], []]
            for _ in range(rounds):
                for which in (0, 1):
                    await block(clients[which], calls, samples[which])
            shown = await page.evaluate(
                "document.querySelector('#servers tr[data-server=\"alpha\"]').children[5].textContent")
            rss_a, rss_b = rss_mb(a), rss_mb(b)
    p50 = [statistics.median(s) * 1000 for s in samples]
    p90 = [statistics.quantiles(s, n=10)[-1] * 1000 for s in samples]
    print(f"{rounds} rounds x {calls} sequential calls per proxy, alternating (SDK client, streamable HTTP)")
    print(f"p50  A (no dashboard) {p50[0]:.3f} ms | B (page open) {p50[1]:.3f} ms | "
          f"ratio B/A {p50[1] / p50[0]:.3f}")
    print(f"p90  A {p90[0]:.3f} ms | B {p90[1]:.3f} ms | ratio B/A {p90[1] / p90[0]:.3f}")
    print(f"RSS  A {rss_a:.1f} MB | B before the page {rss_b_before:.1f} MB | "
          f"B with the page open {rss_b:.1f} MB")
    print(f"the page showed {shown} calls/min for alpha on B")


if __name__ == "__main__":
    rounds, calls = [int(a) for a in sys.argv[1:3]] + [10, 200][len(sys.argv[1:3]):]
    trio.run(main, rounds, calls)
