"""The stdio front answers a handshake-era client's handshake, pings and lists itself
(actors/fronts/stdio_own.py), on memory streams, in virtual time.

A connection that only does those and fast-path calls never starts the SDK's server;
the first message that needs it starts it with the client's handshake replayed first,
so the SDK serves the rest of the connection as if it had answered the handshake. A
regression shows as the SDK started for nothing, a request the SDK refuses as "not
initialized" after the takeover, a list change heard twice, or a server's request
outside any call that never reaches the client.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
import trio.testing

from mcpvisor.actors.core.registry import Changes
from tests.fakes.memory_front import open_memory_proxy, request

Clock = trio.testing.MockClock

BOUND_S = 3600.0
"""Virtual seconds any test here may take."""
LOAD_WAIT_S = 20.0
"""Real seconds the stand-in for the SDK's import waits for the test at most."""


async def test_handshake_pings_lists_and_calls_never_start_the_sdk(autojump_clock: Clock) -> None:
    """``initialize`` (the version a client asks for, or the latest handshake one), ``ping``,
    the four lists (a cursor reads the whole list) and a fast-path call are all answered
    with the SDK's server never started for the connection."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.send(request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                   "clientInfo": {"name": "raw", "version": "1"}}))
            init = (await c.receive_id(0))["result"]
            assert init["protocolVersion"] == "2025-06-18"
            assert init["serverInfo"]["name"] == "mcpvisor"
            assert init["capabilities"]["tools"] == {"listChanged": True}
            assert init == {**p.front.initialize_result(), "protocolVersion": "2025-06-18"}
            await c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await c.send(request(1, "ping"))
            assert (await c.receive_id(1))["result"] == {}
            await c.send(request(2, "tools/list", {"cursor": "anything"}))
            tools = (await c.receive_id(2))["result"]
            assert [t["name"] for t in tools["tools"]] == ["s_echo", "s_work"]
            assert set(tools) == {"tools"}  # no resultType, ttlMs or cacheScope on this era
            for n, (method, key) in enumerate((("resources/list", "resources"),
                                               ("resources/templates/list", "resourceTemplates"),
                                               ("prompts/list", "prompts")), start=3):
                await c.send(request(n, method))
                assert (await c.receive_id(n))["result"] == {key: []}
            await c.send(request(6, "tools/call", {"name": "s_echo", "arguments": {"text": "x"}}))
            upstream = await p.server.receive()
            await p.server.answer(upstream, {"content": [{"type": "text", "text": "x"}]})
            assert (await c.receive_id(6))["result"]["content"][0]["text"] == "x"
            assert not p.stdio.statistics().sdk_started



async def test_a_version_no_era_knows_gets_the_latest_handshake_version(autojump_clock: Clock) -> None:
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.send(request(0, "initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                                          "clientInfo": {"name": "raw", "version": "1"}}))
            assert (await p.client.receive_id(0))["result"]["protocolVersion"] == "2025-11-25"
            assert not p.stdio.statistics().sdk_started


async def test_the_first_message_the_sdk_needs_starts_it_initialized(autojump_clock: Clock) -> None:
    """``logging/setLevel`` needs the SDK: it starts, reads the replayed handshake, and
    answers the request (the SDK refuses it with "Invalid request parameters" on a
    connection it thinks is not initialized); its answer to the replay never reaches
    the client; the level the client set is the one upstreams are asked for."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            assert not p.stdio.statistics().sdk_started
            await c.send(request(1, "logging/setLevel", {"level": "debug"}))
            reply = await c.receive()  # the very next frame: nothing of the replay before it
            assert reply == {"jsonrpc": "2.0", "id": 1, "result": {}}, reply
            assert p.stdio.statistics().sdk_started
            assert p.front.log_level == "debug"
            await c.send(request(2, "tools/list"))  # and the lists stay answered as before
            assert [t["name"] for t in (await c.receive_id(2))["result"]["tools"]] == ["s_echo", "s_work"]


