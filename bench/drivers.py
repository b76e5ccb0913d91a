"""What the bench connects to, and how: subjects (direct, mcpvisor, peers) and client sessions.

Owns:

* `ServerDef`: one benchmark upstream to run (name, generated tools);
* `Subject`: something a client can talk to over a set of upstreams — the upstream itself
  (``direct``), mcpvisor with its fast path on or off, or a peer proxy (see `mcpvisor.bench.peers`).
  A subject knows how to launch itself for stdio and/or streamable HTTP;
* `open_session`: launches a subject, connects the official SDK client to it
  (``mcp.Client(..., mode="legacy", cache=None)``: the same client for every subject, so
  ratios isolate what sits between the client and the upstream), finds the server's
  process for memory readings, and on the way out closes the client, stops the process
  group and reaps it, cancelled or not.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psutil
import trio

from mcpvisor.bench import procs

BENCH_DIR: Final = Path(__file__).resolve().parent
REPO_DIR: Final = BENCH_DIR.parent
UPSTREAM: Final = BENCH_DIR / "upstream.py"
RELAY: Final = BENCH_DIR / "relay.py"
HTTP_UPSTREAM: Final = BENCH_DIR / "http_upstream.py"
PYTHON: Final = sys.executable

CONNECT_TIMEOUT_S: Final = 180.0
"""Launch + handshake + first list: generous, the box may be loaded and peers import a lot."""
NAME_SEPARATORS: Final = "_.-:/"
HTTP_RETRY_S: Final = 0.2


@dataclass(frozen=True)
class ServerDef:
    """One benchmark upstream: ``bench/upstream.py --name NAME [--tools N] [--bare]``."""

    name: str
    tools: int = 0
    bare: bool = False
    start_delay: float = 0.0
    """Seconds the upstream reads nothing after it is spawned (a slow server's start)."""
    lean: bool = False
    """Start it with ``python -S`` (no site-packages: the standard library's json instead of
    msgspec), which halves its own start; where that start is what a row waits for (recovery),
    the row then shows the proxies' part rather than the upstream's boot and its spread."""

    def argv(self) -> list[str]:
        args = ["-S"] if self.lean else []
        args += [str(UPSTREAM), "--name", self.name]
        if self.tools:
            args += ["--tools", str(self.tools)]
        if self.bare:
            args.append("--bare")
        if self.start_delay:
            args += ["--start-delay", f"{self.start_delay:g}"]
        return args

    def entry(self) -> dict[str, Any]:
        """Its ``mcpServers`` entry (Claude Code's shape, which every peer reads too)."""
        return {"command": PYTHON, "args": self.argv(), "env": {procs.TOKEN_VAR: procs.RUN_TOKEN}}


def mcp_servers(servers: Sequence[ServerDef]) -> dict[str, Any]:
    return {s.name: s.entry() for s in servers}


@dataclass(frozen=True)
class Launch:
    """How to start a subject: argv, environment, working directory, and the URL for HTTP."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    url: str | None = None
    sse: bool = False  # the URL speaks the legacy HTTP+SSE transport, not streamable HTTP


@dataclass
class Subject:
    """Something a client connects to. ``launch(servers, workdir, transport, port, tag)`` -> `Launch`.

    Attributes:
        name: the row label (``direct``, ``mcpvisor``, ``mcpvisor-nofast``, ``fastmcp``...).
        kind: ``direct``, ``proxy`` (mcpvisor), ``peer``, or ``floor`` (`TRIO_RELAY`: what
            any trio proxy costs; not a proxy a user would run, so no target counts it).
        transports: which of ``stdio`` and ``http`` it can serve.
        multi: whether it can front several upstreams at once.
        note: shown next to the row (what the subject is, how it was configured).
    """

    name: str
    kind: str
    launch: Callable[[Sequence[ServerDef], Path, str, int, str], Launch]
    transports: frozenset[str] = frozenset({"stdio"})
    multi: bool = True
    note: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)


# --- direct -------------------------------------------------------------------------------------
def _launch_direct(servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
                   tag: str) -> Launch:
    if len(servers) != 1:
        raise ValueError("direct connects to exactly one upstream")
    env = procs.base_env(tag=tag)
    if transport == "http":
        argv = [PYTHON, str(HTTP_UPSTREAM), "--port", str(port), *servers[0].argv()[1:]]
        return Launch(argv, env, url=f"http://127.0.0.1:{port}/mcp")
    return Launch([PYTHON, *servers[0].argv()], env)


DIRECT: Final = Subject("direct", "direct", _launch_direct, frozenset({"stdio", "http"}), multi=False,
                        note="client -> upstream "
                        "(over HTTP: the same tools behind the SDK's own HTTP server)")


# --- the floor ----------------------------------------------------------------------------------
def _launch_relay(servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
                  tag: str) -> Launch:
    if len(servers) != 1 or transport != "stdio":
        raise ValueError("the trio relay copies stdio to exactly one upstream")
    return Launch([PYTHON, str(RELAY), PYTHON, *servers[0].argv()], procs.base_env(tag=tag))


TRIO_RELAY: Final = Subject("trio-relay", "floor", _launch_relay, frozenset({"stdio"}), multi=False,
                            note="client -> bench/relay.py -> upstream: trio copying bytes both ways "
                            "and nothing else, the least any trio proxy does a call")


# --- mcpvisor -----------------------------------------------------------------------------------
METRICS_SUBJECT: Final = "mcpvisor-metrics"
"""mcpvisor recording metrics (``serve --metrics-port 0``), measured against ``mcpvisor``."""

def mcpvisor_config(servers: Sequence[ServerDef], settings: Mapping[str, Any]) -> dict[str, Any]:
    return {"mcpServers": mcp_servers(servers),
            "settings": {"exposure": "all", "startupWait": "60s", **settings}}


def mcpvisor_subject(name: str, fast_path: bool = True, *, metrics: bool = False, **settings: Any) -> Subject:
    """``mcpvisor serve``; ``metrics``: with ``--metrics-port 0`` on stdio (the HTTP front
    always records metrics: `/metrics` is one of its routes)."""
    merged = {"fastPath": fast_path, **settings}

    def launch(servers: Sequence[ServerDef], workdir: Path, transport: str, port: int, tag: str) -> Launch:
        cfg = workdir / f"mcpvisor-{tag}.json"
        cfg.write_text(json.dumps(mcpvisor_config(servers, merged), indent=1))
        state = workdir / f"state-{tag}"
        state.mkdir(exist_ok=True)
        env = procs.base_env({"MCPVISOR_STATE_DIR": str(state)}, tag=tag)
        argv = [PYTHON, "-m", "mcpvisor", "serve", "--config", str(cfg)]
        if transport == "http":
            argv += ["--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
            return Launch(argv, env, cwd=str(workdir), url=f"http://127.0.0.1:{port}/mcp")
        if metrics:
            argv += ["--metrics-port", "0"]
        return Launch(argv, env, cwd=str(workdir))

    note = f"client -> mcpvisor serve (fastPath {'on' if fast_path else 'off'}) -> upstream"
    if metrics:
        note += "; metrics recorded (--metrics-port 0)"
    transports = frozenset({"stdio"}) if metrics else frozenset({"stdio", "http"})
    return Subject(name, "proxy", launch, transports, note=note, settings=merged)


# --- sessions -----------------------------------------------------------------------------------
def resolve_tool(names: Sequence[str], base: str, server: str | None = None) -> str | None:
    """The exposed name of upstream tool ``base`` (of ``server`` when given), whatever the prefix style."""
    candidates = [n for n in names if n == base or (len(n) > len(base) and n.endswith(base)
                                                     and n[-len(base) - 1] in NAME_SEPARATORS)]
    if server is not None:
        candidates = [n for n in candidates if server in n[: -len(base)]] or (
            [base] if base in candidates else [])
    if not candidates:
        return None
    return min(candidates, key=len)


@dataclass
class Session:
    """A connected client and what the bench knows about the server side."""

    subject: Subject
    transport: str
    client: Any
    root: psutil.Process | None
    tool_names: list[str]
    connect_s: float
    log: Path
    url: str | None = None
    """Over HTTP: the endpoint the client connected to (`mcpvisor.bench.http_clients` connects there too)."""
    sse: bool = False
    """That endpoint speaks the legacy HTTP+SSE transport."""
    pool: Any = None
    """The `mcpvisor.bench.http_clients.ClientPool` on ``url``, once a scenario started it."""

    def tool(self, base: str, server: str | None = None) -> str:
        name = resolve_tool(self.tool_names, base, server)
        if name is None:
            raise LookupError(f"{self.subject.name} exposes no tool for {base!r}; "
                              f"it lists {self.tool_names[:8]}")
        return name

    def proxy_procs(self) -> list[psutil.Process]:
        """The server side's own processes: the proxy without its upstreams (direct: the upstream)."""
        if self.root is None:
            return []
        if self.subject.kind == "direct":
            return procs.tree(self.root)
        return procs.proxy_processes(self.root)

    def rss(self) -> int:
        return procs.rss_bytes(self.proxy_procs())

    def hwm(self) -> int:
        return procs.hwm_bytes(self.proxy_procs())

    async def wait_tool(self, base: str, limit_s: float = CONNECT_TIMEOUT_S) -> str:
        """The exposed name of ``base``, polling ``tools/list`` until it appears (some peers list
        nothing until their upstreams are up, then announce them with list_changed)."""
        with trio.fail_after(limit_s):
            while (name := resolve_tool(self.tool_names, base)) is None:
                await trio.sleep(HTTP_RETRY_S)
                await self.refresh_tools()
        return name

    async def refresh_tools(self) -> list[Any]:
        result = await self.client.list_tools()
        self.tool_names = [t.name for t in result.tools]
        return list(result.tools)


def client_kwargs(message_handler: Any = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"mode": "legacy", "cache": None}
    if message_handler is not None:
        kw["message_handler"] = message_handler
    return kw


@asynccontextmanager
async def open_session(subject: Subject, servers: Sequence[ServerDef], workdir: Path, *,
                       transport: str = "stdio", message_handler: Any = None,
                       list_first: bool = True) -> AsyncIterator[Session]:
    """Launch ``subject`` over ``servers`` and connect the SDK client to it.

    Leaving the block closes the client, which stops the server (stdio: the SDK closes
    stdin, then SIGTERM/SIGKILL to the group; HTTP: we stop the group the same way); any
    descendant still alive after that is killed. Bounded by `CONNECT_TIMEOUT_S` to connect.

    Raises:
        RuntimeError: the subject cannot serve this transport or failed to start (the
            message carries the tail of its log).
    """
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if transport not in subject.transports:
        raise RuntimeError(f"{subject.name} does not serve {transport}")
    tag = procs.new_tag()
    port = procs.free_port() if transport == "http" else 0
    launch = subject.launch(servers, workdir, transport, port, tag)
    log = workdir / f"{subject.name}-{transport}-{tag}.log"
    started = time.perf_counter()
    seen: list[psutil.Process] = []
    connect = trio.CancelScope(deadline=trio.current_time() + CONNECT_TIMEOUT_S)
    yielded = False
    try:
        with connect:
            async with AsyncExitStack() as stack:
                if transport == "stdio":
                    params = StdioServerParameters(command=launch.argv[0], args=launch.argv[1:],
                                                   env=launch.env, cwd=launch.cwd)
                    # A local log file: opening it is instant, and the SDK needs a real fd for stderr.
                    errlog = stack.enter_context(open(log, "a", encoding="utf-8"))  # noqa: ASYNC230
                    client = await stack.enter_async_context(
                        Client(stdio_client(params, errlog=errlog), **client_kwargs(message_handler)))
                    root = await procs.wait_tagged_child(tag)
                else:
                    proc = await procs.open_server_process(launch.argv, launch.env, log, cwd=launch.cwd)
                    stack.push_async_callback(procs.stop_process, proc)
                    root = psutil.Process(proc.pid)
                    await procs.wait_port(port, proc)
                    client = await _connect_http(stack, launch, message_handler, started)
                session = Session(subject, transport, client, root, [], 0.0, log, launch.url, launch.sse)
                if list_first:
                    await session.refresh_tools()
                session.connect_s = time.perf_counter() - started
                seen.extend(procs.tree(root) if root else [])
                connect.deadline = math.inf
                yielded = True
                yield session
        if connect.cancelled_caught and not yielded:
            raise TimeoutError(f"no handshake and first tools/list within {CONNECT_TIMEOUT_S:.0f} s")
    except Exception as exc:
        raise RuntimeError(f"{subject.name} over {transport}: {exc!r}{log_tail(log)}") from exc
    finally:
        procs.kill_all(seen)


async def _connect_http(stack: AsyncExitStack, launch: Launch, message_handler: Any, started: float) -> Any:
    """Connect over HTTP, retrying while the server answers errors: some open their port before
    their MCP endpoint is ready (mcp-hub answers 500 until its servers are started)."""
    from mcp import Client

    assert launch.url is not None
    while True:
        target: Any = launch.url
        if launch.sse:
            from mcp.client.sse import sse_client

            target = sse_client(launch.url)
        try:
            return await stack.enter_async_context(Client(target, **client_kwargs(message_handler)))
        except Exception:
            if time.perf_counter() - started > CONNECT_TIMEOUT_S / 2:
                raise
            await trio.sleep(HTTP_RETRY_S)


def log_tail(log: Path, lines: int = 6) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("\n  log: " + "\n  log: ".join(text)) if text else ""
