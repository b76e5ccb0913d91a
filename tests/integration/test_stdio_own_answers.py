"""A client reads the same handshake (or ``server/discover``) and lists from the stdio
front's own answers (actors/fronts/stdio_own.py) as from the SDK's server, in both protocol
eras: two connections to one proxy with real upstreams (our full-featured fixture and the
third-party `mcp-server-time`), one with the fast path on (own answers), one off (the SDK
answers everything)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpvisor import open_supervisor
from tests.helpers import REAL_IO_BOUND_S, embedded_connection, everything, time_server, write_config
from tests.integration.test_front_edges import RawClient

pytestmark = pytest.mark.slow

LISTS = ("tools/list", "resources/list", "resources/templates/list", "prompts/list")


async def _read_all(client: RawClient, version: str) -> dict[str, Any]:
    await client.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": version, "capabilities": {"roots": {}},
                                  "clientInfo": {"name": "raw", "version": "1"}}})
    seen: dict[str, Any] = {"initialize": (await client.receive_id(0))["result"]}
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for n, method in enumerate(("ping", *LISTS), start=1):
        await client.send({"jsonrpc": "2.0", "id": n, "method": method})
        seen[method] = await client.receive_id(n)
    return seen


async def _own_and_sdks(tmp_path: Path, servers: dict[str, Any],
                        read: Callable[[RawClient], Awaitable[dict[str, Any]]]) -> tuple[dict[str, Any], ...]:
    """What ``read`` reads from a connection served by the front's own answers, and from one
    the SDK serves (the fast path off), of one proxy over ``servers``."""
    config = write_config(tmp_path, servers)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
            await sup.wait_ready()
            answers = {}
            for fast in (True, False):
                async with embedded_connection(sup, fast_path=fast) as (send, receive, front):
                    answers[fast] = await read(RawClient(send, receive))
                    assert front.statistics().sdk_started is not fast
    return answers[True], answers[False]


@pytest.mark.parametrize("version", ["2025-11-25", "2025-03-26"])
async def test_own_answers_read_as_the_sdks(tmp_path: Path, version: str) -> None:
    own, sdk = await _own_and_sdks(tmp_path, {"every": everything(), "time": time_server()},
                                   lambda client: _read_all(client, version))
    assert own["initialize"]["protocolVersion"] == version
    names = {t["name"] for t in own["tools/list"]["result"]["tools"]}
    assert names >= {"every_echo", "time_get_current_time"}
    assert own["resources/list"]["result"]["resources"], "the fixture lists resources"
    assert own["prompts/list"]["result"]["prompts"], "the fixture lists prompts"
    for key in ("initialize", "ping", *LISTS):
        assert own[key] == sdk[key], key


ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}


@pytest.mark.parametrize("hinted", [False, True], ids=["mixed", "hinted"])
async def test_a_2026_07_28_clients_discover_and_lists_read_as_the_sdks(tmp_path: Path, hinted: bool) -> None:
    """The same, for a 2026-07-28 client: ``server/discover`` and the four lists, each with
    its freshness hints and the proxy's serverInfo stamp, equal from the front's own answers
    and from the SDK's server: with a handshake-era server among the upstreams (the lists
    then promise nothing: ``ttlMs`` 0, private), and with one server whose lists say 5 s,
    public (which the proxy's lists then say too)."""
    servers = ({"every": everything("--list-ttl", "5000", protocol="2026-07-28")} if hinted
               else {"every": everything(), "time": time_server()})

    async def read(client: RawClient) -> dict[str, Any]:
        seen = {}
        for n, method in enumerate(("server/discover", *LISTS), start=1):
            await client.send({"jsonrpc": "2.0", "id": n, "method": method, "params": {"_meta": ENVELOPE}})
            seen[method] = await client.receive_id(n)
        return seen

    own, sdk = await _own_and_sdks(tmp_path, servers, read)
    assert own["server/discover"]["result"]["supportedVersions"] == ["2026-07-28"]
    tools = own["tools/list"]["result"]
    assert "every_echo" in {t["name"] for t in tools["tools"]}
    assert (tools["ttlMs"], tools["cacheScope"]) == ((5000, "public") if hinted else (0, "private"))
    for key in ("server/discover", *LISTS):
        assert own[key] == sdk[key], key
