"""The shared front (actors/fronts/front.py) builds the SDK's server only when something needs it.

A stdio client that does its handshake, pings, the four lists and fast-path calls, and
hears list changes and log messages, is served with the SDK's server never built; the
first message only the SDK can serve builds it and is answered as it always was, the
middleware appended before then included. What the front answers a handshake with by
itself is, key for key, what the SDK's server answers. A regression shows as the SDK
built for nothing, an ``initialize`` answer that differs by who gave it, or a request
after the takeover that misses the metrics' middleware.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

import msgspec
import pytest
import trio
import trio.testing
from mcp_types import Implementation, InitializeResult
from mcp_types.methods import serialize_server_result

from mcpvisor.actors.core.registry import Changes
from mcpvisor.actors.eras import LATEST_HANDSHAKE_VERSION
from mcpvisor.actors.fronts.front import Front
from tests.fakes.memory_front import RawClient, open_memory_proxy, request

Clock = trio.testing.MockClock

ROOT: Final = Path(__file__).resolve().parents[2]

BOUND_S = 3600.0
"""Virtual seconds any test here may take."""


def sdk_initialize_result(front: Front) -> dict[str, Any]:
    """What the SDK computes for ``initialize`` (but its protocolVersion) from the options of
    the server the front built: its own model, dumped and shaped for the handshake era."""
    opts = front.init_options
    result = InitializeResult(
        protocol_version=LATEST_HANDSHAKE_VERSION, capabilities=opts.capabilities,
        server_info=Implementation(name=opts.server_name, title=opts.title, description=opts.description,
                                   version=opts.server_version, website_url=opts.website_url,
                                   icons=opts.icons),
        instructions=opts.instructions,
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    shaped: dict[str, Any] = serialize_server_result("initialize", LATEST_HANDSHAKE_VERSION, result)
    del shaped["protocolVersion"]
    return shaped


@pytest.mark.parametrize(("version", "instructions"), [("", None), ("1.2.3", "Call discover_tool first.")])
def test_the_fronts_own_handshake_answer_is_the_sdks(version: str, instructions: str | None) -> None:
    """``initialize_result`` and ``server_info_stamp`` come from the front's own constants,
    before any SDK server exists, and equal what the SDK's server computes once built."""
    front = Front(SimpleNamespace(), version=version, instructions=instructions)
    own, stamp = front.initialize_result(), front.server_info_stamp
    assert not front.sdk_built
    assert own == sdk_initialize_result(front)
    assert stamp == front.server.server_info_stamp
    assert front.sdk_built
    own["capabilities"]["tools"]["listChanged"] = False  # each answer is the caller's own
    assert front.initialize_result() == sdk_initialize_result(front)


