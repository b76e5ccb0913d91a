"""One client cannot starve the others: session cap, idle reaping, requests in flight.

Against a real ``mcpvisor serve`` over loopback sockets. The RSS figures are printed
(run with ``-s`` to see them) and bounded: past the session cap, refused sessions cost
nothing that stays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx2
import psutil
import pytest
import trio
from mcp import Client
from trio_websocket import ConnectionClosed, open_websocket_url

from tests.helpers import REAL_IO_BOUND_S, flaky, text_of
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write

pytestmark = pytest.mark.slow

CAP: Final = 1000
"""settings.maxSessions's default."""
PAST_CAP: Final = 1000
WORKERS: Final = 8
PAST_CAP_GROWTH_BOUND: Final = 8 * 1024 * 1024
"""Refused sessions must not accumulate: 1,000 of them may move RSS by allocator noise only
(one kept session costs ~42 KB, so 1,000 kept would be ~42 MB)."""
IN_FLIGHT: Final = 64
EXTRA: Final = 16


def rss(pid: int) -> int:
    """Resident memory of the proxy process (its upstreams are separate processes)."""
    return int(psutil.Process(pid).memory_info().rss)


async def initialize_many(url: str, count: int) -> list[int]:
    """Open ``count`` sessions and abandon them (never DELETE, never another request)."""
    statuses: list[int] = []
    todo = iter(range(count))

    async def worker(http: httpx2.AsyncClient) -> None:
        for _ in todo:
            r = await http.post(url, json=INIT, headers=HTTP_HEADERS)
            statuses.append(r.status_code)

    async with httpx2.AsyncClient(timeout=30) as http, trio.open_nursery() as nursery:
        for _ in range(WORKERS):
            nursery.start_soon(worker, http)
    return statuses


async def test_past_the_session_cap_new_sessions_get_503_memory_stays_and_old_ones_still_answer(
    tmp_path: Path,
) -> None:
    """With ``maxSessions`` sessions open, 1,000 more are refused with 503, the proxy's RSS
    does not grow with them, and a session opened before still gets answers."""
    config = write(
        tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}, "settings": {"exposure": "all"}}
    )
    with trio.fail_after(REAL_IO_BOUND_S * 3):
        async with (
            running_proxy(config, "--transport", "http", "--port", "0", "--log-level", "info") as proxy,
            Client(proxy.url, mode="legacy", cache=None) as client,
        ):
            assert text_of(await client.call_tool("fl_echo", {"text": "first"})) == "echo: first"
            pid = proxy.process.pid
            baseline = rss(pid)
            opened = await initialize_many(proxy.url, CAP - 1)
            assert opened.count(200) == CAP - 1, sorted(set(opened))
            at_cap = rss(pid)
            refused = await initialize_many(proxy.url, PAST_CAP)
            past_cap = rss(pid)
            assert refused == [503] * PAST_CAP
            assert text_of(await client.call_tool("fl_echo", {"text": "still"})) == "echo: still"
            mib = 1024 * 1024
            print(
                f"\nRSS: {baseline / mib:.1f} MiB with 1 session, {at_cap / mib:.1f} MiB at the cap "
                f"({CAP} sessions), {past_cap / mib:.1f} MiB after {PAST_CAP} more refused"
            )
            assert past_cap - at_cap < PAST_CAP_GROWTH_BOUND


async def test_a_session_over_64_requests_in_flight_gets_an_error_for_each_extra_one_not_a_hang(
    tmp_path: Path,
) -> None:
    """80 slow calls at once on one websocket session: 64 run, the other 16 are answered at
    once with a JSON-RPC error that names the limit (a regression would queue or hang them)."""
    config = write(
        tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}, "settings": {"exposure": "all"}}
    )
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (
            running_proxy(config, "--transport", "ws", "--port", "0") as proxy,
            open_websocket_url(proxy.url, subprotocols=["mcp"], message_queue_size=256) as ws,
        ):
            await ws.send_message(json.dumps(INIT))
            assert "result" in json.loads(await ws.get_message())
            await ws.send_message(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            for i in range(IN_FLIGHT + EXTRA):
                await ws.send_message(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": 100 + i,
                            "method": "tools/call",
                            "params": {"name": "fl_sleep", "arguments": {"seconds": 600}},
                        }
                    )
                )
            errors: list[dict[str, Any]] = []
            while len(errors) < EXTRA:
                reply = json.loads(await ws.get_message())
                assert "error" in reply, reply  # nothing else can answer: every call sleeps 10 minutes
                errors.append(reply["error"])
            assert all(
                e["code"] == -32003 and "in flight" in e["message"] and "64" in e["message"] for e in errors
            )


async def test_an_idle_websocket_session_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    """``sessionIdleTimeout``: a connection with nothing in flight and no traffic is closed
    by the proxy (code 1001), so abandoned connections do not pile up."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}, "settings": {"sessionIdleTimeout": "1s"}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (
            running_proxy(config, "--transport", "ws", "--port", "0") as proxy,
            open_websocket_url(proxy.url, subprotocols=["mcp"]) as ws,
        ):
            await ws.send_message(json.dumps(INIT))
            assert "result" in json.loads(await ws.get_message())
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason is not None
            assert closed.value.reason.code == 1001
            # trio-websocket 0.12 leaves the TCP stream open when the peer closed first
            # (aclose returns early once a close reason is set): close it for the leak check.
            await ws._stream.aclose()


async def test_the_websocket_front_refuses_a_session_past_the_cap_with_503_and_keeps_the_open_one(
    tmp_path: Path,
) -> None:
    """``maxSessions`` on the websocket front: one more handshake gets 503 and the open
    session keeps answering."""
    from tests.security.test_security_tokens import raw_handshake

    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}, "settings": {"maxSessions": 1}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            async with open_websocket_url(proxy.url, subprotocols=["mcp"]) as ws:
                await ws.send_message(json.dumps(INIT))
                assert "result" in json.loads(await ws.get_message())
                status, _ = await raw_handshake(proxy.port, {})
                assert status == 503
                await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
                assert json.loads(await ws.get_message())["id"] == 2
