"""What ``mcpvisor serve`` loads: only what serving needs (over stdio; over HTTP, at the end).

A client launches ``mcpvisor serve`` and waits for its ``initialize`` answer; every module
it imports on the way is start-up time and resident memory the user pays on every launch.
A real ``mcpvisor serve`` subprocess serves a real stdio upstream (tests/servers/flaky.py):
the handshake, a ``ping``, the lists and a ``tools/call`` over its stdin/stdout, then EOF; at
exit it writes the names of the modules it had loaded. None of the modules below may be
among them: each belongs to another command (the dashboard, the bench, the other CLI
commands) or to a feature this config does not use (argument checking with jsonschema,
OAuth tokens with PyJWT, process stats with psutil, tables with rich, the HTTP server
hypercorn), and the MCP SDK itself: a handshake-era client doing only these is served by
the proxy's own code (the SDK costs 0.35-0.6 s and ~60 MB). The first message that needs
the SDK loads it and is answered. A regression shows as the module that crept in, named.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from mcpvisor.actors.framing import LineReader
from tests.helpers import SERVERS_DIR, http_client

PY = sys.executable
BOUND_S: Final = 60.0
"""The whole exchange on a loaded 2-core machine (start-up, one call, exit)."""

FORBIDDEN: Final = (
    "mcpvisor.dashboard", "mcpvisor.bench", "mcpvisor.cli.status", "mcpvisor.cli.dashboard",
    "mcpvisor.cli.mcp", "mcpvisor.cli.toolset", "mcpvisor.cli.importer", "mcpvisor.cli.journal_cmd",
    "mcpvisor.cli.bench", "mcpvisor.actors.fronts.ws", "mcpvisor.actors.fronts.oauth",
    "jsonschema", "jwt", "psutil", "rich", "hypercorn", "psycopg", "psycopg_pool", "mcpvisor.pgstore.store",
    "mcp", "mcp_types", "pydantic", "starlette", "uvicorn", "httpx2", "opentelemetry",
    # Loaded where their feature is first used, never by a stdio serve that does not use it:
    "anyio.streams",  # the memory streams to the SDK's server: made when the SDK serves
    "tenacity",  # a server's backoff: at its first failure
    "mcpvisor.journal", "sqlite3",  # the call journal: when settings.journal names a file
    "mcpvisor.metrics", "mcpvisor.metrics_history",  # the counters: a metrics port, the dashboard
    "mcpvisor.actors.core.compound",  # compound tools: when the config declares one
    "webbrowser",  # a login's browser
)
"""Modules (and their submodules) a stdio ``serve`` without compound tools (nor a PostgreSQL
store, journal or metrics port) must not load while its client only does the handshake,
pings, lists and calls."""

WRAPPER: Final = """
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from mcpvisor.cli import main
sys.exit(main(sys.argv[2:]))
"""
"""Runs the CLI's own entry point and, at exit, writes the names in ``sys.modules``."""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_") or k == "MCPVISOR_TEST_TAG"}
    env.update(MCPVISOR_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path))
    return env


async def _exchange(tmp_path: Path, *then: dict[str, Any]) -> list[dict[str, Any]]:
    """Initialize, list (as a client does, until the upstream's tools are there), call its
    echo, ping and the other lists, the requests ``then``, close stdin; the answers."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s"},
    }))
    replies: list[dict[str, Any]] = []

    async def body(ask: Any, send: Any) -> dict[str, Any]:
        await _listed(ask)
        replies.append(await ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": "up_echo", "arguments": {"text": "hi"}}}))
        for n, method in enumerate(("ping", "resources/list", "resources/templates/list", "prompts/list"),
                                   start=4):
            replies.append(await ask({"jsonrpc": "2.0", "id": n, "method": method}))
        for frame in then:
            replies.append(await ask(frame))
        return {}

    await _exchange_with(tmp_path, config, body)
    return replies


async def _listed(ask: Any) -> dict[str, Any]:
    """``tools/list``, again after each list_changed, until the upstream's echo is there."""
    listed: dict[str, Any] = await ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    while not any(t["name"] == "up_echo" for t in listed["result"]["tools"]):
        await ask(None, "changed")
        listed = await ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    return listed


