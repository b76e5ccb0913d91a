"""Toolsets end to end through real MCP clients (issue: "Done when").

* stdio: a real SDK client launches ``mcpvisor serve`` (as Claude Code does) in front of
  five real upstreams with 40 tools; from the menu it builds and equips a 4-tool toolset,
  is told ``list_changed``, sees and calls exactly those tools; the proxy is restarted
  over the same state directory and starts in normal mode with the toolset; the client
  goes back to the menu, every step announced.
* streamable HTTP: two clients at once, one handshake era (notifications on its
  connection) and one 2026-07-28 (``subscriptions/listen``), receive the same
  announcements for build, configuration mode, equip, and a lazy server's pending tools
  arriving.
* start-up: an unknown exposure and an unknown ``--toolset`` exit with status 2.

The upstreams are the stdlib fixture server (fast to start on a loaded machine).
Every test is bounded; the conftest fails any test that leaves a process behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged

from mcpvisor import serve_http
from mcpvisor.actors.core.toolsets import CONFIG_TOOLS, ENTER_CONFIG, EXIT_CONFIG
from mcpvisor.config import ConfigError, Settings
from mcpvisor.settings import with_env_overrides
from mcpvisor.tree import open_supervisor
from tests.helpers import PY, REAL_IO_BOUND_S, flaky, proxy_params, wait_settled, write_config

pytestmark = pytest.mark.slow

SERVERS: Final = ("s1", "s2", "s3", "s4", "s5")
"""Five fixture servers of 8 tools each: the 40-tool menu of the issue."""

MENU: Final = [*CONFIG_TOOLS, EXIT_CONFIG]
FOUR: Final = [{"namespacedName": "s1.echo"}, {"namespacedName": "s2.add"},
               {"namespacedName": "s3.counter"}, {"namespacedName": "s5.idem_echo", "alias": "say"}]
FOUR_NAMES: Final = [ENTER_CONFIG, "s1_echo", "s2_add", "s3_counter", "say"]


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    out: dict[str, Any] = result.structured_content
    return out


class Tally:
    """Counts the tools list_changed a client received; wait for the n-th one."""

    def __init__(self) -> None:
        self.count = 0
        self._bumped = trio.Event()

    def bump(self) -> None:
        self.count += 1
        self._bumped.set()
        self._bumped = trio.Event()

    async def handler(self, message: Any) -> None:  # a Client message_handler (handshake era)
        if isinstance(message, types.ToolListChangedNotification):
            self.bump()

    async def reach(self, n: int) -> None:
        """Wait (bounded by the caller's fail_after) until ``n`` have arrived."""
        while self.count < n:
            await self._bumped.wait()


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


@pytest.mark.timeout(REAL_IO_BOUND_S * 2.5)
async def test_from_40_tools_to_a_4_tool_toolset_and_back_across_a_restart(tmp_path: Path) -> None:
    """Through a real stdio client: menu -> build-toolset(autoEquip) -> list_changed ->
    exactly the 4 tools (+ enter-configuration-mode), callable -> restart over the same
    state directory -> the same 4 tools in normal mode -> back to the menu; each change
    announced to the client once."""
    config = write_config(tmp_path, {name: flaky("--name", name) for name in SERVERS}, exposure="menu")
    state = tmp_path / "state"
    with trio.fail_after(REAL_IO_BOUND_S * 2):
        seen = Tally()
        async with Client(proxy_params(config, "--state-dir", str(state)), mode="legacy", cache=None,
                          message_handler=seen.handler) as client:
            await wait_settled(client)
            assert await names(client) == MENU
            available = structured(await client.call_tool("list-available-tools", {}))
            assert available["toolCount"] == 40
            assert [s["name"] for s in available["servers"]] == list(SERVERS)
            built = await client.call_tool("build-toolset",
                                           {"name": "four", "tools": FOUR, "autoEquip": True})
            assert structured(built)["active"]["visibleTools"] == FOUR_NAMES
            await seen.reach(1)
            assert await names(client) == FOUR_NAMES
            echoed = await client.call_tool("say", {"text": "hi"})
            assert not echoed.is_error
            assert isinstance(echoed.content[0], types.TextContent)
            assert "hi" in echoed.content[0].text
            active = structured(await client.call_tool("enter-configuration-mode", {}))
            assert active["configurationMode"] is True
            await seen.reach(2)
            report = structured(await client.call_tool("get-active-toolset", {}))
            assert report["tokens"]["listed"] < report["tokens"]["allTools"]
            structured(await client.call_tool("exit-configuration-mode", {}))
            await seen.reach(3)
            assert await names(client) == FOUR_NAMES
            assert seen.count == 3
        assert json.loads((state / "state.json").read_text())["equipped"] == "four"

        seen = Tally()
        async with Client(proxy_params(config, "--state-dir", str(state)), mode="legacy", cache=None,
                          message_handler=seen.handler) as client:
            await wait_settled(client)
            assert await names(client) == FOUR_NAMES  # normal mode, toolset equipped
            # (servers that came up after this client connected were announced as they did)
            added = await client.call_tool("s2_add", {"a": 2, "b": 40})
            assert added.structured_content == {"sum": 42}
            before = seen.count
            structured(await client.call_tool("enter-configuration-mode", {}))
            await seen.reach(before + 1)
            out = structured(await client.call_tool("unequip-toolset", {}))
            assert out["unequipped"] == "four"
            assert out["visibleTools"] == MENU  # the list did not change
            assert await names(client) == MENU
            assert seen.count == before + 1
        assert json.loads((state / "state.json").read_text())["equipped"] is None


@pytest.mark.timeout(REAL_IO_BOUND_S * 1.5)
async def test_two_http_clients_of_both_eras_receive_the_same_announcements(tmp_path: Path) -> None:
    """One handshake-era and one 2026-07-28 client on streamable HTTP: each toolset change
    reaches both; a toolset naming a lazy server's tools reports them pending, starts the
    server, and they appear (announced) when it is up."""
    config = write_config(tmp_path, {"s1": flaky("--name", "s1"), "s2": flaky("--name", "s2"),
                                     "late": flaky("--name", "late", lazy=True)},
                          toolsets={"later": ["s1.echo", "late.add"]}, exposure="menu")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (open_supervisor(config, state_dir=tmp_path / "state") as sup,
                    trio.open_nursery() as nursery):
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            old, new = Tally(), Tally()
            async with Client(url, mode="legacy", cache=None, message_handler=old.handler) as legacy, \
                    Client(url, cache=None) as modern:
                assert modern.protocol_version == "2026-07-28"
                listening = trio.Event()

                async def listen() -> None:
                    async with modern.listen(tools_list_changed=True) as sub:
                        listening.set()
                        async for event in sub:
                            if isinstance(event, ToolsListChanged):
                                new.bump()

                nursery.start_soon(listen)
                await listening.wait()
                assert await names(legacy) == MENU  # the proxy now knows this connection
                assert await names(modern) == MENU

                async def step(call: Any, expected: list[str]) -> dict[str, Any]:
                    want_old, want_new = old.count + 1, new.count + 1
                    out = structured(await call)
                    await old.reach(want_old)
                    await new.reach(want_new)
                    assert await names(legacy) == expected
                    assert await names(modern) == expected
                    return out

                await step(legacy.call_tool("build-toolset", {"name": "dev", "autoEquip": True,
                                                              "tools": [{"namespacedName": "s2.echo"}]}),
                           [ENTER_CONFIG, "s2_echo"])
                await step(modern.call_tool("enter-configuration-mode", {}), MENU)
                report = structured(await legacy.call_tool("equip-toolset", {"name": "later"}))
                assert [t["state"] for t in report["tools"]] == ["exposed", "pending"]
                assert report["tools"][1]["detail"].startswith("server late is ")
                await old.reach(4)  # the equip, then the lazy server's tools arriving
                await new.reach(3)  # (2026-07-28 listen events may coalesce two into one)
                assert await names(legacy) == [ENTER_CONFIG, "s1_echo", "late_add"]
                assert await names(modern) == [ENTER_CONFIG, "s1_echo", "late_add"]
                assert old.count == 4
                nursery.cancel_scope.cancel()


def test_mcpvisor_exposure_overrides_the_file() -> None:
    assert with_env_overrides(Settings(), env={"MCPVISOR_EXPOSURE": "all"}).exposure == "all"
    assert with_env_overrides(Settings(exposure="all"), env={}).exposure == "all"
    assert with_env_overrides(Settings(), env={"MCPVISOR_EXPOSURE": "discovery"}).exposure == "discovery"
    with pytest.raises(ConfigError,
                       match=r"\$MCPVISOR_EXPOSURE is 'everything'; use one of: menu, all, discovery"):
        with_env_overrides(Settings(), env={"MCPVISOR_EXPOSURE": "everything"})


@pytest.mark.parametrize(("extra", "env", "message"), [
    ((), {"MCPVISOR_EXPOSURE": "everything"}, "$MCPVISOR_EXPOSURE is 'everything'"),
    (("--toolset", "nope"), {}, "no toolset named 'nope' (--toolset); toolsets: dev"),
])
def test_serve_refuses_to_start_with_status_2(tmp_path: Path, extra: tuple[str, ...], env: dict[str, str],
                                              message: str) -> None:
    """Nothing starts (no upstream is spawned) and the message names the setting."""
    record = tmp_path / "record.jsonl"
    config = write_config(tmp_path, {"s1": flaky("--name", "s1", "--record", str(record))},
                          toolsets={"dev": ["s1.echo"]}, exposure="menu")
    proc = subprocess.run(
        [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(tmp_path / "state"),
         *extra],
        env={**os.environ, **env}, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=REAL_IO_BOUND_S, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not record.exists()
    assert sys.executable == PY
