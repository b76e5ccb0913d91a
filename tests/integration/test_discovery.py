"""Lazy discovery end to end through real MCP clients (issue 16, "Done when").

Real subprocess upstreams (the stdlib fixture server): ``s1`` eager; three lazy ones,
``big`` (starts), ``slow`` (answers ``initialize`` after a delay) and ``broken`` (exits
with status 3 and a stderr line before reading anything).

* stdio: ``mcpvisor serve --exposure discovery`` under a real SDK client: the three tools,
  the catalog with its ``<mcp_servers>`` block, ``discover_tool`` by name and by query,
  ``use_tool`` (arguments checked before anything is sent; progress arrives through it),
  ``load_mcp`` (one ``list_changed``, the tools in the catalog, ``load_mcp`` gone when
  nothing is left to load), management tools reachable, lazy servers "not loaded".
* streamable HTTP: ten concurrent ``load_mcp`` of the slow server (one start, ten
  successes); three failed loads of the broken one, each saying why, then it is no
  longer offered.
* ``all`` exposure: a lazy server starts on its first use (a call, a resource read).

Every test is bounded; the conftest fails any test that leaves a process behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import pytest
import trio
import trio.lowlevel
import trio.testing
from mcp import Client

from mcpvisor import serve_http
from mcpvisor.actors.core.discovery import DISCOVER_TOOL, LOAD_MCP, USE_TOOL
from mcpvisor.actors.messages import ListChanged
from mcpvisor.tree import open_supervisor
from tests.helpers import (
    REAL_IO_BOUND_S,
    Recorder,
    embedded_client,
    everything,
    flaky,
    proxy_client,
    read_record,
    text_of,
    write_config,
)
from tests.polling import poll_until

pytestmark = pytest.mark.slow

THREE: Final = [DISCOVER_TOOL, USE_TOOL, LOAD_MCP]
SLOW_START_S: Final = 1.0
"""How long the slow server takes to answer initialize: long enough that ten loads overlap."""


def servers(tmp_path: Path) -> dict[str, Any]:
    return {
        "s1": flaky("--name", "s1", "--record", str(tmp_path / "s1.jsonl"),
                    description="Eager fixture server"),
        "big": flaky("--name", "big", "--record", str(tmp_path / "big.jsonl"), lazy=True,
                     description="Big internal toolbox: echo, add, counter"),
        "slow": flaky("--name", "slow", "--slow-start", str(SLOW_START_S), lazy=True,
                      description="Slow to start"),
        "broken": flaky("--exit-at-start", "3", "--stderr-text", "fatal: no licence for broken", lazy=True,
                        description="Never starts"),
    }


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def catalog(client: Client) -> str:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    return tools[DISCOVER_TOOL].description or ""


async def test_discovery_over_stdio(tmp_path: Path) -> None:
    """A model's whole session: the catalog, describe, call, load, call the loaded tool."""
    config = write_config(tmp_path, servers(tmp_path), exposure="menu")
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        # --exposure wins over $MCPVISOR_EXPOSURE, which wins over the file's "menu".
        async with proxy_client(config, "--exposure", "discovery", "--state-dir", str(tmp_path / "state"),
                                recorder=rec, env={"MCPVISOR_EXPOSURE": "all"}) as client:
            assert await names(client) == THREE
            text = await catalog(client)
            assert "## s1" in text
            assert "- s1_echo:" in text
            assert "<mcp_servers>" in text
            assert "- big: Big internal toolbox" in text
            assert "- slow:" in text
            assert "big_echo" not in text

            described = await client.call_tool(DISCOVER_TOOL, {"tool_name": "s1_add"})
            assert not described.is_error
            assert described.structured_content["inputSchema"]["required"] == ["a", "b"]
            by_namespace = await client.call_tool(DISCOVER_TOOL, {"tool_name": "s1.add"})
            assert by_namespace.structured_content["name"] == "s1_add"
            unknown = await client.call_tool(DISCOVER_TOOL, {"tool_name": "s1_ad"})
            assert unknown.is_error
            assert "s1_add" in text_of(unknown)
            found = await client.call_tool(DISCOVER_TOOL, {"query": "progress notifications"})
            assert found.structured_content["matches"][0]["name"] == "s1_progress"

            added = await client.call_tool(USE_TOOL, {"tool_name": "s1_add", "arguments": {"a": 2, "b": 3}})
            assert not added.is_error
            assert text_of(added) == "5"
            bad = await client.call_tool(USE_TOOL, {"tool_name": "s1_add", "arguments": {"a": "two", "b": 3}})
            assert bad.is_error
            assert "arguments.a" in text_of(bad)
            assert [e["arguments"] for e in read_record(tmp_path / "s1.jsonl") if e["event"] == "call"] == [
                {"a": 2, "b": 3}]  # the bad call never reached the server

            reported: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                reported.append(progress)

            done = await client.call_tool(USE_TOOL, {"tool_name": "s1_progress",
                                                     "arguments": {"steps": 3, "interval": 0.01}},
                                          progress_callback=on_progress)
            assert not done.is_error
            assert len(reported) == 3

            status = await client.call_tool(USE_TOOL, {"tool_name": "get-server-status"})
            states = {s["name"]: s["state"] for s in status.structured_content["servers"]}
            assert states == {"s1": "ready", "big": "not loaded", "slow": "not loaded",
                              "broken": "not loaded"}

            before = rec.list_changed
            loaded = await client.call_tool(LOAD_MCP, {"mcp_name": "big"})
            assert not loaded.is_error, text_of(loaded)
            with trio.fail_after(10):
                while rec.list_changed == before:
                    await rec.changed.wait()
            assert await names(client) == THREE  # slow and broken are still loadable
            text = await catalog(client)
            assert "## big" in text
            assert "- big_echo:" in text
            assert "- big:" not in text
            echoed = await client.call_tool(USE_TOOL, {"tool_name": "big_echo", "arguments": {"text": "hi"}})
            assert text_of(echoed) == "echo: hi"
            again = await client.call_tool(LOAD_MCP, {"mcp_name": "big"})
            assert again.structured_content["started"] is False