async def test_stdio_serve_loads_no_module_it_does_not_need(tmp_path: Path) -> None:
    replies = await _exchange(tmp_path)
    by_id = {r.get("id"): r for r in replies}
    # It really served: the call went through to the upstream and back.
    assert by_id[3]["result"]["content"][0]["text"].endswith("hi"), replies
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    crept_in = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert crept_in == []


async def test_the_first_message_that_needs_the_sdk_loads_it_and_is_answered(tmp_path: Path) -> None:
    replies = await _exchange(tmp_path, {"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel",
                                         "params": {"level": "debug"}})
    assert {r.get("id"): r for r in replies}[9].get("result") == {}, replies
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert "mcp" in loaded


ENVELOPE: Final = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities": {},
                   "io.modelcontextprotocol/clientInfo": {"name": "imports-test", "version": "1"}}


async def test_a_2026_07_28_client_is_served_without_the_sdk(tmp_path: Path) -> None:
    """A 2026-07-28 client (no handshake: every request carries its envelope) asks
    ``server/discover``, lists until the server's tools are there and calls one: all answered,
    none of `FORBIDDEN` loaded."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s"},
    }))

    def enveloped(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "method": method,
                "params": {**(params or {}), "_meta": ENVELOPE}}

    async def body(ask: Any, send: Any) -> dict[str, Any]:
        discover = await ask(enveloped(1, "server/discover"))
        assert discover["result"]["supportedVersions"] == ["2026-07-28"], discover
        for n in range(2, 200):  # the tools arrive once the server is up (no list_changed without a listen)
            listed = await ask(enveloped(n, "tools/list"))
            if any(t["name"] == "up_echo" for t in listed["result"]["tools"]):
                break
            await trio.sleep(0.05)
        answer: dict[str, Any] = await ask(enveloped(200, "tools/call", {"name": "up_echo",
                                                                          "arguments": {"text": "modern"}}))
        return answer

    answer = await _exchange_with(tmp_path, config, body, handshake=False)
    assert answer["result"]["content"][0]["text"].endswith("modern"), answer
    assert answer["result"]["resultType"] == "complete"
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)) == []


async def test_a_metrics_port_beside_the_stdio_front_loads_no_sdk(tmp_path: Path) -> None:
    """``serve --metrics-port`` (metrics public on loopback, no token): a client's handshake,
    lists and call, and a scrape that counts the call, all without the SDK (its guard had
    built the SDK's token record and auth settings: the proxy held 83 MB instead of 36)."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s", "metrics": {"public": True}},
    }))
    with socket.socket() as probe:  # a free port for the metrics (the driver reads no stderr)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def call_then_scrape(ask: Any, send: Any) -> dict[str, Any]:
        await _listed(ask)
        await ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "up_echo", "arguments": {"text": "counted"}}})
        async with http_client() as http:
            scraped = await http.get(f"http://127.0.0.1:{port}/metrics")
        return {"status": scraped.status_code, "text": scraped.text}

    scrape = await _exchange_with(tmp_path, config, call_then_scrape,
                                  args=("--metrics-port", str(port)))
    assert scrape["status"] == 200, scrape
    assert 'gen_ai_tool_name="echo"' in scrape["text"]
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert sorted({m.split(".")[0] for m in loaded} & {"mcp", "mcp_types", "pydantic"}) == []


SDK_AND_RUNTIME: Final = ("mcp", "mcp_types", "pydantic", "trio", "anyio", "httpx2")
"""What serving (and probing a server: ``mcp list``, ``toolset list``) needs and a command
that only reads or edits the config does not: ~350 ms and ~40 MB before it could print a line."""

