"""A handshake-era client reads the same handshake and lists from the stdio front's own
answers (actors/fronts/stdio_own.py) as from the SDK's server: two connections to one proxy
with real upstreams (our full-featured fixture and the third-party `mcp-server-time`), one
with the fast path on (own answers), one off (the SDK answers everything)."""

from __future__ import annotations

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


@pytest.mark.parametrize("version", ["2025-11-25", "2025-03-26"])
async def test_own_answers_read_as_the_sdks(tmp_path: Path, version: str) -> None:
    config = write_config(tmp_path, {"every": everything(), "time": time_server()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
            await sup.wait_ready()
            answers = {}
            for fast in (True, False):
                async with embedded_connection(sup, fast_path=fast) as (send, receive, front):
                    answers[fast] = await _read_all(RawClient(send, receive), version)
                    assert front.statistics().sdk_started is not fast
    own, sdk = answers[True], answers[False]
    assert own["initialize"]["protocolVersion"] == version
    names = {t["name"] for t in own["tools/list"]["result"]["tools"]}
    assert names >= {"every_echo", "time_get_current_time"}
    assert own["resources/list"]["result"]["resources"], "the fixture lists resources"
    assert own["prompts/list"]["result"]["prompts"], "the fixture lists prompts"
    for key in ("initialize", "ping", *LISTS):
        assert own[key] == sdk[key], key
