"""The client-facing half of the proxy on memory streams: the production `Front`,
`StdioFront` and fast path, one production `StdioLink` whose "process" is a script the
test drives, and no OS pipe, process or socket anywhere, so everything runs under
trio's MockClock.

    async with open_memory_proxy() as p:
        await p.client.handshake()
        await p.client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "s_echo", "arguments": {}}})
        request = await p.server.receive()          # what the upstream got, as JSON
        await p.server.send({"jsonrpc": "2.0", "id": request["id"], "result": {...}})
        reply = await p.client.receive_id(1)

Pieces:

* `ScriptedServer`: the upstream's side of the link's pipes (reads what the proxy
  writes to the child's stdin, writes the child's stdout); `crash` ends the "process".
* `RawClient`: newline-delimited JSON-RPC to the front, byte by byte.
* `MemoryBackend`: what `Front` reads of the supervisor (a fixed snapshot, the
  upstreams, a record of ``note_call``; with ``open_memory_proxy(instances=N)`` the
  server is session-scoped and each client session is handed its own instance, as
  `mcpvisor.sessions.ScopedServers` does).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Final

import trio
import trio.testing

from mcpvisor.actors.core.catalog import CacheHint, Snapshot, ToolRoute, UpstreamLists
from mcpvisor.actors.core.lifecycle import WAITABLE, State
from mcpvisor.actors.errors import UpstreamUnavailable
from mcpvisor.actors.fronts.front import Front
from mcpvisor.actors.fronts.stdio import StdioFront
from mcpvisor.actors.link import StdioLink
from mcpvisor.actors.process import StderrLog
from mcpvisor.actors.wire import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

MAX_MESSAGE: Final = 64 * 1024
"""The front's line limit in these tests: small, so an oversized line is cheap to build."""

CALL_TIMEOUT_S: Final = 10.0
"""The upstream's inactivity timeout (`ServerSpec.timeout`) in these tests."""

MAX_CALL_TIME_S: Final = 100.0
"""The upstream's hard cap (`ServerSpec.max_call_time`) in these tests."""

READ_CHUNK: Final = 65536


class LineStream:
    """Reads newline-delimited JSON objects from a byte stream."""

    def __init__(self, receive: trio.abc.ReceiveStream) -> None:
        self._receive = receive
        self._buf = b""

    async def line(self) -> bytes | None:
        """The next line without its newline; None at EOF."""
        while b"\n" not in self._buf:
            chunk = await self._receive.receive_some(READ_CHUNK)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    async def message(self) -> dict[str, Any]:
        line = await self.line()
        assert line is not None, "the stream ended"
        msg: dict[str, Any] = json.loads(line)
        return msg