NOT_FOR_THE_CONFIG: Final = ("psycopg", "psycopg_pool", "mcpvisor.pgstore", "mcpvisor.state", "filelock",
                             "platformdirs")
"""What checking or editing a config named by ``$MCPVISOR_CONFIG`` does not need either: the
store's package and its driver (no store is configured), the state directory's files and
their lock (the config file is locked with ``flock`` itself), the per-user directories
(the config is found by the variable): ~25 ms of every command's start."""


@pytest.mark.parametrize("command", [["--help"], ["config", "validate"],
                                     ["mcp", "add", "demo", "--", "echo", "hi"],
                                     ["mcp", "disable", "up"], ["mcp", "remove", "up"]], ids=" ".join)
def test_a_command_that_does_not_serve_does_not_load_the_sdk(tmp_path: Path, command: list[str]) -> None:
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({"mcpServers": {"up": {"command": PY, "args": ["-c", "pass"]}}}))
    env = _env(tmp_path) | {"MCPVISOR_CONFIG": str(config)}
    done = subprocess.run([PY, "-c", WRAPPER, str(tmp_path / "modules.json"), *command], env=env,
                          capture_output=True, text=True, timeout=BOUND_S, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout  # it did its work: help, the list, the confirmation
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert sorted({m.split(".")[0] for m in loaded} & set(SDK_AND_RUNTIME)) == []
    assert sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in NOT_FOR_THE_CONFIG)) == []


@pytest.mark.parametrize("command", [["mcp", "list"], ["mcp", "test", "up"]], ids=" ".join)
def test_probing_stdio_servers_loads_no_sdk(tmp_path: Path, command: list[str]) -> None:
    """``mcp list`` and ``mcp test`` contact a stdio server over the proxy's own pipes: the
    server is reached (its tools counted) without the SDK or its HTTP client loading."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({"mcpServers": {
        "up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}}}))
    env = _env(tmp_path) | {"MCPVISOR_CONFIG": str(config)}
    done = subprocess.run([PY, "-c", WRAPPER, str(tmp_path / "modules.json"), *command], env=env,
                          capture_output=True, text=True, timeout=BOUND_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Online" in done.stdout or "up is online" in done.stdout, done.stdout  # reached, listed
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert sorted({m.split(".")[0] for m in loaded} & {"mcp", "mcp_types", "pydantic", "httpx2"}) == []


async def test_a_call_to_a_server_still_starting_waits_for_it_without_the_sdk(tmp_path: Path) -> None:
    """A client calls a remembered tool of a server that has not finished starting (its
    ``initialize`` held until the test opens a gate): the call waits for the server on the
    proxy's own path and is answered once the server is up, the SDK never loaded."""
    gate = tmp_path / "gate"
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up",
                                                      "--start-gate", str(gate)]}},
        "settings": {"exposure": "all", "startupWait": "0s"},
    }))
    gate.touch()
    await _exchange_with(tmp_path, config)  # a first run: the proxy remembers the server's tools
    gate.unlink()

    async def call_then_open(ask: Any, send: Any) -> dict[str, Any]:
        listed = await ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert "up_echo" in [t["name"] for t in listed["result"]["tools"]]  # remembered
        await send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "up_echo", "arguments": {"text": "waited"}}})
        gate.touch()  # only now can the server answer its initialize
        answered: dict[str, Any] = await ask(None, 3)
        return answered

    answer = await _exchange_with(tmp_path, config, call_then_open)
    assert answer["result"]["content"][0]["text"].endswith("waited"), answer
    loaded: list[str] = json.loads((tmp_path / "modules.json").read_text())
    assert sorted({m.split(".")[0] for m in loaded} & {"mcp", "mcp_types"}) == []


