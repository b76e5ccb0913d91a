"""SSE on the HTTP front behaves as the SDK's own server: a priming event with ``retry``,
numbered events, and a client whose stream breaks mid-call comes back with
``Last-Event-ID`` and gets the rest of it.

A real ``mcpvisor serve --transport http`` subprocess in front of the stdio ``everything``
fixture; the client is raw HTTP (httpx) so the test sees the SSE wire itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, everything, write_config
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy

pytestmark = pytest.mark.slow

STEPS: Final = 4
CALL_ID: Final = 7


@dataclass
class Event:
    id: str | None
    data: str
    retry: int | None

    def message(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.data)
        return decoded


async def sse_events(response: httpx2.Response) -> AsyncGenerator[Event, None]:
    """The events of an SSE body, as they arrive."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if fields or data:
                retry = fields.get("retry")
                yield Event(fields.get("id"), "\n".join(data), int(retry) if retry else None)
            fields, data = {}, []
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name:
            fields[name] = value


async def read_until(response: httpx2.Response, stop: Callable[[Event], bool]) -> list[Event]:
    """The events of an SSE body up to the first one ``stop`` accepts, or to its end."""
    events: list[Event] = []
    async with aclosing(sse_events(response)) as stream:
        async for event in stream:
            events.append(event)
            if stop(event):
                break
    return events


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize a handshake-era session; the headers its later requests carry."""
    r = await http.post(url, json=INIT, headers=HTTP_HEADERS)
    assert r.status_code == 200, r.text
    headers = {**HTTP_HEADERS, "mcp-session-id": r.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-11-25"}
    r = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202, r.text
    return headers


def progress_call() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": CALL_ID, "method": "tools/call",
            "params": {"name": "ev_progress", "arguments": {"steps": STEPS, "interval": 0.2},
                       "_meta": {"progressToken": "p"}}}


def progress_of(event: Event) -> int | None:
    message = event.message()
    if message.get("method") == "notifications/progress":
        return int(message["params"]["progress"])
    return None


async def test_a_client_whose_stream_breaks_mid_call_resumes_and_gets_the_rest(tmp_path: Path) -> None:
    """The POST's stream opens with a priming event (an id, no data, ``retry``); the client
    reads the first progress notification and drops the connection; its GET with
    ``Last-Event-ID`` brings every later progress step and the result, in order, each once."""
    config = write_config(tmp_path, {"ev": everything()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0") as proxy, \
                httpx2.AsyncClient(timeout=60) as http:
            headers = await open_session(http, proxy.url)
            async with http.stream("POST", proxy.url, json=progress_call(), headers=headers) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                # The stream breaks after the first progress step: the client closes it mid-call.
                before = await read_until(r, lambda e: bool(e.data) and progress_of(e) == 1)
            priming = before[0]
            assert priming.id
            assert priming.data == ""
            assert priming.retry is not None
            assert priming.retry > 0
            last = before[-1]
            assert last.id is not None

            resume = {**headers, "Accept": "text/event-stream", "Last-Event-ID": last.id}
            async with http.stream("GET", proxy.url, headers=resume) as r:
                assert r.status_code == 200
                after = await read_until(r, lambda e: bool(e.data) and e.message().get("id") == CALL_ID)
            messages = [e for e in after if e.data]
            steps = [p for p in map(progress_of, messages) if p is not None]
            assert steps == list(range(2, STEPS + 1)), f"progress after the break: {steps}"
            result = messages[-1].message()
            assert result["id"] == CALL_ID
            assert result["result"]["content"][0]["text"] == f"done {STEPS}"
            numbered = [int(e.id) for e in messages if e.id is not None]
            assert len(numbered) == len(messages)
            assert numbered == sorted(numbered)
            assert numbered[0] > int(last.id)


async def test_a_session_cannot_replay_another_sessions_events(tmp_path: Path) -> None:
    """Event ids are per session: a second client naming the first one's event id gets
    nothing of the first one's call (its own stream ends empty)."""
    config = write_config(tmp_path, {"ev": everything()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0") as proxy, \
                httpx2.AsyncClient(timeout=60) as http:
            first = await open_session(http, proxy.url)
            async with http.stream("POST", proxy.url, json=progress_call(), headers=first) as r:
                events = await read_until(r, lambda e: False)
            assert events[-1].message()["id"] == CALL_ID  # the first session got its whole call
            second = await open_session(http, proxy.url)
            stolen = {**second, "Accept": "text/event-stream", "Last-Event-ID": events[0].id or ""}
            async with http.stream("GET", proxy.url, headers=stolen) as r:
                replayed = [event for event in await read_until(r, lambda e: False) if event.data]
            assert replayed == []
