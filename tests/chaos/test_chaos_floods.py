"""Floods from an upstream, through a real ``mcpvisor serve`` (issue 23 item 6).

The proxy is a real ``mcpvisor serve`` subprocess reached by a real SDK client over
stdio; the upstream is flaky.py, whose ``sampling_flood`` tool sends 20,000
``sampling/createMessage`` requests at once. The client never answers sampling (a person
who walked away), so every forwarded request stays open.

What must hold: at most `MAX_SERVER_REQUESTS` of them reach the client; every other one is
refused to the upstream at once with a JSON-RPC error; the proxy's memory stays bounded
(issue 23 measured 83 -> 383 MB without the cap); the proxy keeps serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import psutil
import pytest
import trio

from actors.link.base import MAX_SERVER_REQUESTS
from tests.helpers import Recorder, flaky, proxy_client, text_of, write_config

pytestmark = pytest.mark.slow

BOUND_S: Final = 240.0
"""A test that starts `mcpvisor serve` and floods it on a loaded 2-core box."""
FLOOD: Final = 20_000
"""Issue 23's count of sampling requests."""
RSS_GROWTH_BOUND: Final = 60 * 1024 * 1024
"""How much the proxy may grow over the flood: refusing costs a frame each and keeps
nothing; forwarding all 20,000 grew it by 300 MB."""


def proxy_process(config: Path) -> psutil.Process:
    """The ``mcpvisor serve --config CONFIG`` child of this test process."""
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "serve" in cmdline and str(config) in cmdline:
            return child
    raise AssertionError(f"no mcpvisor serve process for {config}")


class NeverAnswers(Recorder):
    """A client that declares sampling and never answers it; counts what reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def sampling(self, ctx: Any, params: Any) -> Any:
        self.asked += 1
        await trio.sleep_forever()


async def test_sampling_flood_is_capped_and_memory_stays_bounded(tmp_path: Path) -> None:
    """20,000 sampling requests from one upstream: the client sees at most the cap, the
    upstream gets a JSON-RPC error for every other one at once (the call below waits for
    exactly those answers, so a proxy that forwards everything times the call out), and
    the proxy's RSS grows by less than `RSS_GROWTH_BOUND`."""
    config = write_config(tmp_path, {"up": flaky(timeout=120)})
    client_side = NeverAnswers()
    with trio.fail_after(BOUND_S):
        async with proxy_client(config, recorder=client_side) as client:
            await client.call_tool("up_echo", {"text": "warm"})
            proxy = proxy_process(config)
            before = proxy.memory_info().rss
            result = await client.call_tool(
                "up_sampling_flood", {"count": FLOOD, "wait_for": FLOOD - MAX_SERVER_REQUESTS})
            after = proxy.memory_info().rss
            summary = text_of(result)
            assert f"errors {FLOOD - MAX_SERVER_REQUESTS}" in summary, summary
            assert f"{MAX_SERVER_REQUESTS} requests from server up to the client" in summary, summary
            assert client_side.asked <= MAX_SERVER_REQUESTS
            assert after - before < RSS_GROWTH_BOUND, (before, after)
            print(f"proxy RSS over a {FLOOD} sampling flood: {before / 2**20:.0f} -> {after / 2**20:.0f} MiB")
            echoed = await client.call_tool("up_echo", {"text": "still serving"})
            assert "still serving" in text_of(echoed)