async def _exchange_with(tmp_path: Path, config: Path, body: Any = None, *, handshake: bool = True,
                         args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``serve`` over stdio: initialize (unless not ``handshake``: a 2026-07-28 client),
    then ``body(ask, send)`` (default: list until the server's tools are there), then EOF;
    ``body``'s result."""
    argv = [PY, "-c", WRAPPER, str(tmp_path / "modules.json"), "serve", "--config", str(config), *args]
    with trio.fail_after(BOUND_S):
        proc = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL, env=_env(tmp_path))
        try:
            assert proc.stdin is not None
            assert proc.stdout is not None
            stdin = proc.stdin
            lines = LineReader(proc.stdout, 1 << 20).__aiter__()
            seen: list[dict[str, Any]] = []

            async def send(frame: dict[str, Any]) -> None:
                await stdin.send_all(json.dumps(frame).encode() + b"\n")

            async def ask(frame: dict[str, Any] | None, rid: Any = None) -> dict[str, Any]:
                """Send ``frame`` (if any); the next message answering it (or ``rid``), or the
                next list_changed when ``rid`` is "changed"."""
                if frame is not None:
                    await send(frame)
                    rid = frame["id"]
                while True:
                    # What was read already first: a list_changed that came in the same read as
                    # the answer before it is there, and no other message may follow it.
                    for n, msg in enumerate(seen):
                        if ("method" not in msg and msg.get("id") == rid) or (
                                rid == "changed" and msg.get("method") == "notifications/tools/list_changed"):
                            del seen[n]  # what came before it stays: a list_changed is waited for next
                            return msg
                    for line in await lines.__anext__():
                        assert isinstance(line, bytes)
                        seen.append(json.loads(line))

            if handshake:
                await ask({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "imports-test", "version": "1"}}})
                await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            result: dict[str, Any] = await (body or (lambda ask, send: _listed(ask)))(ask, send)
            await stdin.aclose()
            assert await proc.wait() == 0
            await lines.aclose()  # type: ignore[attr-defined]
        finally:
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()
    return result


HTTP_STACKS: Final = ("hpack", "h2", "wsproto", "hypercorn")
"""hypercorn, its HTTP/2 and websocket stacks (~90 ms of a ``serve --transport http``) and its
``Config`` (its logging configuration, TOML and WSGI modules: 8-30 ms): the front serves
HTTP/1.1 itself with settings of its own and hands a connection to hypercorn only for an
upgrade, an HTTP/2 preface or TLS."""


async def test_http_serve_loads_hypercorns_other_stacks_only_for_what_needs_them(tmp_path: Path) -> None:
    """A real ``serve --transport http``: a client's handshake, list and call over HTTP/1.1
    load none of `HTTP_STACKS`, nor the call journal (the metrics the front always records
    share only its classification of a call's outcome); the first websocket upgrade (the
    dashboard's live view) loads them and is served."""
    from mcp import Client
    from trio_websocket import open_websocket_url

    from tests.security.proxy import running_proxy

    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s"},
    }))
    # Python's import profile goes to the proxy's stderr, which the harness reads: each
    # module the proxy imports is one "import time:" line (an upstream's own lines reach the
    # proxy's log prefixed with its name, so they never match).
    env = _env(tmp_path) | {"PYTHONPROFILEIMPORTTIME": "1"}

    def imported(log: list[str]) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in log if line.startswith("import time:")}

    def stacks(modules: set[str]) -> list[str]:
        return sorted(m for m in modules if any(m == s or m.startswith(s + ".") for s in HTTP_STACKS))

    with trio.fail_after(BOUND_S):
        async with running_proxy(config, "--transport", "http", "--host", "127.0.0.1", "--port", "0",
                                 env=env) as proxy:
            async with Client(proxy.url, mode="legacy", cache=None) as client:
                result = await client.call_tool("up_echo", {"text": "over http"})
                assert result.content[0].text.endswith("over http")  # type: ignore[union-attr]
            assert stacks(imported(proxy.log)) == []
            assert sorted(m for m in imported(proxy.log) if m.split(".")[0] == "sqlite3"
                          or m == "mcpvisor.journal" or m.startswith("mcpvisor.journal.")) == []
            # The dashboard's live view is a websocket: its upgrade is handed to hypercorn,
            # which is imported for it and serves it.
            async with open_websocket_url(f"ws://127.0.0.1:{proxy.port}/api/events") as feed:
                first = json.loads(await feed.get_message())
            assert first["type"] == "snapshot", first
            assert "up" in json.dumps(first["status"])
            while not stacks(imported(proxy.log)):  # its import lines may still be on their way
                await proxy.grew.wait()