@pytest.mark.parametrize("fast_path", [True, False], ids=["fastpath", "sdkpath"])
async def test_use_tool_is_cancelled_and_reports_progress_like_a_direct_call(tmp_path: Path,
                                                                             fast_path: bool) -> None:
    """Through use_tool, progress reaches the client and a cancelled call's
    notifications/cancelled reaches the upstream under the id the call went out with, on
    the fast path and on the SDK path alike; the connection keeps serving."""
    record = tmp_path / "s1.jsonl"
    config = write_config(tmp_path, {"s1": flaky("--name", "s1", "--record", str(record))},
                          exposure="discovery", fastPath=fast_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            assert await names(client) == [DISCOVER_TOOL, USE_TOOL]
            reported: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                reported.append(progress)

            done = await client.call_tool(USE_TOOL, {"tool_name": "s1_progress",
                                                     "arguments": {"steps": 2, "interval": 0.01}},
                                          progress_callback=on_progress)
            assert not done.is_error
            assert reported == [1, 2]
            with trio.move_on_after(1.0):
                await client.call_tool(USE_TOOL, {"tool_name": "s1_sleep", "arguments": {"seconds": 30}})
            with trio.fail_after(20):
                await poll_until(lambda: any(e.get("event") == "cancelled" for e in read_record(record)))
            after = await client.call_tool(USE_TOOL, {"tool_name": "s1_echo", "arguments": {"text": "after"}})
            assert text_of(after) == "echo: after"
    calls = [e for e in read_record(record) if e.get("event") == "call" and e.get("name") == "sleep"]
    cancels = [e for e in read_record(record) if e.get("event") == "cancelled"]
    assert calls
    assert cancels[0]["requestId"] == calls[0]["id"]


async def test_concurrent_loads_and_failures_over_http(tmp_path: Path) -> None:
    """Ten load_mcp of one server share one start; a server that cannot start is given up after 3."""
    config = write_config(tmp_path, servers(tmp_path), exposure="discovery")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (open_supervisor(config, state_dir=tmp_path / "state") as sup,
                    trio.open_nursery() as nursery):
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            rec = Recorder()
            async with Client(url, mode="legacy", cache=None, message_handler=rec.handler) as client:
                assert await names(client) == THREE
                results: list[Any] = []

                async def load() -> None:
                    results.append(await client.call_tool(LOAD_MCP, {"mcp_name": "slow"}))

                async with trio.open_nursery() as loads:
                    for _ in range(10):
                        loads.start_soon(load)
                assert [r.is_error for r in results] == [False] * 10, [text_of(r) for r in results]
                assert sup.upstreams["slow"].starts == 1
                echoed = await client.call_tool(USE_TOOL,
                                                {"tool_name": "slow_echo", "arguments": {"text": "x"}})
                assert text_of(echoed) == "echo: x"

                errors = []
                for _ in range(3):
                    failed = await client.call_tool(LOAD_MCP, {"mcp_name": "broken"})
                    assert failed.is_error
                    errors.append(text_of(failed))
                assert all("fatal: no licence for broken" in e for e in errors), errors
                assert "exit" in errors[0]
                assert "3" in errors[0]
                assert "no longer offered" in errors[2]
                assert sup.upstreams["broken"].starts == 3
                fourth = await client.call_tool(LOAD_MCP, {"mcp_name": "broken"})
                assert fourth.is_error
                assert "no longer offered" in text_of(fourth)
                assert sup.upstreams["broken"].starts == 3  # given up: not started again
                text = await catalog(client)
                assert "- broken:" not in text
                # big is the last loadable server: loading it takes load_mcp away, in one list_changed.
                changes: list[ListChanged] = []

                async def collect() -> None:
                    async for event in sup.events():
                        if isinstance(event, ListChanged):
                            changes.append(event)

                nursery.start_soon(collect)
                while not sup.event_bus.has_subscribers:
                    await trio.lowlevel.checkpoint()
                loaded = await client.call_tool(LOAD_MCP, {"mcp_name": "big"})
                assert not loaded.is_error
                assert loaded.structured_content["toolCount"] == 8
                await trio.testing.wait_all_tasks_blocked()  # the collector has seen what was published
                assert [e.kinds for e in changes] == [("tools",)]
                assert await names(client) == [DISCOVER_TOOL, USE_TOOL]
            nursery.cancel_scope.cancel()


async def test_lazy_servers_start_on_first_use_in_all_exposure(tmp_path: Path) -> None:
    """Without discovery a lazy server starts when a call names one of its tools, or a
    resource read needs it; both coalesce on the same loader."""
    config = write_config(tmp_path, {
        "s1": flaky("--name", "s1"),
        "big": flaky("--name", "big", lazy=True, description="lazy"),
        "docs": everything("--name", "docs", lazy=True, description="resources"),
        "broken": flaky("--exit-at-start", "3", "--stderr-text", "fatal: no licence", lazy=True),
    }, exposure="all")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (open_supervisor(config, state_dir=tmp_path / "state") as sup,
                    trio.open_nursery() as nursery):
            await sup.wait_ready()  # s1 is up: the lists answer at once with what is up
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with Client(url, mode="legacy", cache=None) as client:
                assert "big_echo" not in await names(client)
                assert [s["state"] for s in
                        (await client.call_tool("get-server-status", {})).structured_content["servers"]] == [
                    "ready", "not loaded", "not loaded", "not loaded"]
                echoed = await client.call_tool("big_echo", {"text": "first use"})
                assert not echoed.is_error
                assert text_of(echoed) == "echo: first use"
                assert "big_echo" in await names(client)
                read = await client.read_resource("mem://greeting")
                assert isinstance(read.contents[0], types.TextResourceContents)
                assert sup.upstreams["docs"].starts == 1
                for attempt in range(1, 5):  # three failed first uses, then the last error at once
                    failed = await client.call_tool("broken_echo", {"text": "x"})
                    assert failed.is_error
                    assert "fatal: no licence" in text_of(failed)
                    assert ("no longer offered" in text_of(failed)) is (attempt >= 3)
                assert sup.upstreams["broken"].starts == 3
            nursery.cancel_scope.cancel()


def test_mcp_add_lazy_writes_description(tmp_path: Path) -> None:
    """``mcpvisor mcp add NAME --lazy --description TEXT -- cmd`` writes a lazy server."""
    import subprocess
    import sys

    path = tmp_path / "mcpvisor.json"
    proc = subprocess.run([sys.executable, "-m", "mcpvisor", "mcp", "add", "big", "--config", str(path),
                           "--lazy", "--description", "Large toolbox", "--", "node", "big.js"],
                          capture_output=True, text=True, timeout=REAL_IO_BOUND_S, check=False,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(path.read_text())["mcpServers"]["big"]
    assert entry["lazy"] is True
    assert entry["description"] == "Large toolbox"
