"""Shared builders for tests: fixture server entries, config files, proxy launch parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.message import SessionMessage
from pydantic import FileUrl

TESTS_DIR: Final = Path(__file__).parent
SERVERS_DIR: Final = TESTS_DIR / "servers"
PY: Final = sys.executable

REAL_IO_BOUND_S: Final = 120.0
"""Bound for a test doing real subprocess I/O. Generous: the CI machine has 2 cores and
`import mcp` in a cold child can take seconds when the box is busy."""


def http_client(**kwargs: Any) -> httpx2.AsyncClient:
    """An HTTP client whose requests are bounded by `REAL_IO_BOUND_S`, not httpx's 5 s: a
    front's first request that needs the SDK (a token front, the dashboard's API) waits for
    its import, which takes seconds on a busy 2-core machine; the test's own ``fail_after``
    bounds the whole exchange."""
    return httpx2.AsyncClient(timeout=REAL_IO_BOUND_S, **kwargs)


def everything(*flags: str, **extra: Any) -> dict[str, Any]:
    """A config entry for the full-featured SDK fixture server."""
    return {"command": PY, "args": [str(SERVERS_DIR / "everything.py"), *flags], **extra}


def flaky(*flags: str, **extra: Any) -> dict[str, Any]:
    """A config entry for the stdlib fault-injecting fixture server (handshake era only)."""
    return {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), *flags], "protocol": "legacy", **extra}


def time_server(**extra: Any) -> dict[str, Any]:
    """The third-party `mcp-server-time` from PyPI, as a user would configure it."""
    script = Path(PY).parent / "mcp-server-time"
    return {"command": str(script), "args": ["--local-timezone", "UTC"], **extra}


def write_config(directory: Path, servers: Mapping[str, Any], *, name: str = "mcpvisor.json",
                 toolsets: Mapping[str, Any] | None = None, **settings: Any) -> Path:
    settings.setdefault("exposure", "all")
    settings.setdefault("startupWait", "60s")
    settings.setdefault("startupTimeout", "120s")
    doc: dict[str, Any] = {"mcpServers": dict(servers), "settings": settings}
    if toolsets:
        doc["toolsets"] = dict(toolsets)
    path = directory / name
    path.write_text(json.dumps(doc, indent=2))
    return path


def proxy_params(config: Path, *extra: str, env: Mapping[str, str] | None = None) -> StdioServerParameters:
    """Launch ``mcpvisor serve`` over stdio, as Claude Code would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return StdioServerParameters(command=PY, env=full_env,
                                 args=["-m", "mcpvisor", "serve", "--config", str(config), *extra])


