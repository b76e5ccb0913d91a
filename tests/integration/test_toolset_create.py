"""``mcpvisor toolset create`` and the ``build-toolset`` management tool follow one set of rules.

The same bad request, made through the CLI's real entry point (tools checked against a
real stdio server) and through the management tool over a real router and state
directory, is refused by both with the same sentence, and neither saves anything. A
regression shows as one entry point accepting what the other refuses, or saying it
differently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpvisor.toolset_create import MAX_TOOLS_PER_TOOLSET
from tests.integration.test_cli_mcp import Cli, cli, flaky  # noqa: F401 - the fixture
from tests.unit.test_registry_router import BOUND_S, open_harness

pytestmark = pytest.mark.timeout(300)  # one CLI run per case, each bounded by 60 s on a loaded machine

TOO_MANY = [f"fl.t{i}" for i in range(MAX_TOOLS_PER_TOOLSET + 1)]

CASES = {
    "bad name": ("bad name!", ["fl.echo"]),
    "declared name": ("ro", ["fl.echo"]),
    "not server.tool": ("dev", ["justaname"]),
    "listed twice": ("dev", ["fl.echo", "fl.echo"]),
    "unknown server": ("dev", ["nope.echo"]),
    "unknown tool": ("dev", ["fl.ehco"]),
    "too many": ("dev", TOO_MANY),
}


async def _menu_refusal(state: Path, name: str, refs: list[str]) -> str:
    """The management tool's refusal of ``build-toolset {name, tools: refs}``."""
    with trio.fail_after(BOUND_S):
        async with open_harness(state, servers=("fl",), declared={"ro": ["fl.echo"]}) as h:
            await h.up("fl", "echo", "add")
            result = await h.call("build-toolset", name=name, tools=[{"namespacedName": r} for r in refs])
            assert result.get("isError") is True, result
            assert not (await trio.to_thread.run_sync(h.store.load)).toolsets
            message = result["structuredContent"]["message"]
            assert isinstance(message, str)
            return message


@pytest.mark.parametrize("case", list(CASES))
async def test_the_cli_and_the_management_tool_refuse_alike(cli: Cli, tmp_path: Path, case: str) -> None:  # noqa: F811
    name, refs = CASES[case]
    cli.write({"mcpServers": {"fl": flaky()}, "toolsets": {"ro": ["fl.echo"]}})
    done = await trio.to_thread.run_sync(lambda: cli("toolset", "create", name, "--tool", *refs))
    assert done.code == 2, done.err
    assert not (cli.root / "state" / "state.json").exists() or not json.loads(
        (cli.root / "state" / "state.json").read_text()).get("toolsets")

    menu = await _menu_refusal(tmp_path / "menu-state", name, refs)
    assert menu in done.err, f"CLI said:\n{done.err}\nbuild-toolset said:\n{menu}"
    expected: dict[str, Any] = {
        "bad name": "Invalid toolset name 'bad name!'",
        "declared name": "'ro' is declared in the config file",
        "not server.tool": "'justaname' is not a namespaced name (server.tool)",
        "listed twice": "tools[1]: fl.echo is listed twice",
        "unknown server": "no server 'nope'; servers: fl",
        "unknown tool": "did you mean fl.echo?",
        "too many": f"at most {MAX_TOOLS_PER_TOOLSET} tools",
    }
    assert expected[case] in menu