SDK_STACK: Final = ("mcp", "mcp_types", "pydantic", "starlette", "sse_starlette")
"""What the SDK's streamable-HTTP app is made of (~0.4 s of a ``serve --transport http``)."""


async def test_an_http_client_that_lists_and_calls_is_served_without_the_sdk(tmp_path: Path) -> None:
    """A real ``serve --transport http``: a handshake-era client (raw HTTP) initializes, lists,
    calls, pings, lists the rest and ends its session, and the SDK's own client lists and
    calls (its notification stream open meanwhile), all answered with none of `SDK_STACK`
    loaded (the front opened and served the sessions itself). Another client's
    ``logging/setLevel``, which only the SDK serves, loads it and is answered on that
    client's session."""
    import httpx2
    from mcp import Client

    from tests.security.proxy import running_proxy

    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s"},
    }))
    env = _env(tmp_path) | {"PYTHONPROFILEIMPORTTIME": "1"}  # one "import time:" line per module

    def sdk(log: list[str]) -> list[str]:
        names = {line.rsplit("|", 1)[1].strip() for line in log if line.startswith("import time:")}
        return sorted(m for m in names if m.split(".")[0] in SDK_STACK)

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "imports-test", "version": "1"}}}

    def result(response: httpx2.Response) -> Any:
        """The result in an answer: JSON, or the last event of an event stream."""
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("application/json"):
            return response.json()["result"]
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads([d for d in data if d.strip()][-1])["result"]

    async def session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
        opened = await http.post(url, json=init, headers=headers)
        assert result(opened)["serverInfo"]["name"] == "mcpvisor"
        ids = {**headers, "mcp-session-id": opened.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=ids)).status_code == 202
        return ids

    with trio.fail_after(BOUND_S):
        async with running_proxy(config, "--transport", "http", "--host", "127.0.0.1", "--port", "0",
                                 env=env) as proxy, httpx2.AsyncClient(timeout=BOUND_S) as http:
            ids = await session(http, proxy.url)  # the banner came: the upstream is ready
            listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            tools = result(await http.post(proxy.url, json=listed, headers=ids))["tools"]
            assert "up_echo" in [t["name"] for t in tools]
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "up_echo", "arguments": {"text": "own"}}}
            called = result(await http.post(proxy.url, json=call, headers=ids))
            assert called["content"][0]["text"] == "echo: own"
            for n, method in enumerate(("ping", "resources/list", "resources/templates/list", "prompts/list"),
                                       start=4):
                result(await http.post(proxy.url, json={"jsonrpc": "2.0", "id": n, "method": method},
                                       headers=ids))
            assert (await http.delete(proxy.url, headers=ids)).status_code == 200
            assert sdk(proxy.log) == []
            # The SDK's own client (which opens the session's notification stream, and ends
            # the session as it closes) is served the same way.
            async with Client(proxy.url, mode="legacy", cache=None) as client:
                assert "up_echo" in [t.name for t in (await client.list_tools()).tools]
                called_too = await client.call_tool("up_echo", {"text": "sdk client"})
                assert called_too.content[0].text == "echo: sdk client"  # type: ignore[union-attr]
            assert sdk(proxy.log) == []

            other = await session(http, proxy.url)
            level = {"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel", "params": {"level": "info"}}
            assert result(await http.post(proxy.url, json=level, headers=other)) == {}
            # Its import lines may still be on their way. (The SDK is imported in a worker
            # thread by `importlib`, whose own module gets no line of its own: its imports do.)
            while not [m for m in sdk(proxy.log) if m.startswith("mcp.")]:
                await proxy.grew.wait()
