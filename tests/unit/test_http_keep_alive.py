"""The HTTP fast path keeps a long, silent SSE answer alive as the SDK's own SSE answers do.

One POSTed ``tools/call`` (`HttpExchange`, as `HttpFast` makes it per request) routes a real
call through the production fast path and `StdioLink` to a scripted upstream
(tests/fakes/memory_front.py) and writes its ASGI messages to the test, each stamped with
the virtual time it was written (trio's autojump clock makes the minutes free).

A regression shows as a silent stream with nothing written for `KEEP_ALIVE_S` (a client or
load balancer with an idle timeout cuts the call), a comment the SDK's clients would not
skip, a comment on a JSON answer or before a 2026-07-28 call's answer is known to be SSE,
or comments that keep coming while the stream talks or after the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, cast

import pytest
import trio
import trio.testing
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from sse_starlette import EventSourceResponse, ServerSentEvent

from mcpvisor.actors import wire
from mcpvisor.actors.fronts.asgi import Message
from mcpvisor.actors.fronts.frames import decode_client_frame
from mcpvisor.actors.fronts.http_exchange import HttpExchange, HttpSession
from mcpvisor.actors.fronts.http_fast import HttpFast
from mcpvisor.actors.fronts.http_keep_alive import KEEP_ALIVE_S, KEEP_ALIVE_TICK_S
from tests.fakes.memory_front import MemoryProxy, ScriptedServer, open_memory_proxy

Clock = trio.testing.MockClock

BOUND_S: Final = 3600.0
"""Virtual seconds any test here may take."""

CALL_TIMEOUT_S: Final = 60.0
"""The upstream's inactivity timeout here (the default): longer than the silences tested."""

PING: Final = re.compile(rb": ping - (\S+ \S+\+00:00)\r\n\r\n")
"""sse_starlette's keep-alive comment: ``ping - `` and the UTC time, as one SSE comment."""


class Response:
    """The ASGI messages one request's answer is written as, with their virtual times."""

    def __init__(self, *, gone_by_ping: bool = False) -> None:
        self._in, self._out = trio.open_memory_channel[tuple[float, Message]](64)
        self.gone_by_ping = gone_by_ping
        """The client has gone by the first ping: writing it fails (as a server's send does
        on a closed connection)."""

    async def send(self, message: Message) -> None:
        if self.gone_by_ping and is_ping(message):
            raise trio.BrokenResourceError("the client closed the connection")
        await self._in.send((trio.current_time(), message))

    async def next(self) -> tuple[float, Message]:
        return await self._out.receive()

    def written_since(self) -> list[Message]:
        """What was written and not yet read (without waiting)."""
        found = []
        while True:
            try:
                found.append(self._out.receive_nowait()[1])
            except trio.WouldBlock:
                return found


def fast_layer(p: MemoryProxy) -> HttpFast:
    """The HTTP fast path over the memory proxy's front (what an exchange reads of it: the
    front, its backend and nursery; no SDK app, session store or checks are reached here)."""
    none = cast(Any, None)
    return HttpFast(none, p.front, sdk=none, own=None, rules=none, verifier=None, required_scopes=(),
                    views=None, guard=none, nursery=p.nursery, max_body=1 << 20, anonymous="")


@asynccontextmanager
async def posted(p: MemoryProxy, frame: dict[str, Any], *, modern: bool,
                 response: Response | None = None) -> AsyncIterator[Response]:
    """``frame`` POSTed to the fast path; its answer as written, until the request ends."""
    body = json.dumps(frame).encode()
    env = decode_client_frame(body)
    assert isinstance(env, wire.Envelope)
    session = None if modern else HttpSession("session-1", {})
    response = response or Response()
    exchange = HttpExchange(fast_layer(p), response.send, session, modern, None, None, None, "1")
    assert await exchange.client_request(env, body)
    never = trio.Event()  # the client stays connected

    async def receive() -> Message:
        await never.wait()
        return {"type": "http.disconnect"}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(exchange.wait, receive)
        yield response


def call(rid: int, *, modern: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"progressToken": "p"}
    if modern:
        meta |= {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {},
                 CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "s_work", "arguments": {}, "_meta": meta}}


async def progress(server: ScriptedServer, request: dict[str, Any], n: int) -> None:
    token = request["params"]["_meta"]["progressToken"]
    await server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": token, "progress": n}})


def after_silence(at: float, since: float) -> bool:
    """``at`` is when a ping is due after a write at ``since``: past `KEEP_ALIVE_S` of
    silence, by no more than the keep-alive timer's step."""
    return since + KEEP_ALIVE_S < at <= since + KEEP_ALIVE_S + KEEP_ALIVE_TICK_S + 1e-9


def is_ping(message: Message) -> bool:
    body = message.get("body", b"")
    return message["type"] == "http.response.body" and PING.fullmatch(body) is not None


def sse_data(message: Message) -> dict[str, Any]:
    body: bytes = message["body"]
    assert body.startswith(b"event: message\r\ndata: "), body
    parsed: dict[str, Any] = json.loads(body.split(b"data: ", 1)[1])
    return parsed


