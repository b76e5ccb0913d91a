"""A fast-path call to a server that is still starting waits for it (actors/fronts/fastwait.py),
on memory streams, in virtual time.

The call goes upstream the fast way once the server is up; while it waits its id is taken, a
client's cancel ends it unanswered, the client leaving ends it, and a server that fails to come
up hands it to the SDK's path. A regression shows as a call answered twice or never, a reused id
accepted, a cancelled call reaching its server, or the SDK loaded for a call that only waited.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from mcpvisor.actors.core.lifecycle import State
from tests.fakes.memory_front import MemoryProxy, open_memory_proxy

Clock = trio.testing.MockClock

BOUND_S = 3600.0
"""Virtual seconds any test here may take."""


def call(request_id: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "s_echo", "arguments": {"text": text}}}


def ping(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


async def call_while_starting(p: MemoryProxy, request_id: Any, text: str, ping_id: Any) -> None:
    """The server is starting; a call is sent, then a ping, answered first: the call waits."""
    p.upstream.set_state(State.STARTING)
    await p.client.send(call(request_id, text))
    await p.client.send(ping(ping_id))
    assert (await p.client.receive())["id"] == ping_id  # read in order: the call is waiting


async def test_a_call_waits_for_its_starting_server_then_goes_the_fast_way(autojump_clock: Clock) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            p.upstream.set_state(State.STARTING)
            await c.send(call(5, "early"))
            await c.send(call(5, "again"))  # the waiting call's id is taken
            refused = await c.receive()
            assert refused["id"] == 5
            assert refused["error"]["code"] == -32600, refused
            await trio.sleep(30)  # virtual: the call waits as long as the server starts
            p.upstream.set_state(State.READY)
            request = await p.server.receive()
            assert request["params"]["arguments"] == {"text": "early"}
            await p.server.answer(request, {"content": [{"type": "text", "text": "early"}]})
            assert (await c.receive_id(5))["result"]["content"][0]["text"] == "early"
            stats = p.stdio.statistics()
            assert not stats.sdk_started
            assert stats.sdk_tool_calls == 0


async def test_a_waiting_call_goes_once_its_servers_handshake_is_done_not_after_its_lists(
        autojump_clock: Clock) -> None:
    """A restarting server's handshake is done and its lists are still coming: the call that
    waited goes then, the fast way, and one made meanwhile goes at once, as a client of the
    server itself would call after its handshake; the server is not ready yet for either."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            await call_while_starting(p, 5, "waited", 6)
            p.upstream.handshake_done()
            request = await p.server.receive()
            assert request["params"]["arguments"] == {"text": "waited"}
            await c.send(call(7, "meanwhile"))
            second = await p.server.receive()
            assert second["params"]["arguments"] == {"text": "meanwhile"}
            for each in (request, second):
                text = each["params"]["arguments"]["text"]
                await p.server.answer(each, {"content": [{"type": "text", "text": text}]})
            assert (await c.receive_id(5))["result"]["content"][0]["text"] == "waited"
            assert (await c.receive_id(7))["result"]["content"][0]["text"] == "meanwhile"
            assert p.upstream.state is State.STARTING
            stats = p.stdio.statistics()
            assert not stats.sdk_started
            assert stats.sdk_tool_calls == 0


async def test_a_cancelled_waiting_call_is_never_sent_nor_answered(autojump_clock: Clock) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            p.upstream.set_state(State.STARTING)
            await c.send(call(6, "never"))
            await c.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}})
            await c.send(ping(7))
            assert (await c.receive()) == {"jsonrpc": "2.0", "id": 7, "result": {}}  # nothing for 6
            p.upstream.set_state(State.READY)
            await c.send(call(8, "after"))
            request = await p.server.receive()  # the first call the server sees is the later one
            assert request["params"]["arguments"] == {"text": "after"}
            await p.server.answer(request, {"content": [{"type": "text", "text": "after"}]})
            assert (await c.receive())["id"] == 8


async def test_a_server_that_does_not_come_up_gets_the_sdk_paths_error(autojump_clock: Clock) -> None:
    """Answered here with the SDK path's words and data, the SDK never started for it."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            await call_while_starting(p, 9, "never", 15)
            p.upstream.set_state(State.CIRCUIT_OPEN)
            answer = await c.receive_id(9)
            assert answer["error"]["message"] == "server s is circuit open (it failed to start)", answer
            assert answer["error"]["data"]["state"] == "circuit_open"
            assert not p.stdio.statistics().sdk_started


async def test_a_call_whose_server_comes_up_while_the_proxy_drains_is_the_sdks_to_refuse(
    autojump_clock: Clock,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            await call_while_starting(p, 13, "late", 14)
            p.nursery.start_soon(p.front.drain.run, 600.0)
            await trio.sleep(1)  # virtual: the drain has begun
            p.upstream.set_state(State.READY)  # too late: no new work goes upstream
            answer = await c.receive_id(13)
            assert "shutting down" in answer["error"]["message"], answer
            assert p.stdio.statistics().sdk_tool_calls == 1  # handed to the SDK's path


async def test_the_client_leaving_ends_its_waiting_calls(autojump_clock: Clock) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            p.upstream.set_state(State.STARTING)
            await p.client.send(call(10, "orphan"))
            await p.client.close()
            await p.served.wait()  # the connection ended though its call was still waiting
            assert p.stdio.statistics().fast_in_flight == 0


async def test_the_drain_answers_a_call_still_waiting_for_its_server(autojump_clock: Clock) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await call_while_starting(p, 11, "stopping", 12)
            stats = await p.front.drain.run(grace=1.0)
            answer = await p.client.receive_id(11)
            assert "shutting down" in answer["error"]["message"], answer
            assert stats.forced == 1
