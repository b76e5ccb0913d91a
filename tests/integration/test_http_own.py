"""Sessions the streamable HTTP front opens and serves itself, and their hand-over to the SDK.

The proxy runs in-process (`open_supervisor` + `serve_http` on 127.0.0.1, port 0) over real
upstream subprocesses (tests/servers/flaky.py, the demo's notes server); the client is raw
HTTP (httpx2), so every byte the front sends is seen. A session whose client only
initializes, lists and calls is answered by the front (header ``mcpvisor-path: own``), as the
SDK answers (compared with a front whose SDK serves everything, ``fastPath: false``); the
first request that needs the SDK hands the session over and is answered on the same session.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio

from mcpvisor import open_supervisor, serve_http
from tests.helpers import REAL_IO_BOUND_S, flaky, write_config

pytestmark = pytest.mark.slow

HEADERS: Final = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
NOTES: Final = {"command": sys.executable, "args": ["-m", "mcpvisor.demo.notes"]}


def _initialize(version: str, rid: int | str = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {"roots": {}},
                       "clientInfo": {"name": "own-test", "version": "1"}}}


def _events(response: httpx2.Response) -> list[dict[str, Any]]:
    """The events of an SSE body, each as its fields (``data`` decoded when it has some)."""
    events = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("data"):
            fields["data"] = json.loads(fields["data"])
        events.append(fields)
    return events


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC response in an answer, JSON or SSE."""
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    found = [e["data"] for e in _events(response) if isinstance(e.get("data"), dict)]
    assert len(found) == 1, response.text
    return dict(found[0])


def _shape(response: httpx2.Response) -> list[list[str]]:
    """What an SSE answer is made of, event by event: its fields' names (ids and session ids
    differ from one run to the next)."""
    assert response.headers["content-type"] == "text/event-stream", response.headers
    return [sorted(event) for event in _events(response)]


class Session:
    """One handshake-era session over raw HTTP."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.headers = dict(HEADERS)

    async def open(self, version: str = "2025-11-25") -> httpx2.Response:
        opened = await self.http.post(self.url, json=_initialize(version), headers=HEADERS)
        assert opened.status_code == 200, opened.text
        self.headers.update({"mcp-session-id": opened.headers["mcp-session-id"],
                             "mcp-protocol-version": version})
        done = await self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                    headers=self.headers)
        assert done.status_code == 202
        return opened

    async def ask(self, rid: int, method: str, params: dict[str, Any] | None = None) -> httpx2.Response:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        return await self.http.post(self.url, json=frame, headers=self.headers)

    async def names(self) -> list[str]:
        """The tool names listed now."""
        return [t["name"] for t in _answer(await self.ask(2, "tools/list"))["result"]["tools"]]

    async def tools(self) -> list[str]:
        """The tool names, once both servers' are there (the first list may be early)."""
        while True:
            names = [t["name"] for t in _answer(await self.ask(2, "tools/list"))["result"]["tools"]]
            if {"fl_echo", "notes_add_note"} <= set(names):
                return names
            await trio.sleep(0.05)


@asynccontextmanager
async def front(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Any, str]]:
    config = write_config(tmp_path, {"fl": flaky(), "notes": NOTES}, **settings)
    async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
            trio.open_nursery() as nursery:
        url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
        yield sup, url
        nursery.cancel_scope.cancel()


async def _first_answers(tmp_path: Path, version: str, **settings: Any) -> dict[str, httpx2.Response]:
    async with front(tmp_path, **settings) as (_, url), httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
        session = Session(http, url)
        answers = {"initialize": await session.open(version)}
        await session.tools()
        for n, method in enumerate(("tools/list", "resources/list", "resources/templates/list",
                                    "prompts/list", "ping"), start=3):
            answers[method] = await session.ask(n, method)
        return answers


