"""`mcpvisor.probe`: one bounded attempt at a server, with step timings and a classified failure.

Real servers only: the fixture servers over stdio, a loopback HTTP responder that answers
every request with one status, and a port nobody listens on. Every probe must leave no
process behind (the conftest checks).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from mcpvisor.config import ServerSpec, parse_config
from mcpvisor.probe import probe_all, probe_server

SERVERS = Path(__file__).parents[1] / "servers"
BOUND_S = 60.0
"""Real subprocesses on a loaded 2-core machine: generous, but each test finishes fast when quiet."""


def spec(name: str, entry: dict[str, object]) -> ServerSpec:
    return parse_config({"mcpServers": {name: entry}}).servers[name]


def flaky(*flags: str) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(SERVERS / "flaky.py"), *flags], "protocol": "legacy"}


async def status_server(status: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer every HTTP request on 127.0.0.1 with ``status`` and an empty body."""

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(10):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            while len(body) < length:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                body += chunk
            await stream.send_all(
                b"HTTP/1.1 %d Nope\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status
            )
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def test_a_working_server_reports_each_step_and_its_tools() -> None:
    """spawn, initialize, tools/list each succeed with a timing; the tools are listed."""
    with trio.fail_after(BOUND_S):
        result = await probe_server(spec("fl", flaky("--name", "fl")), limit=BOUND_S)
    assert result.ok, result.failure
    assert [s.name for s in result.steps] == ["spawn", "initialize", "tools/list"]
    assert all(s.ok and s.seconds >= 0 for s in result.steps)
    assert {t["name"] for t in result.tools} >= {"echo", "add"}
    assert result.server_name == "fl"
    assert result.protocol_version
    assert result.to_json()["toolCount"] == len(result.tools)


async def test_a_server_that_exits_reports_its_status_and_stderr() -> None:
    """The exit status and the last stderr lines say why it failed, during which step."""
    entry = flaky("--exit-at-start", "3", "--stderr-text", "cannot open database")
    with trio.fail_after(BOUND_S):
        result = await probe_server(spec("bad", entry), limit=BOUND_S)
    assert not result.ok
    assert result.failure is not None
    assert result.failure.kind == "exited"
    assert result.failure.status == 3
    assert "exited with status 3" in result.failure.message
    assert any("cannot open database" in line for line in result.failure.stderr)
    assert result.steps[-1].name == "initialize"
    assert not result.steps[-1].ok


async def test_a_command_not_on_path_is_named() -> None:
    with trio.fail_after(BOUND_S):
        result = await probe_server(spec("nf", {"command": "mcpvisor-no-such-command"}), limit=5)
    assert result.failure is not None
    assert result.failure.kind == "not_found"
    assert "mcpvisor-no-such-command" in result.failure.message
    assert result.steps[-1].name == "spawn"


async def test_a_hanging_server_times_out_and_is_reaped() -> None:
    """A server that never answers is abandoned at the bound, its process stopped."""
    with trio.fail_after(BOUND_S):
        result = await probe_server(spec("hang", flaky("--hang-after", "0")), limit=1.5)
    assert result.failure is not None
    assert result.failure.kind == "timeout"
    assert "1.5s" in result.failure.message
    assert "initialize" in result.failure.message


@pytest.mark.parametrize(("transport", "status"), [("http", 401), ("http", 404), ("sse", 401)])
async def test_http_errors_are_reported_with_their_status(transport: str, status: int) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(status_server, status)
        path = "/sse" if transport == "sse" else "/mcp"
        with trio.fail_after(BOUND_S):
            result = await probe_server(
                spec("web", {"type": transport, "url": f"http://127.0.0.1:{port}{path}"}), limit=BOUND_S
            )
        nursery.cancel_scope.cancel()
    assert result.failure is not None
    assert result.failure.kind == "http", result.failure
    assert result.failure.http_status == status
    assert f"HTTP {status}" in result.failure.message
    assert result.failure.hint


async def test_a_refused_connection_is_a_connect_failure() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()  # now nothing listens there
    with trio.fail_after(BOUND_S):
        result = await probe_server(
            spec("web", {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}), limit=BOUND_S
        )
    assert result.failure is not None
    assert result.failure.kind == "connect"
    assert str(port) in result.failure.message


async def test_probe_all_runs_servers_concurrently_and_keeps_their_order() -> None:
    """Three slow starters probed together take about one start, not three."""
    specs = [spec(f"s{i}", flaky("--slow-start", "2")) for i in range(3)]
    seen: list[str] = []
    started = trio.current_time()
    with trio.fail_after(BOUND_S):
        results = await probe_all(specs, limit=BOUND_S, on_result=lambda r: seen.append(r.server))
    elapsed = trio.current_time() - started
    assert list(results) == ["s0", "s1", "s2"]
    assert sorted(seen) == ["s0", "s1", "s2"]
    assert all(r.ok for r in results.values())
    # In a row it would take the sum (each >= 2 s); together about the slowest one.
    assert elapsed < sum(r.seconds for r in results.values()) - 2.0


async def oversize_server(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer every HTTP request on 127.0.0.1 with 200 and a JSON body announced one byte
    over the probe's message bound (and never sent)."""
    from mcpvisor.probe import PROBE_MAX_MESSAGE

    async def handle(stream: trio.SocketStream) -> None:
        with trio.move_on_after(10):
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: %d\r\n\r\n" % (PROBE_MAX_MESSAGE + 1))
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def test_an_answer_over_the_message_bound_is_refused_as_the_proxy_refuses_it() -> None:
    """`mcpvisor mcp test` reaches an http server through the proxy's own transport: an
    answer larger than the bound is not read, and the failure names the server and the
    limit, as a call through the proxy would."""
    from mcpvisor.probe import PROBE_MAX_MESSAGE

    async with trio.open_nursery() as nursery:
        port = await nursery.start(oversize_server)
        with trio.fail_after(BOUND_S):
            result = await probe_server(spec("web", {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}),
                                        limit=BOUND_S)
        nursery.cancel_scope.cancel()
    assert result.failure is not None
    assert f"server web sent a message larger than maxMessageBytes ({PROBE_MAX_MESSAGE} bytes)" in \
        result.failure.message, result.failure