async def test_a_list_change_is_heard_once_before_and_after_the_sdk_takes_over(autojump_clock: Clock) -> None:
    """The client is tracked from its ``initialize`` on; once the SDK serves the connection
    too, its connection shares that client's state, so each change is announced once."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            for round_ in range(2):
                if round_:
                    await c.send(request(10, "logging/setLevel", {"level": "info"}))
                    await c.receive_id(10)
                    assert p.stdio.statistics().sdk_started
                p.front.announce(p.backend.router.snapshot, Changes(tools=True))
                heard = await c.receive()
                assert heard["method"] == "notifications/tools/list_changed"
                await c.send(request(20 + round_, "ping"))
                after = await c.receive()  # the ping's answer, not a second copy of the change
                assert after.get("id") == 20 + round_, after
            assert len(p.front.clients) == 1


async def test_a_servers_request_outside_any_call_reaches_the_client_without_the_sdk(
    autojump_clock: Clock,
) -> None:
    """An upstream's ``roots/list`` outside any call (the registry's fallback origin, e.g. a
    filesystem server asking as it starts) goes to the client that declared roots and the
    client's answer comes back, the SDK never started."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake(capabilities={"roots": {"listChanged": True}})
            origin = p.front.fallback_origin("roots/list")
            assert origin is not None
            answer: dict[str, Any] = {}
            answered = trio.Event()

            async def ask() -> None:
                answer.update(await origin.server_request("roots/list", None))
                answered.set()

            p.nursery.start_soon(ask)
            asked = await c.receive()
            assert asked["method"] == "roots/list"
            await c.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": [{"uri": "file:///w"}]}})
            await answered.wait()
            assert answer == {"roots": [{"uri": "file:///w"}]}
            assert not p.stdio.statistics().sdk_started


async def test_with_the_fast_path_off_the_sdk_serves_from_the_start(autojump_clock: Clock) -> None:
    """``settings.fastPath: false`` keeps the SDK path for everything, handshake included."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=False) as p:
            await p.client.handshake()
            assert p.stdio.statistics().sdk_started
            await p.client.send(request(1, "ping"))
            assert (await p.client.receive_id(1))["result"] == {}


async def test_while_the_sdk_loads_answers_to_calls_in_flight_still_reach_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first message that needs the SDK has it imported in a worker thread: a call in
    flight meanwhile is answered while the import is still running (inline, the import
    froze the whole proxy for its 0.4-0.6 s), and the message is answered once it is done.
    The import is stood in for by one that runs until the test lets it finish (real time:
    a worker thread does not run on trio's virtual clock)."""
    from mcpvisor.actors.fronts import sdk_load, stdio

    loading, may_finish, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_import() -> None:
        loading.set()
        may_finish.wait(LOAD_WAIT_S)
        finished.set()

    monkeypatch.setattr(sdk_load, "import_sdk", slow_import)
    for module in (sdk_load, stdio):
        monkeypatch.setattr(module, "sdk_loaded", finished.is_set)
    with trio.fail_after(LOAD_WAIT_S / 2):
        async with open_memory_proxy() as p:
            c = p.client
            await c.handshake()
            await c.send(request(1, "tools/call", {"name": "s_echo", "arguments": {"text": "in flight"}}))
            upstream = await p.server.receive()
            await c.send(request(2, "logging/setLevel", {"level": "debug"}))
            await trio.to_thread.run_sync(loading.wait)
            await p.server.answer(upstream, {"content": [{"type": "text", "text": "in flight"}]})
            answered = await c.receive_id(1)
            assert not finished.is_set()  # answered while the SDK was still loading
            assert answered["result"]["content"][0]["text"] == "in flight"
            may_finish.set()
            assert await c.receive_id(2) == {"jsonrpc": "2.0", "id": 2, "result": {}}


ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
"""The per-request envelope of a 2026-07-28 client."""


