"""Raw frames to a real ``mcpvisor serve`` on each front, for the frame-handling chaos tests.

`open_front(front, config)` starts the proxy (stdio: a subprocess on pipes; http and ws:
`tests.security.proxy.running_proxy` on 127.0.0.1) and yields a factory of `RawFront`
clients, each past the handshake, that send bytes exactly as given and return the JSON
answer (or None when the front answers nothing, for a notification). The proxy is
stopped at the end (SIGTERM, SIGKILL after a bound) and its children with it.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final, Protocol

import httpx2
import trio
from trio_websocket import open_websocket_url

from tests.security.proxy import HTTP_HEADERS, INIT, STOP_BOUND_S, running_proxy, serve_args

FRONTS: Final = ("stdio", "http", "ws")
ANSWER_BOUND_S: Final = 30.0
"""An answer on loopback from a proxy that is alive (a loaded 2-core box)."""
SILENCE_S: Final = 1.0
"""How long a notification-shaped frame is given to produce an (unwanted) answer on stdio/ws."""


class RawFront(Protocol):
    async def send(self, frame: bytes) -> None:
        """Send ``frame`` and do not wait for an answer (HTTP: its own response is read)."""

    async def request(self, frame: bytes, *, answer_id: Any = ...) -> dict[str, Any]:
        """Send ``frame``; the answer to it (the first response, or the one with ``answer_id``)."""

    async def ping(self, request_id: Any) -> dict[str, Any]: ...


class StdioRaw:
    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._send = process.stdin
        self._receive = process.stdout
        self._buf = b""

    async def _next(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = await self._receive.receive_some(65536)
            assert chunk, "the proxy closed its stdout"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        return msg

    async def send(self, frame: bytes) -> None:
        await self._send.send_all(frame + b"\n")

    async def request(self, frame: bytes, *, answer_id: Any = ...) -> dict[str, Any]:
        await self.send(frame)
        return await self.answer(answer_id)

    async def answer(self, answer_id: Any = ...) -> dict[str, Any]:
        """The next answer (with ``answer_id``, if given), skipping the proxy's notifications."""
        with trio.fail_after(ANSWER_BOUND_S):
            while True:
                msg = await self._next()
                if "method" in msg and "id" not in msg:
                    continue  # the proxy's own notifications (list_changed, logs)
                if answer_id is ... or msg.get("id") == answer_id:
                    return msg

    async def ping(self, request_id: Any) -> dict[str, Any]:
        return await self.request(_ping(request_id), answer_id=request_id)


class WsRaw:
    def __init__(self, ws: Any) -> None:
        self._ws = ws

    async def send(self, frame: bytes) -> None:
        await self._ws.send_message(frame.decode() if _is_text(frame) else frame)

    async def request(self, frame: bytes, *, answer_id: Any = ...) -> dict[str, Any]:
        await self.send(frame)
        return await self.answer(answer_id)

    async def answer(self, answer_id: Any = ...) -> dict[str, Any]:
        """The next answer (with ``answer_id``, if given), skipping the proxy's notifications."""
        with trio.fail_after(ANSWER_BOUND_S):
            while True:
                msg: dict[str, Any] = json.loads(await self._ws.get_message())
                if "method" in msg and "id" not in msg:
                    continue
                if answer_id is ... or msg.get("id") == answer_id:
                    return msg

    async def ping(self, request_id: Any) -> dict[str, Any]:
        return await self.request(_ping(request_id), answer_id=request_id)


class HttpRaw:
    def __init__(self, http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self._http = http
        self._url = url
        self.headers = headers

    async def post(self, frame: bytes) -> httpx2.Response:
        with trio.fail_after(ANSWER_BOUND_S):
            return await self._http.post(self._url, content=frame, headers=self.headers)

    async def send(self, frame: bytes) -> None:
        await self.post(frame)

    async def request(self, frame: bytes, *, answer_id: Any = ...) -> dict[str, Any]:
        return body_of(await self.post(frame))

    async def ping(self, request_id: Any) -> dict[str, Any]:
        return await self.request(_ping(request_id))


def body_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or single-event SSE answer."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg: dict[str, Any] = json.loads(line[5:])
                if "id" in msg:
                    return msg
        raise AssertionError(f"no answer in the event stream: {response.text[:300]!r}")
    out: dict[str, Any] = response.json()
    return out


def _is_text(frame: bytes) -> bool:
    try:
        frame.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _ping(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode()


INITIALIZED: Final = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


@asynccontextmanager
async def _stdio_proxy(config: Path) -> AsyncIterator[Callable[[], Awaitable[RawFront]]]:
    process = await trio.lowlevel.open_process(
        serve_args(config), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    clients: list[StdioRaw] = []

    async def connect() -> RawFront:
        assert not clients, "a stdio proxy serves one client"
        raw = StdioRaw(process)
        clients.append(raw)
        reply = await raw.request(json.dumps(INIT).encode(), answer_id=INIT["id"])
        assert reply["result"]["serverInfo"]["name"] == "mcpvisor"
        await process.stdin.send_all(INITIALIZED + b"\n")  # type: ignore[union-attr]
        return raw

    try:
        yield connect
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with trio.move_on_after(STOP_BOUND_S) as scope:
                await process.wait()
            if scope.cancelled_caught:
                process.kill()
                await process.wait()


@asynccontextmanager
async def open_front(front: str, config: Path) -> AsyncIterator[Callable[[], Awaitable[RawFront]]]:
    """A proxy serving ``config`` on ``front``; yields ``connect()`` for a fresh client."""
    if front == "stdio":
        async with _stdio_proxy(config) as connect:
            yield connect
        return
    async with running_proxy(config, "--transport", front, "--port", "0") as proxy, AsyncExitStack() as stack:
        if front == "ws":
            async def connect() -> RawFront:
                ws = await stack.enter_async_context(open_websocket_url(proxy.url, subprotocols=["mcp"]))
                raw = WsRaw(ws)
                reply = await raw.request(json.dumps(INIT).encode(), answer_id=INIT["id"])
                assert reply["result"]["serverInfo"]["name"] == "mcpvisor"
                await ws.send_message(INITIALIZED.decode())
                return raw
        else:
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=ANSWER_BOUND_S))

            async def connect() -> RawFront:
                with trio.fail_after(ANSWER_BOUND_S):
                    opened = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
                assert body_of(opened)["result"]["serverInfo"]["name"] == "mcpvisor"
                headers = {**HTTP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                           "mcp-protocol-version": "2025-11-25"}
                raw = HttpRaw(http, proxy.url, headers)
                await raw.post(INITIALIZED)
                return raw
        yield connect