@pytest.mark.parametrize("version", ["2025-11-25", "2025-03-26"])
async def test_the_front_answers_a_session_it_opened_as_the_sdk_does(tmp_path: Path, version: str) -> None:
    """The same handshake and lists, asked of a front that answers them itself and of one whose
    SDK serves everything: the same results, in the same event streams (a priming event for a
    2025-11-25 client only, then the answer as one numbered event)."""
    with trio.fail_after(REAL_IO_BOUND_S * 2):
        (tmp_path / "own").mkdir()
        (tmp_path / "sdk").mkdir()
        own = await _first_answers(tmp_path / "own", version)
        sdk = await _first_answers(tmp_path / "sdk", version, fastPath=False)
    for method, answer in own.items():
        assert answer.headers.get("mcpvisor-path") == "own", method  # the front answered it
        assert sdk[method].headers.get("mcpvisor-path") is None, method
        assert answer.status_code == sdk[method].status_code == 200
        assert _shape(answer) == _shape(sdk[method]), method
        assert answer.headers["mcp-session-id"]
        mine, theirs = _answer(answer), _answer(sdk[method])
        if method == "initialize":
            for result in (mine, theirs):  # the upstreams' instructions name where each ran
                result["result"].pop("instructions", None)
        assert mine == theirs, method
    primed = _events(own["initialize"])[0]
    assert ("retry" in primed) == (version >= "2025-11-25")


async def test_a_session_the_front_opened_is_handed_to_the_sdk_when_it_needs_it(tmp_path: Path) -> None:
    """A session the front opened and served (lists, a call) asks for a resource, which only
    the SDK serves: the session becomes the SDK's, the read is answered on it, and the lists,
    calls, its notification stream and its end keep working on the same session id."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with front(tmp_path) as (sup, url), httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
            session = Session(http, url)
            await session.open()
            names = await session.tools()
            call = await session.ask(3, "tools/call", {"name": "fl_echo", "arguments": {"text": "before"}})
            assert _answer(call)["result"]["content"][0]["text"] == "echo: before"
            assert sup.front.sdk_built is False  # nothing needed the SDK's server yet

            listed = _answer(await session.ask(4, "resources/list"))["result"]["resources"]
            uri = next(r["uri"] for r in listed if r["uri"] == "notes://all")
            read = await session.ask(5, "resources/read", {"uri": uri})
            assert read.status_code == 200, read.text
            assert read.headers.get("mcpvisor-path") is None  # the SDK answered it
            assert _answer(read)["result"]["contents"][0]["uri"] == uri

            after = [t["name"] for t in _answer(await session.ask(6, "tools/list"))["result"]["tools"]]
            assert after == names
            call = await session.ask(7, "tools/call", {"name": "fl_echo", "arguments": {"text": "after"}})
            assert _answer(call)["result"]["content"][0]["text"] == "echo: after"
            stream = {**session.headers, "accept": "text/event-stream"}
            async with http.stream("GET", url, headers=stream) as get:
                assert get.status_code == 200
                assert get.headers["content-type"].startswith("text/event-stream")
            ended = await http.delete(url, headers=session.headers)
            assert ended.status_code == 200
            gone = await session.ask(8, "ping")
            assert gone.status_code == 404


async def test_a_session_the_front_opened_ends_with_delete_and_counts_towards_the_limit(
        tmp_path: Path) -> None:
    """``maxSessions: 2``: two sessions the front opened (one of them since handed to the SDK)
    fill it, and a third client gets the SDK's 503; one ended with DELETE (404 from then on, as
    the SDK answers) makes room again."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with front(tmp_path, maxSessions=2) as (_, url), \
                httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
            first, second = Session(http, url), Session(http, url)
            await first.open()
            await second.open()
            moved = await second.ask(3, "logging/setLevel", {"level": "debug"})  # the SDK's: hands it over
            assert _answer(moved)["result"] == {}
            refused = await http.post(url, json=_initialize("2025-11-25"), headers=HEADERS)
            assert refused.status_code == 503
            assert refused.json()["error"]["message"] == "Too many open sessions"

            ended = await http.delete(url, headers=first.headers)
            assert ended.status_code == 200
            assert ended.headers["mcp-session-id"] == first.headers["mcp-session-id"]
            gone = await first.ask(4, "tools/list")
            assert gone.status_code == 404
            assert gone.json()["error"]["message"] == "Session not found"
            third = Session(http, url)
            assert (await third.open()).status_code == 200


async def _next_message(lines: Any) -> tuple[str | None, dict[str, Any]] | None:
    """The next event with a message on an SSE stream, with its id; None once the stream ends."""
    event_id = None
    async for line in lines:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:") and line[5:].strip():
            return event_id, dict(json.loads(line[5:]))
    return None


