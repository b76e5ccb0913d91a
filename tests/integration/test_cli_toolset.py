"""``mcpvisor toolset ...`` through its real entry point, on the state the proxy uses.

Without a proxy, the commands read and write the state directory; with one running (a real
SDK client over stdio to ``mcpvisor serve``), ``equip``/``unequip`` reach it through its
control socket and its client sees the change as one ``list_changed``.
"""

from __future__ import annotations

import json
import sys

import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, Recorder, flaky, proxy_client, write_config
from tests.integration.test_cli_mcp import Cli, cli  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(300)  # several CLI runs, each bounded by 60 s on a loaded machine


def test_toolsets_without_a_running_proxy(cli: Cli) -> None:  # noqa: F811
    """create (tools checked against the live server and pinned), list, show, equip,
    unequip, delete, and every refusal with its reason."""
    cli.write({"mcpServers": {"fl": flaky()}, "toolsets": {"declared": ["fl.echo"]}})
    made = cli("toolset", "create", "dev", "--tool", "fl.echo", "fl.add", "--description", "daily work")
    assert made.code == 0, made.err
    state = json.loads((cli.root / "state" / "state.json").read_text())
    tools = state["toolsets"]["dev"]["tools"]
    assert [t["namespacedName"] for t in tools] == ["fl.echo", "fl.add"]
    assert all(t["refId"] and t["pinned"]["inputSchema"] for t in tools)

    typo = cli("toolset", "create", "x", "--tool", "fl.ehco")
    assert typo.code == 2
    assert "did you mean fl.echo?" in typo.err
    assert "no server 'nope'" in cli("toolset", "create", "x", "--tool", "nope.echo").err
    assert cli("toolset", "create", "x", "--tool", "justaname").code == 2
    assert "already exists" in cli("toolset", "create", "dev", "--tool", "fl.echo", "--no-check").err
    assert cli("toolset", "create", "dev", "--tool", "fl.echo", "--no-check", "--force").code == 0
    assert "declared in the config" in cli("toolset", "create", "declared", "--tool", "fl.echo").err

    listed = cli("toolset", "list", "--format", "json").json()
    assert [(t["name"], t["source"], t["toolCount"]) for t in listed["toolsets"]] == [
        ("declared", "config", 1),
        ("dev", "saved", 1),
    ]
    shown = cli("toolset", "show", "dev")
    assert shown.code == 0
    assert "fl.echo" in shown.out
    assert "saved in" in shown.out
    assert cli("toolset", "show", "dve").err.count("did you mean 'dev'") == 1

    equip = cli("toolset", "equip", "dev")
    assert equip.code == 0
    assert "no running proxy found" in equip.out
    assert cli("toolset", "list", "--format", "json").json()["equipped"] == "dev"
    assert cli("toolset", "equip", "nope").code == 2
    assert cli("toolset", "unequip").code == 0
    assert cli("toolset", "list", "--format", "json").json()["equipped"] is None

    assert cli("toolset", "delete", "declared").code == 2
    assert cli("toolset", "delete", "dev").code == 0  # no terminal: no question
    assert [t["name"] for t in cli("toolset", "list", "--format", "json").json()["toolsets"]] == ["declared"]


@pytest.mark.slow
async def test_equip_from_the_cli_reaches_a_running_proxy(cli: Cli) -> None:  # noqa: F811
    """The client of a running proxy (menu exposure) sees the equipped toolset's tools after
    `mcpvisor toolset equip`, and the menu again after `unequip`, each with a list_changed."""
    path = write_config(cli.cwd, {"fl": flaky()}, exposure="menu")
    assert cli("toolset", "create", "dev", "--tool", "fl.echo", "--tool", "fl.add", "--no-check").code == 0
    rec = Recorder()

    async def run_cli(*args: str) -> str:
        done = await trio.run_process(
            [sys.executable, "-m", "mcpvisor", *args],
            cwd=cli.cwd,
            env=cli.env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        return str(done.stdout.decode())

    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(path, recorder=rec, env=cli.env) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            assert "equip-toolset" in before
            assert "fl_echo" not in before
            changed = rec.changed
            said = await run_cli("toolset", "equip", "dev")
            assert "in the running proxy (pid" in said
            await changed.wait()
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"fl_echo", "fl_add"} <= tools
            assert "fl_sleep" not in tools
            changed = rec.changed
            await run_cli("toolset", "unequip")
            await changed.wait()
            assert "fl_echo" not in {t.name for t in (await client.list_tools()).tools}
