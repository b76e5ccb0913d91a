"""Every front advertises what the proxy does, and does it (issue 14).

The proxy announces every tools, resources and prompts change to every client, so each
front's ``initialize`` must say ``listChanged: true`` for all three, and a change (here
an ``equip-toolset``) must really reach the client: on stdio and websocket as a
notification on the connection, on streamable HTTP on the client's GET stream. A
regression shows as ``listChanged: false`` on one front (the HTTP front answered so
before: the SDK's session manager runs sessions without the front's options) or a
notification that never arrives. The clients here are raw JSON-RPC, so nothing in a
client library hides what the proxy sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from trio_websocket import open_websocket_url

from mcpvisor import open_supervisor, serve_http, serve_ws
from tests.helpers import REAL_IO_BOUND_S, embedded_front, flaky, write_config

pytestmark = pytest.mark.slow

INIT: Final = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
INITIALIZED: Final = {"jsonrpc": "2.0", "method": "notifications/initialized"}
EQUIP: Final = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "equip-toolset", "arguments": {"name": "dev"}}}
TOOLS_CHANGED: Final = "notifications/tools/list_changed"


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {"fl": flaky()}, toolsets={"dev": ["fl.echo"]}, exposure="menu")


def _assert_announces_every_list(init_reply: dict[str, Any]) -> None:
    caps = init_reply["result"]["capabilities"]
    assert caps["tools"]["listChanged"] is True, caps
    assert caps["resources"]["listChanged"] is True, caps
    assert caps["prompts"]["listChanged"] is True, caps


async def test_the_stdio_front_advertises_list_changed_and_sends_it(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_front(_config(tmp_path)) as (send, receive):
            lines = Lines(receive)

            async def post(message: dict[str, Any]) -> None:
                await send.send_all(json.dumps(message).encode() + b"\n")

            await post(INIT)
            _assert_announces_every_list(await lines.next())
            await post(INITIALIZED)
            await post(EQUIP)
            seen = [await lines.next(), await lines.next()]  # the result and the notification, any order
            assert {m.get("method") for m in seen} == {TOOLS_CHANGED, None}
            assert not next(m for m in seen if m.get("id") == 2)["result"].get("isError")


class Lines:
    """Newline-delimited JSON-RPC messages read off a byte stream (the stdio wire)."""

    def __init__(self, receive: trio.abc.ReceiveStream) -> None:
        self.receive = receive
        self.buf = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buf.lstrip(b"\n"):
            chunk = await self.receive.receive_some(1 << 16)
            assert chunk, "the proxy closed its stdout"
            self.buf += chunk
        line, self.buf = self.buf.lstrip(b"\n").split(b"\n", 1)
        return dict(json.loads(line))


class Events:
    """JSON-RPC messages read off one SSE response (an HTTP POST's answer or the GET stream)."""

    def __init__(self, response: httpx2.Response) -> None:
        self.lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        while True:
            line = await self.lines.__anext__()
            if line.startswith("data:") and line[5:].strip():
                return dict(json.loads(line[5:]))


async def test_the_http_front_advertises_list_changed_and_sends_it_on_the_get_stream(tmp_path: Path) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(_config(tmp_path), state_dir=tmp_path / "state", watch=False) as sup, \
                trio.open_nursery() as nursery:
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
                async with http.stream("POST", url, json=INIT, headers=headers) as init:
                    session = {**headers, "Mcp-Session-Id": init.headers["mcp-session-id"],
                               "Mcp-Protocol-Version": "2025-11-25"}
                    _assert_announces_every_list(await Events(init).next())
                await http.post(url, json=INITIALIZED, headers=session)
                get_headers = {**session, "Accept": "text/event-stream"}
                async with http.stream("GET", url, headers=get_headers) as stream:
                    # The response has started: the proxy holds this GET stream now.
                    assert stream.status_code == 200
                    async with http.stream("POST", url, json=EQUIP, headers=session) as equip:
                        reply = await Events(equip).next()
                        assert reply["id"] == 2
                        assert not reply["result"].get("isError"), reply
                    notice = await Events(stream).next()
                    assert notice["method"] == TOOLS_CHANGED
            nursery.cancel_scope.cancel()


async def test_the_websocket_front_advertises_list_changed_and_sends_it(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(_config(tmp_path), state_dir=tmp_path / "state", watch=False) as sup, \
                trio.open_nursery() as nursery:
            url = await nursery.start(serve_ws, sup, "127.0.0.1", 0)
            async with open_websocket_url(url, subprotocols=["mcp"]) as ws:
                await ws.send_message(json.dumps(INIT))
                _assert_announces_every_list(json.loads(await ws.get_message()))
                await ws.send_message(json.dumps(INITIALIZED))
                await ws.send_message(json.dumps(EQUIP))
                seen = [json.loads(await ws.get_message()), json.loads(await ws.get_message())]
                assert {m.get("method") for m in seen} == {TOOLS_CHANGED, None}
            nursery.cancel_scope.cancel()
