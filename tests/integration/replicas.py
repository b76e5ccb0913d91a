"""Several ``mcpvisor serve --transport http`` replicas behind a real load balancer.

Shared by tests/integration/test_replicas*.py: the replicas (each its own state dir, the
stdio ``flaky`` fixture as upstream, named ``mcpvisor-N`` as deploy/ expects), the shipped
deploy/haproxy.cfg and deploy/nginx.conf with their example addresses replaced by the
loopback ports of this run, and a raw JSON-RPC client for both protocol eras. Every
process started here is stopped when its block ends, on failure too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import h11
import httpx2
import pytest
import trio
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from tests.helpers import flaky, http_client, write_config
from tests.polling import poll_until
from tests.security.proxy import HTTP_HEADERS, INIT, Proxy, running_proxy

REPO: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = REPO / "deploy"
EXAMPLE_PORT: Final = 8848
"""The replicas' port in the shipped files (``mcpvisor-N:8848``)."""
EXAMPLE_BIND: Final = 8080
"""Where the shipped files listen for clients."""
LB_BOUND_S: Final = 30.0
"""A balancer starting and seeing its replicas ready (health checks every second)."""
MODERN: Final = "2026-07-28"


def need(binary: str) -> str:
    """The path of ``binary``; skipped when missing, a failure under CI (tests/setup.sh installs it)."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{binary} is not installed: run tests/setup.sh")
        pytest.skip(f"{binary} is not installed (tests/setup.sh installs it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Replica:
    name: str
    proxy: Proxy
    record: Path
    """The flaky upstream's record of every call it was sent."""

    @property
    def process(self) -> trio.Process:
        return self.proxy.process

    @property
    def port(self) -> int:
        return self.proxy.port

    def saw(self, text: str) -> bool:
        """Whether a call the upstream recorded holds ``text`` (its arguments, say)."""
        return self.record.exists() and text in self.record.read_text()

    def calls_seen(self) -> int:
        if not self.record.exists():
            return 0
        return sum(1 for line in self.record.read_text().splitlines() if '"event": "call"' in line)


@asynccontextmanager
async def replicas(tmp_path: Path, count: int = 3, *, drain: str = "30s",
                   record: bool = False) -> AsyncIterator[list[Replica]]:
    """``count`` replicas named ``mcpvisor-1``... on free loopback ports, each with its own
    state dir and flaky upstream; each is stopped (SIGTERM, then SIGKILL) at the end."""
    async with AsyncExitStack() as stack:
        started: list[Replica] = []
        for n in range(1, count + 1):
            name = f"mcpvisor-{n}"
            home = tmp_path / name
            home.mkdir()
            rec = home / "record.jsonl"
            flags = ("--record", str(rec)) if record else ()
            config = write_config(home, {"f": flaky(*flags)}, drainTimeout=drain)
            env = {"MCPVISOR_STATE_DIR": str(home / "state"), "MCPVISOR_REPLICA": name}
            proxy = await stack.enter_async_context(
                running_proxy(config, "--transport", "http", "--port", "0", "--log-level", "info", env=env))
            started.append(Replica(name, proxy, rec))
        yield started


def configured(text: str, ports: Sequence[int], replace: Sequence[tuple[str, str]]) -> str:
    """A shipped balancer file with its example addresses replaced by this run's: each
    ``mcpvisor-N:8848`` by ``127.0.0.1:PORT``, then each of ``replace``. Every example
    address must be in the file (a drifted file fails here, not silently)."""
    for n, port in enumerate(ports, 1):
        example = f"mcpvisor-{n}:{EXAMPLE_PORT}"
        assert example in text, f"the shipped file no longer names {example}"
        text = text.replace(example, f"127.0.0.1:{port}")
    for old, new in replace:
        assert old in text, f"the shipped file no longer has {old!r}"
        text = text.replace(old, new)
    return text


