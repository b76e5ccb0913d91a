"""Requests that name a server's tool or prompt before it is listed, through the embedding
API and through the stdio front (real fixture subprocesses, in this process).

* a tool of a server that is starting: the call waits for it and goes through;
* a tool or prompt of a server disabled in the config (it has no process): an error
  naming the server and how to enable it, not "unknown tool";
* a misspelt name of a server that is up: suggestions from that server only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from mcpvisor import open_supervisor
from mcpvisor.actors.core.catalog import UpstreamLists
from mcpvisor.actors.errors import UpstreamUnavailable
from mcpvisor.config import load_config
from mcpvisor.remembered import CatalogFile, Remembered, catalog_fingerprint
from tests.helpers import REAL_IO_BOUND_S, embedded_connection, everything, flaky, write_config

DISABLED = "server off is disabled (enabled: false in the config; mcpvisor mcp enable off)"
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


def config(tmp: Path) -> Path:
    return write_config(tmp, {
        "ok": flaky(),
        "slow": flaky("--slow-start", "3", restartWait="60s"),
        "off": everything(enabled=False),
    }, startupWait="0s")


async def test_the_api_waits_for_a_starting_server_and_names_a_disabled_one(tmp_path: Path) -> None:
    """Before this, slow_echo was "unknown" until start-up was over (or startupWait, here 0 s),
    and off_echo was "unknown tool" with other servers' names as suggestions."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config(tmp_path), state_dir=tmp_path / "state", watch=False) as sup:
            assert "slow_echo" not in {t["name"] for t in sup.tools()}  # nothing remembered yet
            result = await sup.call_tool("slow_echo", {"text": "waited"})
            assert result["content"][0]["text"] == "echo: waited"
            with pytest.raises(UpstreamUnavailable) as info:
                await sup.call_tool("off_echo", {"text": "x"})
            assert str(info.value) == DISABLED
            typo = await sup.call_tool("ok_ecko", {})
            assert typo["isError"]
            assert typo["structuredContent"]["server"] == "ok"
            assert all(n.startswith("ok_") for n in typo["structuredContent"]["didYouMean"])


async def rpc(send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, buf: list[bytes],
              message: dict[str, object]) -> dict[str, object]:
    await send.send_all(json.dumps(message).encode() + b"\n")
    while True:
        while b"\n" in buf[0]:
            line, buf[0] = buf[0].split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == message.get("id"):
                return answer  # type: ignore[no-any-return]
        buf[0] += await receive.receive_some(1 << 16)


async def test_the_front_names_a_disabled_server_for_its_tools_and_prompts(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config(tmp_path), state_dir=tmp_path / "state", watch=False) as sup, \
                embedded_connection(sup) as (send, receive, _):
            buf = [b""]
            await rpc(send, receive, buf, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
            await send.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            call = await rpc(send, receive, buf, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                  "params": {"name": "off_echo", "arguments": {"text": "x"}}})
            error = call["error"]
            assert isinstance(error, dict)
            assert error["message"] == DISABLED
            assert error["data"]["state"] == "disabled"
            prompt = await rpc(send, receive, buf, {"jsonrpc": "2.0", "id": 3, "method": "prompts/get",
                                                    "params": {"name": "off_greet"}})
            assert isinstance(prompt["error"], dict)
            assert prompt["error"]["message"].startswith("server off is disabled")
            slow_call = {"name": "slow_echo", "arguments": {"text": "w"}}
            waited = await rpc(send, receive, buf, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                                    "params": slow_call})
            assert isinstance(waited["result"], dict)
            assert waited["result"]["content"][0]["text"] == "echo: w"


async def test_a_start_lists_from_memory_only_public_lists_still_within_their_ttl(tmp_path: Path) -> None:
    """Three slow servers remembered in catalog.json: one plainly (handshake era), one whose
    ``ttlMs`` ran out, one whose tools were private (withheld). Only the first is listed
    before it is up; the other two wait for their own lists."""
    path = write_config(tmp_path, {name: flaky("--slow-start", "30") for name in ("plain", "stale", "mine")},
                        startupWait="0s")
    specs = load_config(path).servers
    tool = {"name": "echo", "inputSchema": {"type": "object"}}
    entries = {
        "plain": Remembered(catalog_fingerprint(specs["plain"]), "2026-11-24T10:00:00Z", "legacy",
                            UpstreamLists(tools=(tool,))),
        "stale": Remembered(catalog_fingerprint(specs["stale"]), "2026-11-24T10:00:00Z", "legacy",
                            UpstreamLists(tools=(tool,)), fresh_until="2026-11-24T10:00:05Z"),
        "mine": Remembered(catalog_fingerprint(specs["mine"]), "2026-11-24T10:00:00Z", "legacy",
                           UpstreamLists(), withheld=("tools",)),
    }
    catalog = CatalogFile(tmp_path / "state")
    catalog.path.parent.mkdir(parents=True)
    for name, entry in entries.items():
        catalog.remember(name, entry)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(path, state_dir=tmp_path / "state", watch=False) as sup:
            listed = {t["name"] for t in sup.tools()}
            assert {n for n in listed if n.endswith("_echo")} == {"plain_echo"}
