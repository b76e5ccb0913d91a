"""The HTTP front's own ``tools/call`` path (`mcpvisor.actors.fronts.http_fast`) does what the
SDK path did, and is the path taken.

A real ``mcpvisor serve --transport http`` subprocess in front of the stdio ``everything``
fixture (recording what it is sent); a raw HTTP client (httpx), so each check sees the wire.
Every answer served by the fast path carries ``mcpvisor-path: fast``; with
``settings.fastPath: false`` none does and the answers are the same.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from mcpvisor.actors.fronts.limits import MAX_IN_FLIGHT
from tests.helpers import REAL_IO_BOUND_S, everything, write_config
from tests.integration.test_http_resume import Event, read_until, sse_events
from tests.polling import poll_until
from tests.security.proxy import HTTP_HEADERS, INIT, Proxy, running_proxy

pytestmark = pytest.mark.slow

TOKEN: Final = "lead-" + "a" * 40
CI_TOKEN: Final = "ci-" + "b" * 40
FAST: Final = "fast"


@asynccontextmanager
async def proxy(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Proxy, Path]]:
    """The proxy with one recording everything fixture, toolset ``dev`` (its echo), a plain
    token and a token bound to ``dev``; and the fixture's record file."""
    record = tmp_path / "record.jsonl"
    config = write_config(tmp_path, {"ev": everything("--record", str(record))},
                          toolsets={"dev": ["ev.echo"]},
                          authTokens={"lead": TOKEN, "ci": {"token": CI_TOKEN, "toolset": "dev"}}, **settings)
    env = {"MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    async with running_proxy(config, "--transport", "http", "--port", "0", env=env) as running:
        yield running, record


def recorded(record: Path, event: str) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    lines = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    return [e for e in lines if e.get("event") == event]


async def open_session(http: httpx2.AsyncClient, url: str, token: str = TOKEN,
                       capabilities: dict[str, Any] | None = None) -> dict[str, str]:
    auth = {**HTTP_HEADERS, "Authorization": f"Bearer {token}"}
    init = {**INIT, "params": {**INIT["params"], "capabilities": capabilities or {}}}  # type: ignore[dict-item]
    r = await http.post(url, json=init, headers=auth)
    assert r.status_code == 200, r.text
    headers = {**auth, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    r = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202, r.text
    return headers


def call(rid: int, name: str, arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, **params}}


def modern(frame: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``frame`` as a 2026-07-28 request, and its headers (with the token)."""
    meta = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
            CLIENT_CAPABILITIES_META_KEY: {}}
    frame = {**frame, "params": {**frame["params"], "_meta": meta}}
    headers = {**HTTP_HEADERS, "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": frame["params"]["name"]}
    return frame, headers


async def until(events: AsyncGenerator[Event, None], stop: Callable[[Event], bool]) -> Event:
    """The first event of ``events`` that ``stop`` accepts (the stream stays open)."""
    async for event in events:
        if stop(event):
            return event
    raise AssertionError("the stream ended first")


def messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, or the one of a JSON body (a quick answer)."""
    if body.lstrip().startswith("{"):
        return [json.loads(body)]
    return [json.loads(line[5:]) for line in body.splitlines()
            if line.startswith("data:") and line[5:].strip()]


async def test_calls_in_both_eras_take_the_fast_path_with_progress_and_the_sdk_path_when_turned_off(
        tmp_path: Path) -> None:
    """A handshake-era call is answered on SSE (priming event, numbered events, progress
    before the result) and a 2026-07-28 one as JSON, both by the fast path; the same calls
    with ``fastPath: false`` get the same answers from the SDK."""
    with trio.fail_after(REAL_IO_BOUND_S):
        for fast_path in (True, False):
            async with proxy(tmp_path, fastPath=fast_path) as (running, _), \
                    httpx2.AsyncClient(timeout=60) as http:
                url = running.url
                headers = await open_session(http, url)
                r = await http.post(url, json=call(2, "ev_progress", {"steps": 3, "interval": 0.01},
                                                   _meta={"progressToken": "p"}), headers=headers)
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                assert (r.headers.get("mcpvisor-path") == FAST) is fast_path
                got = messages(r.text)
                assert [m["params"]["progress"] for m in got if m.get("method") == "notifications/progress"] \
                    == [1, 2, 3]
                assert all(m["params"]["progressToken"] == "p" for m in got if "method" in m)
                done = {"content": [{"type": "text", "text": "done 3"}], "isError": False}
                assert got[-1] == {"jsonrpc": "2.0", "id": 2, "result": done}
                assert r.text.startswith("id: ")  # the priming event: the stream can be resumed

                frame, modern_headers = modern(call(3, "ev_echo", {"text": "hi"}))
                r = await http.post(url, json=frame, headers=modern_headers)
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("application/json")
                assert (r.headers.get("mcpvisor-path") == FAST) is fast_path
                answer = r.json()
                assert answer["id"] == 3
                assert answer["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
                assert answer["result"]["resultType"] == "complete"


async def test_sampling_cancel_disconnect_views_and_refusals_on_the_fast_path(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(tmp_path) as (running, record), httpx2.AsyncClient(timeout=60) as http:
            url = running.url
            headers = await open_session(http, url, capabilities={"sampling": {}})

            # An upstream's sampling request reaches the client on the call's stream; its answer,
            # POSTed back, reaches the upstream, and the call's result follows.
            async with http.stream("POST", url, json=call(2, "ev_sample", {"prompt": "q"}),
                                   headers=headers) as r:
                assert r.headers["mcpvisor-path"] == FAST
                events = sse_events(r)
                question = (await until(events, lambda e: bool(e.data) and "method" in e.message())).message()
                assert question["method"] == "sampling/createMessage"
                answer = {"jsonrpc": "2.0", "id": question["id"],
                          "result": {"role": "assistant", "model": "m",
                                     "content": {"type": "text", "text": "forty-two"}}}
                posted = await http.post(url, json=answer, headers=headers)
                assert posted.status_code == 202
                assert posted.headers["mcpvisor-path"] == FAST
                last = await until(events, lambda e: bool(e.data) and e.message().get("id") == 2)
                await events.aclose()
            assert last.message()["result"]["content"][0]["text"] == "sampled: forty-two"

            # notifications/cancelled for a call in flight: 202, the upstream is told, no answer.
            sleep = call(3, "ev_sleep", {"seconds": 60})
            async with http.stream("POST", url, json=sleep, headers=headers) as r:
                assert r.headers["mcpvisor-path"] == FAST
                await poll_until(lambda: any(e["name"] == "sleep" for e in recorded(record, "call")))
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 3, "reason": "changed my mind"}}
                posted = await http.post(url, json=cancel, headers=headers)
                assert posted.status_code == 202
                assert posted.headers["mcpvisor-path"] == FAST
                left = [e for e in await read_until(r, lambda e: False) if e.data]
            assert left == []
            sleeps = [e["id"] for e in recorded(record, "call") if e["name"] == "sleep"]
            await poll_until(lambda: [e["requestId"] for e in recorded(record, "cancelled")] == sleeps)

            # A 2026-07-28 client that goes away mid-call has it cancelled upstream.
            frame, modern_headers = modern(call(4, "ev_sleep", {"seconds": 60}))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(http.post, url, json=frame, headers=modern_headers))
                await poll_until(lambda: len([e for e in recorded(record, "call")
                                              if e["name"] == "sleep"]) == 2)
                nursery.cancel_scope.cancel()  # the client goes away: its connection closes
            sleeps = [e["id"] for e in recorded(record, "call") if e["name"] == "sleep"]
            await poll_until(lambda: [e["requestId"] for e in recorded(record, "cancelled")] == sleeps)

            # A token bound to a toolset sees its view: its tool is served fast, a tool
            # outside it is unknown there (the fast path reads the plan from the view).
            bound = await open_session(http, url, token=CI_TOKEN)
            r = await http.post(url, json=call(5, "ev_echo", {"text": "v"}), headers=bound)
            assert r.headers["mcpvisor-path"] == FAST
            assert messages(r.text)[-1]["result"]["content"][0]["text"] == "echo: v"
            r = await http.post(url, json=call(6, "ev_add", {"a": 1, "b": 2}), headers=bound)
            result = messages(r.text)[-1]["result"]
            assert result["isError"] is True
            assert result["structuredContent"]["error"] == "unknown_tool"
            view = url.replace("/mcp", "/mcp/toolset/dev")
            r = await http.post(view, json=call(7, "ev_echo", {"text": "u"}), headers=headers)
            assert r.headers["mcpvisor-path"] == FAST
            assert messages(r.text)[-1]["result"]["content"][0]["text"] == "echo: u"

            # What the fast path must not take is refused by the SDK exactly as before.
            no_token = {k: v for k, v in headers.items() if k != "Authorization"}
            r = await http.post(url, json=call(8, "ev_echo", {"text": "x"}), headers=no_token)
            assert r.status_code == 401
            assert "mcpvisor-path" not in r.headers
            r = await http.post(url, json=call(9, "ev_echo", {"text": "x"}),
                                headers={**headers, "mcp-session-id": "no-such-session"})
            assert r.status_code == 404
            foreign = {**headers, "Host": "evil.test"}
            r = await http.post(url, json=call(10, "ev_echo", {"text": "x"}), headers=foreign)
            assert r.status_code == 421
            stolen = {**headers, "Authorization": f"Bearer {CI_TOKEN}"}  # another credential's session
            r = await http.post(url, json=call(11, "ev_echo", {"text": "x"}), headers=stolen)
            assert r.status_code == 404

            # The in-flight cap: the session's 65th call in flight is refused at once (-32003).
            async with trio.open_nursery() as nursery:
                for rid in range(100, 100 + MAX_IN_FLIGHT):
                    nursery.start_soon(partial(http.post, url, json=call(rid, "ev_sleep", {"seconds": 60}),
                                               headers=headers))
                await poll_until(lambda: len([e for e in recorded(record, "call")
                                              if e["name"] == "sleep"]) == 2 + MAX_IN_FLIGHT)
                r = await http.post(url, json=call(99, "ev_echo", {"text": "x"}), headers=headers)
                assert r.headers["mcpvisor-path"] == FAST
                refused = messages(r.text)[-1]
                assert refused["id"] == 99
                assert refused["error"]["code"] == -32003
                for rid in range(100, 100 + MAX_IN_FLIGHT):
                    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                              "params": {"requestId": rid}}
                    assert (await http.post(url, json=cancel, headers=headers)).status_code == 202
