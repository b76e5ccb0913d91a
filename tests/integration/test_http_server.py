"""The HTTP front serves HTTP/1.1 itself (`mcpvisor.actors.fronts.http_server`): what a client
sees on the wire is what hypercorn gave it.

A real ``mcpvisor serve --transport http`` subprocess with a token, in front of the stdio
``everything`` fixture; raw TCP connections (h11 frames the well-formed requests) so each
check sees the bytes: a connection kept alive across a refused POST whose body the app never
read and across fast-path calls, ``Expect: 100-continue``, a request dribbled a byte at a
time, and the refusals of a malformed request and of an oversized head.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import h11
import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, everything, write_config
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy

pytestmark = pytest.mark.slow

TOKEN: Final = "lead-" + "c" * 40


class Conn:
    """One keep-alive connection to the front, its requests and answers framed by h11."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host.encode()
        self.h11 = h11.Connection(h11.CLIENT)

    async def send(self, target: str, body: dict[str, Any], headers: dict[str, str], *,
                   dribble: bool = False) -> None:
        data = json.dumps(body).encode()
        fields = [(b"host", self.host), (b"content-length", str(len(data)).encode()),
                  *((k.encode(), v.encode()) for k, v in headers.items())]
        out = self.h11.send(h11.Request(method="POST", target=target, headers=fields)) or b""
        out += (self.h11.send(h11.Data(data=data)) or b"") + (self.h11.send(h11.EndOfMessage()) or b"")
        if not dribble:
            await self.stream.send_all(out)
            return
        for i in range(len(out)):
            await self.stream.send_all(out[i:i + 1])

    async def answer(self) -> tuple[int, dict[str, str], str]:
        status, headers, chunks = 0, {}, []
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.h11.start_next_cycle()
                return status, headers, b"".join(chunks).decode()
            else:
                raise AssertionError(f"unexpected {event!r}")

    async def post(self, target: str, body: dict[str, Any], headers: dict[str, str],
                   *, dribble: bool = False) -> tuple[int, dict[str, str], str]:
        await self.send(target, body, headers, dribble=dribble)
        return await self.answer()


async def read_all(stream: trio.SocketStream) -> bytes:
    """Everything the front sends until it closes the connection."""
    got = bytearray()
    while chunk := await stream.receive_some(65536):
        got += chunk
    return bytes(got)


def result_of(body: str) -> dict[str, Any]:
    """The JSON-RPC answer in an SSE or JSON body."""
    if body.lstrip().startswith("{"):
        found: dict[str, Any] = json.loads(body)
        return found
    for line in reversed(body.splitlines()):
        if line.startswith("data:") and '"id"' in line:
            message: dict[str, Any] = json.loads(line[5:])
            return message
    raise AssertionError(f"no answer in {body[:200]!r}")


async def test_the_front_speaks_http_1_1_as_before(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ev": everything()}, authTokens={"lead": TOKEN})
    env = {"MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0", env=env) as proxy:
            url = urlsplit(proxy.url)
            host, port, path = url.hostname or "127.0.0.1", url.port or 80, url.path
            auth = {**HTTP_HEADERS, "Authorization": f"Bearer {TOKEN}"}

            # One connection: a POST refused before its body was read (no token), then the
            # session, then calls on the fast path, then a request sent a byte at a time.
            async with await trio.open_tcp_stream(host, port) as stream:
                conn = Conn(stream, url.netloc)
                status, _, _ = await conn.post("/api/servers", {"name": "x"}, HTTP_HEADERS)
                assert status == 401  # the dashboard's API refused it without reading the body
                status, headers, _ = await conn.post(path, INIT, auth)
                assert status == 200
                session = {**auth, "mcp-session-id": headers["mcp-session-id"],
                           "mcp-protocol-version": "2025-11-25"}
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                status, _, _ = await conn.post(path, initialized, session)
                assert status == 202
                for rid in (2, 3):
                    call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                            "params": {"name": "ev_echo", "arguments": {"text": f"m{rid}"}}}
                    status, headers, body = await conn.post(path, call, session)
                    assert status == 200
                    assert headers.get("mcpvisor-path") == "fast"
                    # JSON when answered within the headers' grace, else the resumable SSE stream
                    # (a loaded machine): the client's Accept admits both; on its session either way
                    assert headers["content-type"] in ("application/json", "text/event-stream")
                    assert headers["mcp-session-id"] == session["mcp-session-id"]
                    assert result_of(body)["result"]["content"][0]["text"].endswith(f"m{rid}")
                status, _, body = await conn.post(path, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
                                                  session, dribble=True)
                assert status == 200
                assert any(t["name"] == "ev_echo" for t in result_of(body)["result"]["tools"])

            # Expect: 100-continue: the front asks for the body before it reads it.
            async with await trio.open_tcp_stream(host, port) as stream:
                data = json.dumps(INIT).encode()
                head = (f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Length: {len(data)}\r\n"
                        f"Expect: 100-continue\r\nAuthorization: Bearer {TOKEN}\r\n"
                        "Accept: application/json, text/event-stream\r\n"
                        "Content-Type: application/json\r\n\r\n")
                await stream.send_all(head.encode())
                got = bytearray()
                while b"\r\n\r\n" not in got:
                    got += await stream.receive_some(65536)
                assert got.startswith(b"HTTP/1.1 100 ")
                del got[:got.index(b"\r\n\r\n") + 4]
                await stream.send_all(data)
                while b"\r\n\r\n" not in got:
                    got += await stream.receive_some(65536)
                assert got.startswith(b"HTTP/1.1 200 ")
                assert b"\r\nmcp-session-id: " in got.lower()

            # A request line that is not HTTP: 400, and the connection closes.
            async with await trio.open_tcp_stream(host, port) as stream:
                await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
                assert (await read_all(stream)).startswith(b"HTTP/1.1 400 ")

            # A head that goes on past what the front holds (16 KiB): 431, and the connection closes.
            async with await trio.open_tcp_stream(host, port) as stream:
                big = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nX-Big: {'a' * 20000}"
                await stream.send_all(big.encode())
                assert (await read_all(stream)).startswith(b"HTTP/1.1 431 ")
