"""Floods from an upstream, through a real ``mcpvisor serve`` (issue 23 items 4 and 6).

The proxy is a real ``mcpvisor serve`` subprocess reached by a real SDK client over
stdio; the upstream is flaky.py, whose ``sampling_flood`` tool sends 20,000
``sampling/createMessage`` requests at once. The client never answers sampling (a person
who walked away), so every forwarded request stays open.

What must hold: at most `MAX_SERVER_REQUESTS` of them reach the client; every other one is
refused to the upstream at once with a JSON-RPC error; the proxy's memory stays bounded
(issue 23 measured 83 -> 383 MB without the cap); the proxy keeps serving.

And a progress flood to an HTTP client that stops reading (item 4): every other client's
calls to the same upstream keep being answered; the stuck client is disconnected and its
call cancelled upstream; the upstream is never restarted.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2
import psutil
import pytest
import trio
from mcp import Client
from trio_websocket import open_websocket_url

from mcpvisor.actors.link.midcall import MAX_SERVER_REQUESTS
from tests.helpers import Recorder, flaky, proxy_client, read_record, text_of, write_config
from tests.polling import poll_until
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy

pytestmark = pytest.mark.slow

BOUND_S: Final = 240.0
"""A test that starts `mcpvisor serve` and floods it on a loaded 2-core box."""
FLOOD: Final = 20_000
"""Issue 23's count of sampling requests."""
PROMPT_S: Final = 10.0
"""An answer "at once" in real time on a loaded 2-core box: far below the call timeout."""
INITIALIZED: Final = {"jsonrpc": "2.0", "method": "notifications/initialized"}
FLOOD_STEPS: Final = 10_000_000
"""Progress notifications the stuck client's call would send: more than it could ever take."""
FLOOD_INTERVAL_S: Final = 0.0005
"""Progress as fast as a client can be flooded (about 2,000 a second: megabytes within the
stall bound, far past any socket buffer) without the upstream taking a whole core, so the
other client's answers measure the proxy, not a starved machine."""
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
    config = write_config(tmp_path, {"up": flaky("--sampling-flood", timeout=120)})
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


async def stuck_http_client(url: str) -> tuple[trio.socket.SocketType, str]:
    """Open a session on the HTTP front, start a progress flood on it over a raw socket
    with a tiny receive buffer, and never read a byte of the answer (a client that
    stopped reading). Returns the socket (close it to end the client) and the session id."""
    async with httpx2.AsyncClient(timeout=30) as http:
        opened = await http.post(url, json=INIT, headers=HTTP_HEADERS)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        headers = {**HTTP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                               headers=headers)
        assert done.status_code == 202, done.text
    call = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "up_progress", "arguments": {"steps": FLOOD_STEPS, "interval": FLOOD_INTERVAL_S},
        "_meta": {"progressToken": "flood"}}}).encode()
    parts = urlsplit(url)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: {len(call)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect((parts.hostname, parts.port))
    await sock.send(head + call)
    return sock, session


async def test_a_client_that_stops_reading_never_stalls_the_others(tmp_path: Path) -> None:
    """One HTTP client floods itself with progress and stops reading its SSE stream.

    Must hold: another client's calls to the same upstream keep being answered within
    `PROMPT_S` the whole time (a regression blocks the upstream's reader: they time out);
    the stuck client is disconnected within the stall bound and its call is cancelled
    upstream (``notifications/cancelled`` recorded by flaky.py); its session is gone
    (404); the upstream is never declared hung or restarted.
    """
    record = tmp_path / "up.jsonl"
    config = write_config(tmp_path, {"up": flaky("--record", str(record), timeout=30)})
    with trio.fail_after(BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0") as proxy:
            async with Client(proxy.url, mode="legacy", cache=None) as other:
                sock, session = await stuck_http_client(proxy.url)
                with sock:
                    answered = 0
                    while "took no message" not in proxy.text():
                        with trio.fail_after(PROMPT_S):
                            result = await other.call_tool("up_echo", {"text": str(answered)})
                        assert text_of(result) == f"echo: {answered}"
                        answered += 1
                    # The upstream records the cancel; the proxy may print nothing after its
                    # log line, so the record is what is watched.
                    with trio.fail_after(PROMPT_S):
                        await poll_until(lambda: any(e["event"] == "cancelled" for e in read_record(record)))
                    async with httpx2.AsyncClient(timeout=30) as http:
                        gone = await http.post(proxy.url, json={"jsonrpc": "2.0", "id": 8, "method": "ping"},
                                               headers={**HTTP_HEADERS, "mcp-session-id": session})
                    assert gone.status_code == 404
                with trio.fail_after(PROMPT_S):
                    result = await other.call_tool("up_echo", {"text": "after"})
                assert text_of(result) == "echo: after"
    print(f"answered {answered} calls of the other client while one client stalled")
    starts = [e for e in read_record(record) if e["event"] == "initialize"]
    assert len(starts) == 1, "the upstream was restarted"
    assert "hung" not in proxy.text()


async def test_a_websocket_client_that_stops_reading_never_stalls_the_others(tmp_path: Path) -> None:
    """The websocket front, the same flood: a ws client starts a progress flood and stops
    reading (its library's one-message queue fills, then its socket). Another client's
    calls to the same upstream keep being answered within `PROMPT_S` (a regression times
    them out); the stuck connection is closed and its call cancelled upstream; the
    upstream is never restarted."""
    record = tmp_path / "up.jsonl"
    config = write_config(tmp_path, {"up": flaky("--record", str(record), timeout=30)})
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "up_progress", "arguments": {"steps": FLOOD_STEPS, "interval": FLOOD_INTERVAL_S},
        "_meta": {"progressToken": "flood"}}}
    with trio.fail_after(BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            async with open_websocket_url(proxy.url, subprotocols=["mcp"]) as other, \
                    open_websocket_url(proxy.url, subprotocols=["mcp"], message_queue_size=1) as stuck:
                for ws in (other, stuck):
                    await ws.send_message(json.dumps(INIT))
                    await ws.get_message()
                    await ws.send_message(json.dumps(INITIALIZED))
                await stuck.send_message(json.dumps(call))  # and never read again
                answered = 0
                while "read nothing for" not in proxy.text() and "took no message" not in proxy.text():
                    with trio.fail_after(PROMPT_S):
                        await other.send_message(json.dumps({
                            "jsonrpc": "2.0", "id": 100 + answered, "method": "tools/call",
                            "params": {"name": "up_echo", "arguments": {"text": str(answered)}}}))
                        reply = json.loads(await other.get_message())
                    assert reply["id"] == 100 + answered
                    assert reply["result"]["content"][0]["text"] == f"echo: {answered}"
                    answered += 1
                with trio.fail_after(PROMPT_S):  # the upstream's record, not the proxy's log
                    await poll_until(lambda: any(e["event"] == "cancelled" for e in read_record(record)))
    print(f"answered {answered} calls of the other ws client while one stalled")
    starts = [e for e in read_record(record) if e["event"] == "initialize"]
    assert len(starts) == 1, "the upstream was restarted"