def modern(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return request(request_id, method, {**(params or {}), "_meta": ENVELOPE})


async def test_a_2026_07_28_client_is_served_its_discover_lists_and_calls_without_the_sdk(
    autojump_clock: Clock,
) -> None:
    """``server/discover``, the four lists (stamped as the SDK stamps that era's results:
    ``resultType``, the freshness hints, the proxy's serverInfo) and a fast-path call, the
    SDK's server never started; then a handshake on that connection is refused as the SDK
    refuses it on a 2026-07-28 connection (the SDK, started for it, was told the era first)."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            stamp = {"io.modelcontextprotocol/serverInfo": p.front.server_info_stamp}
            await c.send(modern(1, "server/discover"))
            discover = (await c.receive_id(1))["result"]
            init = p.front.initialize_result()
            instructions = {"instructions": init["instructions"]} if "instructions" in init else {}
            assert discover == {"supportedVersions": ["2026-07-28"], "capabilities": init["capabilities"],
                                **instructions, "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                                "_meta": stamp}
            await c.send(modern(2, "tools/list", {"cursor": "c"}))
            tools = (await c.receive_id(2))["result"]
            assert [t["name"] for t in tools.pop("tools")] == ["s_echo", "s_work"]
            assert tools == {"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "_meta": stamp}
            for n, (method, key) in enumerate((("resources/list", "resources"),
                                               ("resources/templates/list", "resourceTemplates"),
                                               ("prompts/list", "prompts")), start=3):
                await c.send(modern(n, method))
                assert (await c.receive_id(n))["result"][key] == []
            await call_then_refused_handshake(p, 6)


async def call_then_refused_handshake(p: Any, rid: int) -> None:
    """A 2026-07-28 call (id ``rid``) served without the SDK, then a handshake (``rid + 1``)
    refused as the SDK refuses it on a connection of that era (the SDK started for it)."""
    c = p.client
    await c.send(modern(rid, "tools/call", {"name": "s_echo", "arguments": {"text": "x"}}))
    upstream = await p.server.receive()
    await p.server.answer(upstream, {"content": [{"type": "text", "text": "x"}]})
    assert (await c.receive_id(rid))["result"]["content"][0]["text"] == "x"
    assert not p.stdio.statistics().sdk_started
    await c.send(request(rid + 1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                 "clientInfo": {"name": "raw", "version": "1"}}))
    refused = await c.receive_id(rid + 1)
    assert refused["error"]["code"] == -32022, refused  # UNSUPPORTED_PROTOCOL_VERSION
    assert p.stdio.statistics().sdk_started


async def test_a_2026_07_28_call_as_the_first_request_makes_a_later_handshake_refused(
    autojump_clock: Clock,
) -> None:
    """A 2026-07-28 client whose first request is a call (the fast path's) is of that era
    as one that listed first: a handshake after it is refused as the SDK refuses it."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await call_then_refused_handshake(p, 1)


async def test_a_request_the_envelope_checks_refuse_or_the_other_era_is_the_sdks(
    autojump_clock: Clock,
) -> None:
    """A 2026-07-28 request missing the client's capabilities, or asking an unserved version,
    gets the SDK's own error; on a connection that did the handshake a 2026-07-28 list is the
    SDK's to refuse (INVALID_REQUEST), as before."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c = p.client
            no_caps = {k: v for k, v in ENVELOPE.items() if not k.endswith("clientCapabilities")}
            await c.send(request(1, "tools/list", {"_meta": no_caps}))
            assert (await c.receive_id(1))["error"]["code"] == -32602  # INVALID_PARAMS
            unserved = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
            await c.send(request(2, "tools/list", {"_meta": unserved}))
            assert (await c.receive_id(2))["error"]["code"] == -32022
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(modern(3, "tools/list"))
            assert (await p.client.receive_id(3))["error"]["code"] == -32600  # INVALID_REQUEST