class ScriptedServer:
    """The upstream process as the test plays it: what the proxy wrote, what we answer."""

    def __init__(self, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream, proc: FakeProc) -> None:
        self._in = LineStream(stdin)
        self._out = stdout
        self.proc = proc

    async def receive(self) -> dict[str, Any]:
        """The next message the proxy sent to the upstream."""
        return await self._in.message()

    async def receive_method(self, method: str) -> dict[str, Any]:
        """The next message with ``method``, skipping others."""
        while True:
            msg = await self.receive()
            if msg.get("method") == method:
                return msg

    async def send(self, message: dict[str, Any]) -> None:
        await self._out.send_all(json.dumps(message).encode() + b"\n")

    async def answer(self, request: Mapping[str, Any], result: Mapping[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": dict(result)})

    async def crash(self, status: int = 3) -> None:
        """The process exits: its stdout closes and its exit status is known."""
        self.proc.exit(status)
        await self._out.aclose()


class FakeProc:
    """What `StdioLink` reads of a `trio.Process`: pipes, pid, exit status."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.pid = 4242
        self.returncode: int | None = None
        self._exited = trio.Event()

    def exit(self, status: int) -> None:
        self.returncode = status
        self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode


@dataclass
class MemoryUpstream:
    """What the front and the fast path read of an `Upstream` actor."""

    name: str
    link: StdioLink
    spec: Any = field(default_factory=lambda: SimpleNamespace(timeout=CALL_TIMEOUT_S,
                                                              max_call_time=MAX_CALL_TIME_S))
    state: Any = State.READY
    relinked: trio.Event = field(default_factory=trio.Event)
    calls: int = 0
    answered: int = 0
    policy: Any = field(default_factory=lambda: SimpleNamespace(healthy=True))
    """The actor's restart policy as the fast path reads it (healthy: nothing to record)."""
    changed: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) when `set_state` changes the state."""
    lists: UpstreamLists = field(default_factory=UpstreamLists)
    """What it listed, as the front reads it for a list's freshness hints (nothing here:
    the fake's tools reach the snapshot through `MemoryBackend`)."""
    hints: dict[str, CacheHint] = field(default_factory=dict)
    starting_link: StdioLink | None = None
    """A start's link once its handshake is done, before its lists (the actor's): calls go."""

    def set_state(self, state: State) -> None:
        """The actor's state moves (a start, a failure): whoever waits in `wait_link` looks again."""
        self.state = state
        self._wake_waiters()

    def handshake_done(self) -> None:
        """A start's handshake is done, its lists still coming: its link takes calls now
        (the actor's `starting_link`), and whoever waits in `wait_link` looks again."""
        self.starting_link = self.link
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_link(self, *, early: bool = False) -> StdioLink:
        """The live link once the server is ready (with ``early``, once a start's handshake is
        done); `UpstreamUnavailable` once it cannot be (the actor's wait, without its
        restartWait bound)."""
        while self.state is not State.READY:
            if early and self.starting_link is not None:
                return self.starting_link
            if self.state not in WAITABLE:
                raise UpstreamUnavailable(self.name, self.state.value, "it failed to start", None)
            await self.changed.wait()
        return self.link

    def note_call(self) -> None:
        """The actor's availability count: a client call is on its way."""
        self.calls += 1

    async def request(self, method: str, params: Mapping[str, Any] | None, *, origin: Any = None,
                      retry_safe: bool = False) -> dict[str, Any]:
        """Forward on the live link; while it is dead, wait for the next one (as the actor
        waits through a restart)."""
        while self.link.close_reason is not None:
            await self.relinked.wait()
        return await self.link.request(method, params, origin=origin, timeout=self.spec.timeout,
                                       max_time=self.spec.max_call_time)


class MemoryBackend:
    """The supervisor as `Front` sees it: one upstream, a fixed snapshot."""

    def __init__(self, upstream: MemoryUpstream, tools: Sequence[str],
                 retry_safe: Sequence[str] = ()) -> None:
        routes: dict[str, ToolRoute] = {}
        for t in tools:
            exposed = f"{upstream.name}_{t}"
            routes[exposed] = ToolRoute(exposed, upstream.name, t, t in retry_safe,
                                        {"name": exposed, "inputSchema": {"type": "object"}})
        self.router = SimpleNamespace(snapshot=Snapshot(tools=routes,
                                                        tools_list=tuple(r.wire for r in routes.values())))
        self.upstreams: dict[str, MemoryUpstream] = {upstream.name: upstream}
        self.started = True
        self.hears_calls = True
        self.notes: list[tuple[str, str, BaseException | None]] = []
        self.spare: list[MemoryUpstream] = []
        """Instances not yet handed to a session (the server is session-scoped when any are given)."""
        self.held: dict[Any, MemoryUpstream] = {}
        """Each client session's instance, by its `ClientSession`."""
        self.ended: list[Any] = []
        """Sessions that ended, in order (their instances would be stopped)."""

    async def wait_startup(self) -> None:
        return None

    async def call_local_tool(self, name: str, arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise AssertionError("no local tools here")


    def note_call(self, server: str, tool: str, started: float, error: BaseException | None,
                  **detail: Any) -> None:
        self.notes.append((server, tool, error))

    def upstream_for(self, server: str, session: Any) -> Any:
        """The server's upstream; a session-scoped one's instance for ``session`` (the next
        spare on its first call; None once the session ended or when none is left)."""
        up = self.upstreams.get(server)
        if up is None or session is None or getattr(up.spec, "scope", "shared") != "session":
            return up
        held = self.held.get(session)
        if held is None:
            if session.ended or not self.spare:
                return None
            held = self.held[session] = self.spare.pop(0)

            async def ended() -> None:
                self.ended.append(session)

            session.on_end(ended)
        return held


class LinkEvents:
    """A link's reports, dropped (the front's own broadcaster is tested on its own)."""

    log_level = None

    def list_changed(self, kind: str) -> None:
        return None

    def resource_updated(self, uri: str) -> None:
        return None

    def log_message(self, params: dict[str, Any]) -> None:
        return None

    def fallback_origin(self, method: str) -> Any:
        return None


class RawClient:
    """A client speaking newline-delimited JSON-RPC to the front over a memory stream."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        self._send = send
        self._in = LineStream(receive)

    async def send(self, data: bytes | Mapping[str, Any]) -> None:
        line = data if isinstance(data, bytes) else json.dumps(data).encode()
        await self._send.send_all(line + b"\n")

    async def receive(self) -> dict[str, Any]:
        """The next message the front wrote, whatever it is."""
        return await self._in.message()

    async def receive_id(self, request_id: Any) -> dict[str, Any]:
        """The next response to ``request_id``, skipping notifications."""
        while True:
            msg = await self.receive()
            if "method" not in msg and msg.get("id") == request_id:
                return msg

    async def eof(self) -> bool:
        """True when the front closed its side (nothing more will come)."""
        return await self._in.line() is None

    async def close(self) -> None:
        await self._send.aclose()

    async def handshake(self, request_id: int = 0, capabilities: Mapping[str, Any] | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": "initialize",
                         "params": {"protocolVersion": "2025-11-25", "capabilities": dict(capabilities or {}),
                                    "clientInfo": {"name": "raw", "version": "1"}}})
        reply = await self.receive_id(request_id)
        assert reply["result"]["serverInfo"]["name"] == "mcpvisor", reply
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


@dataclass
class MemoryProxy:
    front: Front
    backend: MemoryBackend
    link: StdioLink
    server: ScriptedServer
    client: RawClient
    stdio: StdioFront
    nursery: trio.Nursery
    served: trio.Event
    upstream: MemoryUpstream
    links: list[StdioLink]
    instances: list[tuple[MemoryUpstream, ScriptedServer]]
    """A session-scoped server's instances (``open_memory_proxy(instances=N)``), in the
    order client sessions take them, each with the "process" behind it."""

    async def connect(self) -> RawClient:
        """Another client connection to the same front (as a second Claude window would)."""
        client, stdio = connect_client(self.front, fast_path=self.stdio.fast_path is not None)
        self.nursery.start_soon(stdio.serve)
        return client

    def restart(self) -> ScriptedServer:
        """The upstream's next process: a new link replaces the dead one."""
        link, server = new_link(self.link.protocol_version)
        start_link(link, self.nursery)
        self.links.append(link)
        self.link = self.upstream.link = link
        self.server = server
        self.upstream.relinked.set()
        self.upstream.relinked = trio.Event()
        return server


def connect_client(front: Front, *, fast_path: bool) -> tuple[RawClient, StdioFront]:
    """A client and the stdio front serving it, on two one-way memory streams."""
    up_send, up_recv = trio.testing.memory_stream_one_way_pair()
    down_send, down_recv = trio.testing.memory_stream_one_way_pair()
    stdio = StdioFront(front, up_recv, down_send, max_message=MAX_MESSAGE, fast_path=fast_path)
    return RawClient(up_send, down_recv), stdio


def new_link(protocol_version: str) -> tuple[StdioLink, ScriptedServer]:
    """A production `StdioLink` to a scripted "process" whose handshake is taken as done."""
    to_child_send, to_child_recv = trio.testing.memory_stream_one_way_pair()
    from_child_send, from_child_recv = trio.testing.memory_stream_one_way_pair()
    proc = FakeProc(to_child_send, from_child_recv)
    link = StdioLink("s", LinkEvents(), proc, max_message=MAX_MESSAGE, stderr=StderrLog("s"))  # type: ignore[arg-type]
    link.protocol_version = protocol_version
    if link.modern:
        # What `Link._adopt` keeps after a 2026-07-28 discover: the envelope every request carries.
        link._envelope = {PROTOCOL_VERSION_META_KEY: protocol_version,
                          CLIENT_INFO_META_KEY: {"name": "mcpvisor", "version": "0"},
                          CLIENT_CAPABILITIES_META_KEY: {}}
    return link, ScriptedServer(to_child_recv, from_child_send, proc)


def start_link(link: StdioLink, nursery: trio.Nursery) -> None:
    """The link's reader and deadline wheel, as `open_stdio_link` runs them."""
    link.nursery = nursery
    nursery.start_soon(link.pump_stdout)
    nursery.start_soon(link.run_deadlines)


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A client's JSON-RPC request as `RawClient.send` takes it."""
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        out["params"] = params
    return out


@asynccontextmanager
async def open_memory_proxy(*, tools: Sequence[str] = ("echo", "work"), retry_safe: Sequence[str] = (),
                            fast_path: bool = True, upstream_version: str = "2025-11-25",
                            instances: int = 0) -> AsyncIterator[MemoryProxy]:
    """The front, one stdio front connection and one upstream "s", all on memory streams.

    The upstream's handshake is taken as done (``upstream_version`` is what it negotiated);
    its tools are exposed as ``s_<tool>``. With ``instances``, "s" is session-scoped
    (``"scope": "session"``) and has that many more "processes", one per client session.
    """
    link, server = new_link(upstream_version)
    upstream = MemoryUpstream("s", link)
    backend = MemoryBackend(upstream, tools, retry_safe)
    scoped: list[tuple[MemoryUpstream, ScriptedServer]] = []
    if instances:
        upstream.spec.scope = "session"
        for _ in range(instances):
            inst_link, inst_server = new_link(upstream_version)
            instance = MemoryUpstream("s", inst_link, spec=upstream.spec)
            scoped.append((instance, inst_server))
        backend.spare = [instance for instance, _ in scoped]
    front = Front(backend)  # type: ignore[arg-type]
    client, stdio = connect_client(front, fast_path=fast_path)
    served = trio.Event()

    async def serve() -> None:
        await stdio.serve()
        served.set()

    links = [link, *(instance.link for instance, _ in scoped)]
    async with trio.open_nursery() as nursery:
        for each in links:
            start_link(each, nursery)
        await nursery.start(front.run)
        nursery.start_soon(serve)
        yield MemoryProxy(front, backend, link, server, client, stdio, nursery, served, upstream, links,
                          scoped)
        nursery.cancel_scope.cancel()