@asynccontextmanager
async def balancer(argv: list[str], url: str, log: Path) -> AsyncIterator[trio.Process]:
    """Run a balancer in the foreground until the block ends, its log in ``log``; yields
    once ``url``/readyz answers 200 through it."""
    with log.open("wb") as sink:
        process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
    try:
        async with http_client() as http:
            async def ready() -> bool:
                assert process.returncode is None, f"{argv[0]} exited with {process.returncode}"
                try:
                    return (await http.get(f"{url}/readyz")).status_code == 200
                except httpx2.TransportError:
                    return False

            with trio.fail_after(LB_BOUND_S):
                await poll_until(ready)
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


@asynccontextmanager
async def haproxy(tmp_path: Path, ports: Sequence[int]) -> AsyncIterator[str]:
    """deploy/haproxy.cfg in front of ``ports``; yields the base URL clients use."""
    listen = free_port()
    cfg = tmp_path / "haproxy.cfg"
    # Its log (which replica took each request, how each ended) is kept in the test's directory.
    cfg.write_text(configured((DEPLOY / "haproxy.cfg").read_text(), ports,
                              [(f"bind :{EXAMPLE_BIND}\n", f"bind 127.0.0.1:{listen}\n")]))
    url = f"http://127.0.0.1:{listen}"
    async with balancer([need("haproxy"), "-db", "-f", str(cfg)], url, tmp_path / "haproxy.log"):
        yield url


