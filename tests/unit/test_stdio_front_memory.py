"""The stdio front (actors/fronts/stdio.py) on memory streams, in virtual time.

What a client writes to the proxy's stdin is classified here before the SDK sees it:
malformed lines, batches, null and reused ids and oversized lines get the JSON-RPC error
the spec asks for and the connection keeps serving; the handshake gates the fast path;
EOF ends the connection and what it left in flight is cancelled upstream. The upstream
is a scripted `StdioLink` (tests/fakes/memory_front.py). A regression shows as a wrong
error code or id, a connection that stops answering, a call overtaking ``initialize``,
or a front that never returns after EOF.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from tests.fakes.memory_front import MAX_MESSAGE, open_memory_proxy

Clock = trio.testing.MockClock

BOUND_S = 3600.0
"""Virtual seconds any test here may take."""


def call(request_id: Any, tool: str = "s_echo", **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}


def text_result(t: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t}]}


@pytest.mark.parametrize("fast_path", [True, False], ids=["fastpath", "sdkpath"])
async def test_a_call_is_routed_either_way_and_answered_under_the_clients_id(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """With the fast path on or off (``settings.fastPath``), a call reaches the upstream
    under a proxy id with the tool's own name and its answer returns under the client's
    id: turning the path off changes cost, not behaviour. A regression shows as a
    different request upstream or reply to the client on one of the two paths."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            await p.client.handshake()
            await p.client.send(call(41, text="hi"))
            request = await p.server.receive()
            assert request["id"].startswith("mv-")
            assert request["params"]["name"] == "echo"
            assert request["params"]["arguments"] == {"text": "hi"}
            await p.server.answer(request, text_result("echo: hi"))
            reply = await p.client.receive_id(41)
            assert reply["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
            assert not reply["result"].get("isError")


async def test_malformed_lines_get_json_rpc_errors_and_the_front_keeps_serving(autojump_clock: Clock) -> None:
    """docs/reliability.md P1-P4, P7, P8: non-JSON -> -32700 with a null id; a batch -> -32600 with
    a null id; a null id -> -32600; ``"jsonrpc": "1.0"`` -> -32600 with its id; a request
    without a method, result or error -> -32600 with its id; a malformed notification ->
    nothing; an unknown method -> -32601 with its id. Then a call is served. A regression
    shows as a wrong code or id, a reply to the notification, or no answer at all."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            await c.send(b"{this is not json")
            reply = await c.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32700
            await c.send(b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]')
            reply = await c.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            await c.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
            reply = await c.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            await c.send({"jsonrpc": "1.0", "id": 6, "method": "ping"})
            reply = await c.receive()
            assert reply["id"] == 6
            assert reply["error"]["code"] == -32600
            await c.send({"jsonrpc": "2.0", "id": 7})
            reply = await c.receive()
            assert reply["id"] == 7
            assert reply["error"]["code"] == -32600
            await c.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": 12})
            await c.send({"jsonrpc": "2.0", "id": 8, "method": "no/such/method"})
            reply = await c.receive()
            assert reply["id"] == 8, reply
            assert reply["error"]["code"] == -32601, reply
            await c.send(call(9, text="still here"))
            request = await p.server.receive()
            await p.server.answer(request, text_result("echo: still here"))
            reply = await c.receive()
            assert reply["id"] == 9
            assert reply["result"]["content"][0]["text"] == "echo: still here"


async def test_an_id_in_flight_cannot_be_reused(autojump_clock: Clock) -> None:
    """docs/reliability.md P20: a request reusing the id of a call still in flight gets -32600
    under that id and is not forwarded; the first call still gets its own answer. A
    regression shows as the second request reaching the upstream or stealing the answer."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(call(8, "s_work"))
            request = await p.server.receive()
            await p.client.send(call(8, "s_echo"))
            reused = await p.client.receive()
            assert reused["id"] == 8
            assert reused["error"]["code"] == -32600
            assert "already in use" in reused["error"]["message"]
            await p.server.answer(request, text_result("first"))
            first = await p.client.receive()
            assert first["id"] == 8
            assert first["result"]["content"][0]["text"] == "first"
            await p.client.send(call(8, "s_echo"))  # free again once answered
            again = await p.server.receive()
            assert again["params"]["name"] == "echo"


async def test_an_oversized_line_is_refused_and_the_next_line_is_served(autojump_clock: Clock) -> None:
    """A line over the front's limit gets -32600 with a null id naming the limit, without
    being buffered whole; the valid line that follows it in the same write is served. A
    regression shows as no error, a lost next line, or a closed connection."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            huge = json.dumps(call(1, text="x" * (2 * MAX_MESSAGE))).encode()
            await p.client.send(huge + b"\n" + json.dumps(call(2, text="small")).encode())
            reply = await p.client.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            assert f"limit of {MAX_MESSAGE} bytes" in reply["error"]["message"]
            request = await p.server.receive()
            assert request["params"]["arguments"] == {"text": "small"}
            await p.server.answer(request, text_result("ok"))
            assert (await p.client.receive())["id"] == 2


async def test_a_pipelined_call_never_overtakes_the_initialize_reply(autojump_clock: Clock) -> None:
    """docs/hotpath.md "Init-gate bug": initialize, notifications/initialized and a tools/call in
    one write, the SDK slow to answer initialize (one virtual second, as on a loaded
    machine) and the upstream quick: the initialize reply is still the first line out,
    and the call is served. A regression shows as the call's reply coming first."""

    async def slow_initialize(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "initialize":
            await trio.sleep(1)
        return await call_next(ctx)

    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.front.server.middleware.append(slow_initialize)
            burst = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                call(2, text="x"),
            ]
            await p.client.send(b"\n".join(json.dumps(m).encode() for m in burst))
            request = await p.server.receive()
            await p.server.answer(request, text_result("x"))
            first = await p.client.receive()
            assert first["id"] == 1
            assert "result" in first
            assert "result" in await p.client.receive_id(2)


async def test_a_call_before_the_handshake_is_not_taken_by_the_fast_path(autojump_clock: Clock) -> None:
    """The fast path opens only after ``notifications/initialized``: a handshake-era call
    sent after ``initialize`` but before it goes to the SDK. A regression shows as the
    fast path owning the call (it could overtake the initialize reply)."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}}})
            await p.client.receive_id(1)
            await p.client.send(call(2, "s_work"))
            await p.server.receive()
            assert p.stdio.fast_path is not None
            assert not p.stdio.fast_path.owns(2)
            await p.client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await p.client.send(call(3, "s_work"))
            await p.server.receive()
            assert p.stdio.fast_path.owns(3)


async def test_eof_from_the_client_ends_the_front_and_cancels_what_it_left(autojump_clock: Clock) -> None:
    """The client closes its end with a call in flight: the front's ``serve`` returns at
    that instant and the upstream is told to cancel the orphaned call. A regression
    shows as a front that never returns or no cancel."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_work"))
            request = await p.server.receive()
            closed_at = trio.current_time()
            await p.client.close()
            await p.served.wait()
            assert trio.current_time() == closed_at
            cancel = await p.server.receive()
            assert cancel["method"] == "notifications/cancelled"
            assert cancel["params"]["requestId"] == request["id"]
