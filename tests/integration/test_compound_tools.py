"""Compound tools end to end (issue 17): the config's top-level ``tools`` section, in MCP
Coordinator's shape, over two real subprocess servers, through the real SDK client.

The proxy runs in the test process behind the same stdio front ``mcpvisor serve`` uses
(fast path included), so a test can also reach the supervisor to stop and start a server
(`Upstream.disable` / `enable`: its process really stops and starts again). What must hold:

* the client sees one tool ``research`` listing its subtools, with an exact ``oneOf``
  schema; a call reaches the subtool with exactly the args given, on the fast path and
  the SDK path, progress included, and the result is the direct call's;
* a call naming an undeclared subtool or with args failing the subtool's schema is an
  ``isError`` result naming the field, and the upstream receives nothing;
* with one server down, the compound tool stays listed, says which subtools are
  unavailable and why, and the other server's subtools keep working; the server's
  return is announced by one ``list_changed`` after which the description is whole;
* a toolset (declared, or built with ``build-toolset``) can name ``research``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from tests.helpers import REAL_IO_BOUND_S, Recorder, everything, pipe_transport, read_record, text_of

pytestmark = pytest.mark.slow

SECTION = {"research": {
    "description": "Look things up on the web and in my notes",
    "subtools": {
        "web": {"tools": [{"name": "echo", "description": "Say it back"}, {"name": "add"},
                          {"name": "sleep"}]},
        "notes": {"tools": [{"name": "add"}, {"name": "progress"}, {"name": "sample"}, {"name": "elicit"}]},
    },
}}


def write(tmp_path: Path, *, fast_path: bool = True, exposure: str = "all",
          toolsets: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {
        "mcpServers": {
            "web": everything("--name", "web", "--record", str(tmp_path / "web.jsonl")),
            # hiddenTools: notes' add is no direct tool, but it is a subtool of research
            "notes": everything("--name", "notes", "--record", str(tmp_path / "notes.jsonl"),
                                hiddenTools=["add"]),
        },
        "tools": SECTION,
        "settings": {"exposure": exposure, "startupWait": "60s", "startupTimeout": "120s",
                     "fastPath": fast_path},
    }
    if toolsets:
        doc["toolsets"] = toolsets
    path = tmp_path / "mcpvisor.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


@asynccontextmanager
async def proxy(config: Path, recorder: Recorder | None = None, *, toolset: str | None = None,
                mode: str = "legacy") -> AsyncIterator[tuple[Any, Client]]:
    """(supervisor, client): a real SDK client over OS pipes to the stdio front of a
    proxy running here, with real upstream subprocesses."""
    from mcpvisor import open_supervisor
    from mcpvisor.actors.fronts.stdio import StdioFront

    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    front_in, client_out, client_in, front_out = (trio.lowlevel.FdStream(fd)
                                                  for fd in (up_r, up_w, down_r, down_w))
    kwargs = recorder.kwargs() if recorder is not None else {}
    async with front_in, front_out, client_in, client_out, \
            open_supervisor(config, state_dir=config.parent / "state", watch=False, toolset=toolset) as sup, \
            trio.open_nursery() as nursery:
        await sup.wait_ready()  # these tests are about calls once the servers are up
        front = StdioFront(sup.front, front_in, front_out, max_message=sup.settings.max_message_bytes,
                           fast_path=sup.settings.fast_path)
        nursery.start_soon(front.serve)
        transport = pipe_transport(client_in, client_out)
        async with Client(transport, mode=mode, cache=None, **kwargs) as client:
            yield sup, client
        nursery.cancel_scope.cancel()


def calls(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in read_record(path) if e["event"] == "call" and (name is None or e["name"] == name)]


async def call(client: Client, server: str, tool: str, args: dict[str, Any]) -> Any:
    """Call ``research`` as a model would: ``{"server", "tool", "args"}``."""
    return await client.call_tool("research", {"server": server, "tool": tool, "args": args})


async def research(client: Client) -> Any:
    return next(t for t in (await client.list_tools()).tools if t.name == "research")


@pytest.mark.parametrize("fast_path", [True, False], ids=["fastpath", "sdkpath"])
async def test_a_compound_call_is_the_direct_call_of_its_subtool(tmp_path: Path, fast_path: bool) -> None:
    """Listed once with every subtool and an exact schema; each call reaches its server's
    tool with exactly the args given (a hidden tool too) and answers as a direct call."""
    config = write(tmp_path, fast_path=fast_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config, Recorder()) as (_, client):
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "notes_add" not in tools  # hidden as a direct tool
            tool = tools["research"]
            assert tool.description is not None
            assert tool.description.startswith("Look things up on the web and in my notes")
            assert "- web.echo: Say it back" in tool.description
            assert "- notes.progress: " in tool.description
            branches = tool.input_schema["oneOf"]
            by_key = {(b["properties"]["server"]["const"], b["properties"]["tool"]["const"]): b
                      for b in branches}
            assert list(by_key) == [("web", "echo"), ("web", "add"), ("web", "sleep"), ("notes", "add"),
                                    ("notes", "progress"),
                                    ("notes", "sample"), ("notes", "elicit")]
            assert by_key[("web", "echo")]["properties"]["args"] == tools["web_echo"].input_schema

            direct = await client.call_tool("web_echo", {"text": "hi"})
            via = await call(client, "web", "echo", {"text": "hi"})
            assert via.model_dump() == direct.model_dump()
            added = await call(client, "notes", "add", {"a": 2, "b": 40})
            assert added.structured_content == {"sum": 42}
            assert not added.is_error

            seen: list[float] = []

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)

            result = await client.call_tool("research", {"server": "notes", "tool": "progress",
                                                         "args": {"steps": 3, "interval": 0.01}},
                                            progress_callback=progress)
            assert text_of(result) == "done 3"
            assert seen == [1, 2, 3]
            # sampling and elicitation reach the client whose compound call caused them
            sampled = await call(client, "notes", "sample", {"prompt": "hello"})
            assert text_of(sampled) == "sampled: from the client"
            elicited = await call(client, "notes", "elicit", {"message": "who?"})
            assert text_of(elicited).startswith("elicited: accept")
    assert [c["arguments"] for c in calls(tmp_path / "web.jsonl", "echo")] == [{"text": "hi"}, {"text": "hi"}]
    assert [c["arguments"] for c in calls(tmp_path / "notes.jsonl", "add")] == [{"a": 2, "b": 40}]


async def wait_for(path: Path, event: str) -> dict[str, Any]:
    """The first record of ``event`` the server wrote (polled: the server's own file)."""
    while True:
        found = [e for e in read_record(path) if e["event"] == event]
        if found:
            return found[0]
        await trio.sleep(0.02)


@pytest.mark.parametrize("fast_path", [True, False], ids=["fastpath", "sdkpath"])
async def test_cancelling_a_compound_call_cancels_the_subtool_call(tmp_path: Path, fast_path: bool) -> None:
    """A client's cancellation reaches the server running the subtool, for the very
    request the compound call became."""
    config = write(tmp_path, fast_path=fast_path)
    record = tmp_path / "web.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config) as (_, client):
            await research(client)
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def sleeper() -> None:
                    with scope:
                        await call(client, "web", "sleep", {"seconds": 600})

                nursery.start_soon(sleeper)
                started = await wait_for(record, "call")
                assert (started["name"], started["arguments"]) == ("sleep", {"seconds": 600})
                scope.cancel()
            cancelled = await wait_for(record, "cancelled")
            assert cancelled["requestId"] == started["id"]


async def test_a_bad_call_names_the_field_and_sends_nothing(tmp_path: Path) -> None:
    """An undeclared subtool, a wrong argument type, a missing required argument: each
    an isError result naming the field; the upstreams receive no call at all."""
    config = write(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config) as (_, client):
            for arguments, field in [
                ({"server": "web", "tool": "crash", "args": {}}, "tool"),
                ({"server": "mail", "tool": "echo", "args": {}}, "server"),
                ({"server": "web", "tool": "echo", "args": {"text": 3}}, "args.text"),
                ({"server": "notes", "tool": "add", "args": {"a": 1}}, "args.b"),
            ]:
                result = await client.call_tool("research", arguments)
                assert result.is_error, arguments
                assert f"field {field!r}" in text_of(result)
                assert result.structured_content is not None
                assert result.structured_content["field"] == field
    assert calls(tmp_path / "web.jsonl") == []
    assert calls(tmp_path / "notes.jsonl") == []


async def test_one_server_down_and_back(tmp_path: Path) -> None:
    """With notes stopped, research stays listed and says notes' subtools are unavailable
    and why; web's keep working; notes' return is one list_changed, after which the
    description is as it was and notes' subtools answer again."""
    config = write(tmp_path)
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config, rec) as (sup, client):
            whole = (await research(client)).description
            changed = rec.changed
            sup.upstreams["notes"].disable()
            await changed.wait()
            down = await research(client)
            assert down.description is not None
            assert "- notes.add: unavailable (server notes is down: disabled)" in down.description
            unavailable = "Unavailable now: notes.add, notes.progress, notes.sample, notes.elicit."
            assert unavailable in down.description
            servers = {b["properties"]["server"]["const"] for b in down.input_schema["oneOf"]}
            assert servers == {"web", "notes"}
            echoed = await call(client, "web", "echo", {"text": "up"})
            assert text_of(echoed) == "echo: up"
            refused = await call(client, "notes", "add", {"a": 1, "b": 2})
            assert refused.is_error
            assert "notes.add is unavailable: server notes is down: disabled" in text_of(refused)

            before, changed = rec.list_changed, rec.changed
            sup.upstreams["notes"].enable()
            await changed.wait()
            assert rec.list_changed == before + 1
            assert (await research(client)).description == whole
            added = await call(client, "notes", "add", {"a": 1, "b": 2})
            assert added.structured_content == {"sum": 3}