def test_the_interval_is_the_sdk_paths() -> None:
    """The SDK's SSE answers ping at sse_starlette's default (the SDK passes no ``ping=``)."""
    assert KEEP_ALIVE_S == EventSourceResponse.DEFAULT_PING_INTERVAL


async def test_a_silent_handshake_era_call_gets_the_sdks_ping_every_interval_of_silence(
    autojump_clock: Clock,
) -> None:
    """A call that says nothing for 40 s: its SSE stream carries a ping comment each
    `KEEP_ALIVE_S` of silence, byte for byte what sse_starlette writes; a progress event
    restarts the count; the answer ends the stream and nothing follows it."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.upstream.spec.timeout = CALL_TIMEOUT_S
            async with posted(p, call(1, modern=False), modern=False) as response:
                request = await p.server.receive()
                opened_at, start = await response.next()
                assert start["type"] == "http.response.start"
                assert (b"content-type", b"text/event-stream") in start["headers"]

                pings = []
                for _ in range(2):
                    at, message = await response.next()
                    assert is_ping(message), message
                    assert message["more_body"] is True
                    pings.append(at)
                assert after_silence(pings[0], opened_at)
                assert pings[1] - pings[0] == pytest.approx(KEEP_ALIVE_S)  # every interval while silent
                comment = PING.fullmatch(message["body"])
                assert comment is not None
                sdk_bytes = ServerSentEvent(comment=f"ping - {comment[1].decode()}", sep="\r\n").encode()
                assert message["body"] == sdk_bytes

                await trio.sleep(KEEP_ALIVE_S - 4.5)  # 10.5 s into the third silence, the call talks
                await progress(p.server, request, 1)
                said_at, message = await response.next()
                assert sse_data(message)["method"] == "notifications/progress"
                at, message = await response.next()
                assert is_ping(message), message
                assert after_silence(at, said_at)  # from the last write, not the last ping

                await p.server.answer(request, {"content": [{"type": "text", "text": "done"}]})
                _, message = await response.next()
                assert sse_data(message)["id"] == 1
                assert message["more_body"] is False
            await trio.sleep(3 * KEEP_ALIVE_S)
            assert response.written_since() == []


async def test_a_2026_call_answered_as_json_gets_no_ping_however_long_it_is_silent(
    autojump_clock: Clock,
) -> None:
    """A 2026-07-28 call is answered as JSON unless it sends something first, so nothing
    can be written while it is silent: 45 s of silence, then one JSON answer, no comment."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.upstream.spec.timeout = CALL_TIMEOUT_S
            async with posted(p, call(1, modern=True), modern=True) as response:
                request = await p.server.receive()
                await trio.sleep(3 * KEEP_ALIVE_S)
                assert response.written_since() == []
                await p.server.answer(request, {"content": [{"type": "text", "text": "done"}]})
                _, start = await response.next()
                assert start["type"] == "http.response.start"
                assert (b"content-type", b"application/json") in start["headers"]
                _, message = await response.next()
                assert json.loads(message["body"])["id"] == 1
                assert not message.get("more_body", False)
            assert response.written_since() == []


async def test_a_2026_call_that_streams_first_is_kept_alive_once_its_sse_is_open(
    autojump_clock: Clock,
) -> None:
    """A 2026-07-28 call whose progress comes first is answered on SSE; from then on its
    silences are pinged as a handshake-era call's are."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.upstream.spec.timeout = CALL_TIMEOUT_S
            async with posted(p, call(1, modern=True), modern=True) as response:
                request = await p.server.receive()
                await trio.sleep(KEEP_ALIVE_S + 5)
                assert response.written_since() == []  # not yet known to be SSE
                await progress(p.server, request, 1)
                _, start = await response.next()
                assert (b"content-type", b"text/event-stream") in start["headers"]
                said_at, message = await response.next()
                assert sse_data(message)["method"] == "notifications/progress"
                at, message = await response.next()
                assert is_ping(message), message
                assert after_silence(at, said_at)
                await p.server.answer(request, {"content": [{"type": "text", "text": "done"}]})
                _, message = await response.next()
                assert sse_data(message)["id"] == 1
                assert message["more_body"] is False


async def test_a_client_found_gone_by_the_ping_has_its_call_cancelled_upstream(autojump_clock: Clock) -> None:
    """The ping is also how a silent call learns that its client has gone: the write fails,
    the upstream gets ``notifications/cancelled`` for the call then (not at the call's own
    end), and the request ends."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.upstream.spec.timeout = CALL_TIMEOUT_S
            gone = Response(gone_by_ping=True)
            async with posted(p, call(1, modern=False), modern=False, response=gone):
                request = await p.server.receive()
                opened_at, _ = await gone.next()
                cancel = await p.server.receive_method("notifications/cancelled")
                assert cancel["params"]["requestId"] == request["id"]
                assert after_silence(trio.current_time(), opened_at)
            assert gone.written_since() == []