async def test_the_sdks_answer_to_initialize_is_the_one_the_front_gives(autojump_clock: Clock) -> None:
    """With own answers off (``fastPath: false``) the SDK's server answers ``initialize``
    itself: the client reads the same result the front gives without it."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=False) as p:
            await p.client.send(request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                          "clientInfo": {"name": "raw", "version": "1"}}))
            answer = (await p.client.receive_id(0))["result"]
            assert answer == {**p.front.initialize_result(), "protocolVersion": "2025-06-18"}


async def next_notification(client: RawClient) -> dict[str, Any]:
    while True:
        msg = await client.receive()
        if "method" in msg and "id" not in msg:
            return msg


async def test_a_stdio_client_is_served_without_the_sdk_until_a_message_needs_it(
    autojump_clock: Clock,
) -> None:
    """Handshake, ping, the four lists, a fast-path call, a list change and an upstream's log
    message: the SDK's server is never built. Then ``resources/read`` (only the SDK serves
    it) builds it; the request is answered (the upstream's contents come back),
    through the middleware appended to the front before the server existed, and the
    client still hears each list change once."""
    seen: list[str] = []

    async def record(ctx: Any, call_next: Any) -> Any:
        seen.append(ctx.method)
        return await call_next(ctx)

    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            c, front = p.client, p.front
            front.middleware.append(record)  # as the metrics' ServedTimer is, at start
            await c.handshake()
            await c.send(request(1, "ping"))
            assert (await c.receive_id(1))["result"] == {}
            for n, method in enumerate(("tools/list", "resources/list", "resources/templates/list",
                                        "prompts/list"), start=2):
                await c.send(request(n, method))
                assert "result" in await c.receive_id(n)
            await c.send(request(6, "tools/call", {"name": "s_echo", "arguments": {"text": "x"}}))
            upstream = await p.server.receive()
            await p.server.answer(upstream, {"content": [{"type": "text", "text": "x"}]})
            assert (await c.receive_id(6))["result"]["content"][0]["text"] == "x"
            front.announce(p.backend.router.snapshot, Changes(tools=True, resources=True))
            assert (await next_notification(c))["method"] == "notifications/tools/list_changed"
            assert (await next_notification(c))["method"] == "notifications/resources/list_changed"
            front.log_message("s", {"level": "info", "data": "hello"})
            heard = await next_notification(c)
            assert heard["method"] == "notifications/message"
            assert heard["params"] == {"level": "info", "data": "hello", "logger": "s"}
            front.resource_updated("file:///nobody-subscribed")  # no subscriber: nothing to build
            assert not front.sdk_built
            assert seen == []

            p.backend.router.snapshot = msgspec.structs.replace(p.backend.router.snapshot,
                                                            resources={"file:///a": "s"})
            await c.send(request(7, "resources/read", {"uri": "file:///a"}))
            asked = await p.server.receive_method("resources/read")
            assert asked["params"]["uri"] == "file:///a"
            await p.server.answer(asked, {"contents": [{"uri": "file:///a", "text": "abc"}]})
            assert (await c.receive_id(7))["result"]["contents"][0]["text"] == "abc"
            assert front.sdk_built
            # The client's handshake, replayed into the new server, then the request.
            assert seen == ["initialize", "notifications/initialized", "resources/read"]
            front.announce(p.backend.router.snapshot, Changes(tools=True))
            assert (await next_notification(c))["method"] == "notifications/tools/list_changed"
            await c.send(request(8, "ping"))
            assert (await c.receive()).get("id") == 8  # the change was heard once, not twice


ALONE: Final = """
import json, sys
import trio, trio.testing
from mcpvisor.actors.core.registry import Changes
from tests.fakes.memory_front import open_memory_proxy

async def main():
    async with open_memory_proxy() as p:
        c = p.client
        await c.handshake()
        for n, method in enumerate(("ping", "tools/list", "resources/list", "resources/templates/list",
                                    "prompts/list"), start=1):
            await c.send({"jsonrpc": "2.0", "id": n, "method": method})
            assert "result" in await c.receive_id(n)
        await c.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "s_echo", "arguments": {}}})
        await p.server.answer(await p.server.receive(), {"content": []})
        assert (await c.receive_id(9))["result"] == {"content": []}
        p.front.announce(p.backend.router.snapshot, Changes(tools=True))
        assert (await c.receive())["method"] == "notifications/tools/list_changed"
        return p.front.sdk_built

built = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
print(json.dumps([built, sorted({m.split(".")[0] for m in sys.modules} & {"mcp", "mcp_types"})]))
"""
"""A stdio client's handshake, pings, lists, a fast call and a list change, in a fresh
interpreter; prints whether the SDK's server was built and which SDK packages were loaded."""


def test_a_stdio_client_that_needs_no_sdk_never_loads_it() -> None:
    """The same connection as above, in an interpreter of its own: neither ``mcp`` nor
    ``mcp_types`` is ever imported (the stdio front, the shared front, the fast path
    and the upstream link do all of it in our own bytes)."""
    done = subprocess.run([sys.executable, "-c", ALONE], capture_output=True, text=True, timeout=60,
                          check=True, cwd=ROOT)
    assert json.loads(done.stdout) == [False, []]