async def test_a_toolset_can_name_the_compound_tool(tmp_path: Path) -> None:
    """A declared toolset naming research shows it; build-toolset can name it too, and
    the equipped toolset's research answers."""
    config = write(tmp_path, exposure="menu", toolsets={"dev": ["research", "web.echo"]})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config, toolset="dev") as (_, client):
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["enter-configuration-mode", "research", "web_echo"]
            await client.call_tool("enter-configuration-mode", {})
            built = await client.call_tool("build-toolset", {
                "name": "mine", "tools": [{"namespacedName": "research"}], "autoEquip": True})
            assert not built.is_error, text_of(built)
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["enter-configuration-mode", "research"]
            result = await call(client, "web", "add", {"a": 1, "b": 1})
            assert result.structured_content == {"sum": 2}
            await client.call_tool("enter-configuration-mode", {})
            available = await client.call_tool("list-available-tools", {})
            assert "## compound tools (1)" in text_of(available)
            assert "- notes.add: available" in text_of(available)
            status = await client.call_tool("get-server-status", {})
            assert status.structured_content is not None
            assert status.structured_content["compoundTools"][0]["name"] == "research"


def test_mcp_info_shows_the_compound_tool_and_its_subtools_state(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``mcpvisor mcp info research`` connects to the subtools' servers and says, for
    each subtool, whether its server lists it."""
    from mcpvisor.cli import main

    config = write(tmp_path)
    doc = json.loads(config.read_text())
    doc["tools"]["research"]["subtools"]["web"]["tools"].append({"name": "nope"})
    config.write_text(json.dumps(doc))
    assert main(["mcp", "info", "research", "--config", str(config), "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [(s["server"], s["tool"], s["available"]) for s in info["subtools"]] == [
        ("web", "echo", True), ("web", "add", True), ("web", "sleep", True), ("web", "nope", False),
        ("notes", "add", True),
        ("notes", "progress", True), ("notes", "sample", True), ("notes", "elicit", True)]
    assert info["subtools"][3]["reason"] == "web does not list a tool named 'nope'"


async def test_a_reload_that_changes_only_the_tools_section_applies_it(tmp_path: Path) -> None:
    """Editing the compound tools (no server changed) reaches clients with one list_changed."""
    config = write(tmp_path)
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config, rec) as (sup, client):
            await research(client)
            doc = json.loads(config.read_text())
            doc["tools"]["research"]["description"] = "Only the web now"
            doc["tools"]["research"]["subtools"] = {"web": {"tools": [{"name": "echo"}]}}
            config.write_text(json.dumps(doc))
            before, changed = rec.list_changed, rec.changed
            report = await sup.reload()
            assert report["ok"], report
            await changed.wait()
            assert rec.list_changed == before + 1
            tool = await research(client)
            assert tool.description is not None
            assert tool.description.startswith("Only the web now")
            assert [b["properties"]["tool"]["const"] for b in tool.input_schema["oneOf"]] == ["echo"]


async def test_the_supervisor_api_calls_a_compound_tool_like_a_client(tmp_path: Path) -> None:
    """``sup.call_tool`` and a harness session's ``call_tool`` (with and without its own
    toolset naming ``research``) route a compound call to the subtool with exactly its
    ``args``, as the fronts do; a call outside the subtools is refused, nothing sent."""
    config = write(tmp_path, toolsets={"look": ["research"]})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(config) as (sup, _):
            via_api = await sup.call_tool("research",
                                          {"server": "web", "tool": "echo", "args": {"text": "a"}})
            assert via_api["content"][0]["text"] == "echo: a"
            async with sup.session("episode-1") as session:
                plain = await session.call_tool("research", {"server": "web", "tool": "echo",
                                                             "args": {"text": "b"}})
                assert plain["content"][0]["text"] == "echo: b"
                assert "research" in await session.equip("look")
                equipped = await session.call_tool("research", {"server": "notes", "tool": "add",
                                                                "args": {"a": 1, "b": 2}})
                assert equipped["structuredContent"] == {"sum": 3}
                refused = await session.call_tool("research", {"server": "web", "tool": "nope", "args": {}})
                assert refused["isError"]
    assert [c["arguments"] for c in calls(tmp_path / "web.jsonl", "echo")] == [{"text": "a"}, {"text": "b"}]
    assert [c["arguments"] for c in calls(tmp_path / "notes.jsonl", "add")] == [{"a": 1, "b": 2}]