def read_record(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Recorder:
    """Client callbacks that answer like a user would and remember what they saw."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.logged = trio.Event()
        """Set (and replaced) on each log message: wait on it, then look at ``logs`` again."""
        self.changed = trio.Event()
        self.list_changed = 0

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", model="test-model",
                                         content=types.TextContent(type="text", text="from the client"))

    async def roots(self, ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///workspace"))])

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "ada"})

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.logged.set()
        self.logged = trio.Event()

    async def handler(self, message: Any) -> None:
        self.messages.append(message)
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed += 1
            self.changed.set()
            self.changed = trio.Event()

    def kwargs(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "list_roots_callback": self.roots,
                "elicitation_callback": self.elicitation, "logging_callback": self.logging,
                "message_handler": self.handler}


SETTLED: Final = frozenset({"ready", "circuit_open", "disabled", "stopped", "not loaded", "idle",
                            "misconfigured"})
"""Server states that are not on their way somewhere (what `Supervisor.wait_ready` waits for)."""


async def wait_settled(client: Client) -> None:
    """Wait until every server of the proxy behind ``client`` has settled (ready, circuit
    open, disabled), asking ``get-server-status``: the proxy answers the first
    ``tools/list`` at once with whatever is up, and a test about what happens after
    start-up waits for start-up first. Bound it with the test's own ``fail_after``."""
    while True:
        result = await client.call_tool("get-server-status", {})
        servers = (result.structured_content or {}).get("servers", [])
        if all(s.get("state") in SETTLED for s in servers):
            return
        await trio.sleep(0.05)  # a subprocess proxy has no event to wait on; the loop is bounded


@asynccontextmanager
async def proxy_client(config: Path, *extra: str, mode: str = "legacy", recorder: Recorder | None = None,
                       env: Mapping[str, str] | None = None, settle: bool = True) -> AsyncIterator[Client]:
    """A real SDK client connected over stdio to a ``mcpvisor serve`` subprocess; with
    ``settle``, yielded once every server has settled (`wait_settled`)."""
    kwargs = recorder.kwargs() if recorder is not None else {}
    async with Client(proxy_params(config, *extra, env=env), mode=mode, cache=None,
                      **kwargs) as client:
        if settle:
            await wait_settled(client)
        yield client


@asynccontextmanager
async def pipe_transport(receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> AsyncIterator[Any]:
    """A client transport speaking newline-delimited JSON-RPC over two byte streams: what
    the SDK's stdio client does with a subprocess's pipes, on pipes we hand it."""
    to_client, read = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    write, from_client = anyio.create_memory_object_stream[SessionMessage](64)

    async def reader() -> None:
        buf = b""
        async with to_client:
            while chunk := await receive.receive_some(1 << 16):
                *lines, buf = (buf + chunk).split(b"\n")
                for line in filter(bytes.strip, lines):
                    await to_client.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(line)))

    async def writer() -> None:
        async with from_client:
            async for message in from_client:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await send.send_all(data.encode() + b"\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        yield read, write
        nursery.cancel_scope.cancel()
    await send.aclose()
    await receive.aclose()


@asynccontextmanager
async def embedded_connection(sup: Any, *, fast_path: bool | None = None
                              ) -> AsyncIterator[tuple[trio.abc.SendStream, trio.abc.ReceiveStream, Any]]:
    """One client connection to the running supervisor ``sup`` through the stdio front
    (`mcpvisor.actors.fronts.stdio`, fast path and all) that `mcpvisor serve` puts on its
    stdin/stdout, on OS pipes; yields the client's ends (send, receive) and the
    `StdioFront`. Several may be open on one supervisor at once. Closing the client's
    send end is the client leaving (EOF): the front ends its session. ``fast_path``
    (default: ``settings.fastPath``) turns the front's fast path on or off."""
    from mcpvisor.actors.fronts.stdio import StdioFront

    up_r, up_w = os.pipe()      # client -> proxy
    down_r, down_w = os.pipe()  # proxy -> client
    front_in, client_out, client_in, front_out = (trio.lowlevel.FdStream(fd)
                                                  for fd in (up_r, up_w, down_r, down_w))
    async with front_in, front_out, client_in, client_out, trio.open_nursery() as nursery:
        front = StdioFront(sup.front, front_in, front_out,
                           max_message=sup.settings.max_message_bytes,
                           fast_path=sup.settings.fast_path if fast_path is None else fast_path)
        nursery.start_soon(front.serve)
        yield client_out, client_in, front
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def embedded_front(config: Path, *, state_dir: Path | None = None
                         ) -> AsyncIterator[tuple[trio.abc.SendStream, trio.abc.ReceiveStream]]:
    """A proxy running in this process behind the same stdio front (`mcpvisor.actors.fronts.stdio`,
    fast path and all) that `mcpvisor serve` puts on its stdin/stdout, on OS pipes, with
    the same real upstream subprocesses; yields the client's ends (send, receive). It
    saves the second ``import mcp`` (seconds on a 2-core machine).

    The client connects once every server has settled (ready, circuit open, ...): the
    proxy answers a first ``tools/list`` at once with what is up, and these tests are
    about what happens after start-up (tests/integration/test_startup_real.py is about
    start-up itself)."""
    from mcpvisor import open_supervisor

    async with open_supervisor(config, state_dir=state_dir or config.parent / "state", watch=False) as sup:
        await sup.wait_ready()
        async with embedded_connection(sup) as (send, receive, _):
            yield send, receive


@asynccontextmanager
async def embedded_client(config: Path, *, mode: str = "legacy", recorder: Recorder | None = None,
                          state_dir: Path | None = None) -> AsyncIterator[Client]:
    """A real SDK client over OS pipes to a proxy running in this process (`embedded_front`)."""
    kwargs = recorder.kwargs() if recorder is not None else {}
    async with embedded_front(config, state_dir=state_dir) as (send, receive), \
            Client(pipe_transport(receive, send), mode=mode, cache=None, **kwargs) as client:
        yield client


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@asynccontextmanager
async def http_fixture(script: str, *flags: str) -> AsyncIterator[tuple[trio.Process, str]]:
    """Start ``tests/servers/SCRIPT`` with ``flags``; yield the process and the URL it
    announces on its first stdout line (``... ready URL``); kill it after."""
    proc = await trio.lowlevel.open_process([PY, str(SERVERS_DIR / script), *flags],
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        buf = b""
        with trio.fail_after(60):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"{script} exited before listening"
                buf += chunk
        yield proc, buf.split()[2].decode()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