@asynccontextmanager
async def nginx(tmp_path: Path, ports: Sequence[int]) -> AsyncIterator[str]:
    """deploy/nginx.conf in front of ``ports`` (pid and temp files in ``tmp_path``)."""
    listen = free_port()
    home = tmp_path / "nginx"
    home.mkdir()
    cfg = home / "nginx.conf"
    text = configured((DEPLOY / "nginx.conf").read_text(), ports,
                      [(f"listen {EXAMPLE_BIND};", f"listen 127.0.0.1:{listen};"),
                       ("pid /run/nginx-mcpvisor.pid;", f"pid {home}/nginx.pid;")])
    # Not root: every temp path in this run's directory, and no switch of user.
    temps = "".join(f"    {kind}_temp_path {home}/{kind};\n"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    text = text.replace("http {", "http {\n" + temps, 1)
    text = text.replace("events {", "daemon off;\nevents {", 1)
    cfg.write_text(text)
    url = f"http://127.0.0.1:{listen}"
    async with balancer([need("nginx"), "-e", "stderr", "-p", str(home), "-c", str(cfg)], url,
                        home / "nginx.log"):
        yield url


# --- the client ----------------------------------------------------------------------------

def modern_call(rid: int, name: str, arguments: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A 2026-07-28 ``tools/call`` (no session: any replica may serve it) and its headers."""
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_INFO_META_KEY: {"name": "replicas", "version": "1"},
            CLIENT_CAPABILITIES_META_KEY: {}}
    frame = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
             "params": {"name": name, "arguments": arguments, "_meta": meta}}
    headers = {**HTTP_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return json.dumps(frame).encode(), headers


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON or SSE body."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message: dict[str, Any] = json.loads(line[5:])
                if "id" in message and ("result" in message or "error" in message):
                    return message
        raise AssertionError(f"no answer in the stream: {response.text[:300]}")
    return response.json()  # type: ignore[no-any-return]


@dataclass
class Session:
    """A handshake-era client's session, opened through a balancer."""

    http: httpx2.AsyncClient
    url: str
    headers: dict[str, str]
    next_id: int = 10

    @property
    def sid(self) -> str:
        return self.headers["mcp-session-id"]

    async def call(self, name: str, arguments: dict[str, Any]) -> httpx2.Response:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                 "params": {"name": name, "arguments": arguments}}
        return await self.http.post(self.url, json=frame, headers=self.headers)


async def open_session(http: httpx2.AsyncClient, url: str) -> Session:
    r = await http.post(url, json=INIT, headers=HTTP_HEADERS)
    assert r.status_code == 200, r.text
    headers = {**HTTP_HEADERS, "mcp-session-id": r.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-11-25"}
    r = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202, r.text
    return Session(http, url, headers)


@dataclass
class Load:
    """What a run of stateless calls saw."""

    done: int = 0
    failed: int = 0
    in_flight: int = 0
    failures: list[str] | None = None

    def note_failure(self, what: str) -> None:
        self.failed += 1
        if self.failures is None:
            self.failures = []
        if len(self.failures) < 5:
            self.failures.append(what)


class RawConnection:
    """One keep-alive HTTP/1.1 connection framed by h11 (the library hypercorn parses with):
    a fraction of a full client's CPU, which on a 2-core box is what the replicas need."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.stream: trio.SocketStream | None = None
        self.conn = h11.Connection(h11.CLIENT)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST ``body``; (status, body). Raises OSError or h11.ProtocolError when the
        connection fails (the next call opens a new one)."""
        try:
            if self.stream is None:
                self.stream = await trio.open_tcp_stream(self.host, self.port)
                self.conn = h11.Connection(h11.CLIENT)
            fields = [("host", f"{self.host}:{self.port}"), ("content-length", str(len(body))),
                      *headers.items()]
            out = self.conn.send(h11.Request(method="POST", target=path, headers=fields))
            out += (self.conn.send(h11.Data(data=body)) or b"") + (self.conn.send(h11.EndOfMessage()) or b"")
            await self.stream.send_all(out)
            status, chunks = 0, []
            while True:
                event = self.conn.next_event()
                if event is h11.NEED_DATA:
                    self.conn.receive_data(await self.stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    if self.conn.our_state is h11.MUST_CLOSE or self.conn.their_state is h11.MUST_CLOSE:
                        await self.aclose()
                    else:
                        self.conn.start_next_cycle()
                    return status, b"".join(chunks)
                elif isinstance(event, h11.ConnectionClosed):
                    raise OSError("the server closed the connection without an answer")
        except (OSError, h11.ProtocolError, trio.BrokenResourceError):
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None


def _answer_in(body: bytes) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON or SSE body."""
    if body.lstrip().startswith(b"{"):
        decoded: dict[str, Any] = json.loads(body)
        return decoded
    for line in body.decode().splitlines():
        if line.startswith("data:") and line[5:].strip():
            message: dict[str, Any] = json.loads(line[5:])
            if "id" in message and ("result" in message or "error" in message):
                return message
    raise ValueError(f"no answer in {body[:200]!r}")


async def stateless_load(url: str, calls: int, concurrency: int, load: Load,
                         *, arguments: dict[str, Any] | None = None, tool: str = "f_echo") -> None:
    """``calls`` 2026-07-28 calls of ``tool`` to ``url``, ``concurrency`` in flight (each
    on its own connection), counted in ``load``. A call fails when its connection fails,
    it gets no HTTP 200, or its answer is an error."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    ids = iter(range(1, calls + 1))

    async def worker() -> None:
        connection = RawConnection(host, port)
        try:
            for rid in ids:
                args = arguments if arguments is not None else {"text": f"c{rid}"}
                body, headers = modern_call(rid, tool, args)
                load.in_flight += 1
                try:
                    status, answer = await connection.post(path, body, headers)
                except (OSError, h11.ProtocolError, trio.BrokenResourceError) as exc:
                    load.note_failure(f"{type(exc).__name__}: {exc}")
                    continue
                finally:
                    load.in_flight -= 1
                if status != 200:
                    load.note_failure(f"HTTP {status}: {answer[:200]!r}")
                    continue
                message = _answer_in(answer)
                if "error" in message or message["result"].get("isError"):
                    load.note_failure(json.dumps(message)[:300])
                    continue
                load.done += 1
        finally:
            await connection.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
