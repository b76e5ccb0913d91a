"""``mcpvisor config path|validate`` through the real entry point: which file, why, and is it valid."""

from __future__ import annotations

import pytest

from tests.integration.test_cli_mcp import Cli, cli  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(300)  # several CLI runs, each bounded by 60 s on a loaded machine


def test_path_follows_the_lookup_order(cli: Cli) -> None:  # noqa: F811
    none = cli("config", "path")
    assert none.code == 1
    assert none.out.startswith("none")
    assert "./mcpvisor.json" in none.out
    assert "./.mcp.json" in none.out
    assert "not set" in none.out
    # The lookup lines are a table: every state starts in the same column, even after the
    # longest source ($MCP_PROXY_CONFIG_PATH).
    lookup = none.out.split("lookup order:\n", 1)[1].splitlines()
    starts = {line.index("not set") if "not set" in line else line.index("not given") for line in lookup[:3]}
    assert len(starts) == 1, lookup

    cli.write({"mcpServers": {}}, cli.cwd / ".mcp.json")
    claude = cli("config", "path")
    assert claude.code == 0
    assert claude.out.splitlines()[0] == ".mcp.json"
    assert "./.mcp.json in the current directory" in claude.out
    assert any("./.mcp.json" in line and "<- in use" in line for line in claude.out.splitlines())

    cli.write({"mcpServers": {}})
    assert cli("config", "path").out.splitlines()[0] == "mcpvisor.json"  # ./mcpvisor.json comes first

    env = cli("config", "path", "--format", "json", env={"MCPVISOR_CONFIG": str(cli.root / "env.json")})
    data = env.json()
    assert env.code == 1
    assert data["why"] == "from $MCPVISOR_CONFIG"
    assert data["exists"] is False
    sources = [p["source"] for p in data["lookup"]]
    assert sources[:3] == ["--config", "$MCPVISOR_CONFIG", "$MCP_PROXY_CONFIG_PATH"]
    assert [p["used"] for p in data["lookup"]] == [False, True, False, False, False, False]

    explicit = cli("config", "--config", ".mcp.json", "path", "--format", "json").json()
    assert explicit["why"] == "from --config"
    assert explicit["lookup"][0]["used"]


def test_validate(cli: Cli) -> None:  # noqa: F811
    cli.write(
        {
            "mcpServers": {
                "a": {"command": "a"},
                "b": {"type": "http", "url": "https://x/mcp", "enabled": False},
            },
            "toolsets": {"dev": ["a.x"]},
        }
    )
    good = cli("config", "validate")
    assert good.code == 0
    assert "valid (2 servers, 1 enabled, 1 toolsets)" in good.out
    cli.write({"mcpServers": {"a": {"comand": "a"}, "b": {"command": "b", "timeout": "5 fortnights"}}})
    bad = cli("config", "validate", "--format", "json")
    assert bad.code == 2
    problems = bad.json()["problems"]
    assert any('"comand"' in p and '"command"' in p for p in problems)
    assert any('unknown unit "fortnights"' in p for p in problems)