async def test_a_session_the_front_opened_hears_list_changes_on_its_own_stream(tmp_path: Path) -> None:
    """The session's notification stream (its GET) is the front's too: a toolset equipped
    reaches it as ``list_changed``, a numbered event, with the SDK never built, and a second
    GET is refused (409) as the SDK refuses it. A request only the SDK serves hands the session
    over; the client's stream stays open and carries the next change, from the SDK's side."""
    changed = "notifications/tools/list_changed"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with front(tmp_path, toolsets={"echoes": ["fl.echo"]}) as (sup, url), \
                httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
            session = Session(http, url)
            await session.open()
            await session.tools()
            listen = {**session.headers, "accept": "text/event-stream"}
            async with http.stream("GET", url, headers=listen) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"] == "text/event-stream"
                assert stream.headers["mcpvisor-path"] == "own"
                second = await http.get(url, headers=listen)
                assert second.status_code == 409
                assert "Only one SSE stream" in second.json()["error"]["message"]
                lines = stream.aiter_lines()
                await sup.equip("echoes")
                heard = await _next_message(lines)
                assert heard is not None
                assert heard[0] is not None  # numbered, for a client that comes back
                assert heard[1]["method"] == changed
                assert sup.front.sdk_built is False

                moved = await session.ask(9, "logging/setLevel", {"level": "info"})
                assert _answer(moved)["result"] == {}
                assert sup.front.sdk_built is True  # the session is the SDK's now
                await sup.unequip()
                heard = await _next_message(lines)
                assert heard is not None
                assert heard[1]["method"] == changed
                still = await http.get(url, headers=listen)  # the SDK's transport holds it now
                assert still.status_code == 409


FILESYSTEM: Final = Path(__file__).parents[1] / "npm-filesystem/node_modules/.bin/mcp-server-filesystem"
"""The reference filesystem server (pinned, installed by tests/setup.sh): started without a
directory, it asks its client's roots as it starts and serves those."""


async def test_a_server_starting_asks_the_roots_of_a_session_the_front_opened(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server that asks the client's roots as it starts (outside any call), added by a
    reload while a client that declared roots holds its session's notification stream: the
    question comes on that stream, the client's answer (a POST) reaches the server, which
    then serves that root, with the SDK never built."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note.txt").write_text("from the client's root")
    applied = trio.Event()
    outcome: list[str] = []

    class Applied(logging.Handler):
        """Sets ``applied`` at the server's own word of what came of its question (on its
        stderr, which the proxy logs): its directories updated, or its failure to ask."""

        def emit(self, record: logging.LogRecord) -> None:
            line = record.getMessage()
            if "allowed directories from MCP roots" in line or "Failed to request" in line:
                outcome.append(line)
                applied.set()

    watch = Applied()
    caplog.set_level(logging.INFO, logger="mcpvisor.upstream.fs")  # the proxy logs a server's stderr at INFO
    logging.getLogger("mcpvisor.upstream.fs").addHandler(watch)
    try:
        await _roots_asked_of_an_own_session(tmp_path, shared, applied)
        assert "Updated allowed directories from MCP roots: 1 valid" in outcome[0], outcome
    finally:
        logging.getLogger("mcpvisor.upstream.fs").removeHandler(watch)


async def _roots_asked_of_an_own_session(tmp_path: Path, shared: Path, applied: trio.Event) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with front(tmp_path) as (sup, url), httpx2.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
            session = Session(http, url)
            await session.open()  # declares roots (`_initialize`)
            await session.tools()
            listen = {**session.headers, "accept": "text/event-stream"}
            async with http.stream("GET", url, headers=listen) as stream:
                lines = stream.aiter_lines()
                write_config(tmp_path, {"fl": flaky(), "notes": NOTES, "fs": {"command": str(FILESYSTEM)}})
                assert (await sup.reload())["ok"]
                heard = await _next_message(lines)
                assert heard is not None
                question = heard[1]
                assert question["method"] == "roots/list"
                answer = {"jsonrpc": "2.0", "id": question["id"],
                          "result": {"roots": [{"uri": shared.as_uri(), "name": "shared"}]}}
                taken = await http.post(url, json=answer, headers=session.headers)
                assert taken.status_code == 202
                await applied.wait()
                while "fs_read_text_file" not in await session.names():
                    assert await _next_message(lines) is not None  # the next list change
                read = await session.ask(20, "tools/call", {"name": "fs_read_text_file",
                                                             "arguments": {"path": str(shared / "note.txt")}})
                assert "from the client's root" in json.dumps(_answer(read)["result"])
            assert sup.front.sdk_built is False
