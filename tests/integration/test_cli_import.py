"""``mcpvisor import ...`` through its real entry point, from sample files in each client's usual place.

HOME and XDG_CONFIG_HOME point into the test's temp directory, so "the usual place" is a
file this test wrote in each client's own format.
"""

from __future__ import annotations

import pytest

from mcpvisor.cli.importer import CLIENTS, CONFLICT_POLICIES
from mcpvisor.config import load_config
from tests.integration.test_cli_mcp import Cli, cli  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(300)  # several CLI runs, each bounded by 60 s on a loaded machine

DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"],
        },
        "weather": {"command": "python", "args": ["weather.py"], "env": {"API_KEY": "abc123"}},
    }
}


def test_client_names_match_the_importers() -> None:
    from mcpvisor import importers

    assert CLIENTS == importers.CLIENTS
    assert CONFLICT_POLICIES == importers.CONFLICT_POLICIES


def test_claude_desktop_shows_the_plan_then_writes(cli: Cli) -> None:  # noqa: F811
    cli.write(DESKTOP, cli.root / "xdg" / "Claude" / "claude_desktop_config.json")
    dry = cli("import", "claude-desktop", "--dry-run")
    assert dry.code == 0, dry.err
    assert "add" in dry.out
    assert "filesystem" in dry.out
    assert "weather" in dry.out
    assert "Dry run" in dry.out
    assert not cli.config.exists()
    done = cli("import", "claude-desktop")
    assert done.code == 0
    assert "Imported 2 servers" in done.out
    servers = cli.doc()["mcpServers"]
    assert servers["weather"] == {"command": "python", "args": ["weather.py"], "env": {"API_KEY": "abc123"}}
    assert set(load_config(cli.config).servers) == {"filesystem", "weather"}
    again = cli("import", "claude-desktop", "--format", "json")
    assert again.code == 0
    assert [(a["action"], a["reason"]) for a in again.json()["actions"]] == [
        ("skip", "already configured")
    ] * 2


def test_claude_code_project_local_and_user_servers(cli: Cli) -> None:  # noqa: F811
    cli.write({"mcpServers": {"mine": {"command": "m"}}})  # the mcpvisor config, not .mcp.json
    cli.write(
        {"mcpServers": {"proj": {"type": "http", "url": "https://p.example/mcp"}}}, cli.cwd / ".mcp.json"
    )
    cli.write(
        {
            "mcpServers": {"user": {"type": "stdio", "command": "u", "args": [], "env": {}}},
            "projects": {
                str(cli.cwd): {"mcpServers": {"local": {"command": "l", "args": ["x"]}}},
                "/other": {"mcpServers": {"nope": {"command": "n"}}},
            },
        },
        cli.home / ".claude.json",
    )
    done = cli("import", "claude-code", "--format", "json")
    assert done.code == 0, done.err
    assert [(a["action"], a["name"]) for a in done.json()["actions"]] == [
        ("add", "proj"),
        ("add", "local"),
        ("add", "user"),
    ]
    assert list(cli.doc()["mcpServers"]) == ["mine", "proj", "local", "user"]
    assert cli.doc()["mcpServers"]["user"] == {"command": "u"}  # empty args and env are not written


def test_conflicts_skip_rename_or_replace(cli: Cli) -> None:  # noqa: F811
    cli.write({"mcpServers": {"weather": {"command": "python", "args": ["old.py"]}}})
    source = cli.write(DESKTOP, cli.root / "desktop.json")
    skipped = cli("import", "claude-desktop", str(source), "--only", "weather")
    assert skipped.code == 0
    assert "Nothing to import" in skipped.out
    assert "--on-conflict" in skipped.out
    renamed = cli("import", "claude-desktop", str(source), "--on-conflict", "rename", "--format", "json")
    assert [(a["action"], a["name"]) for a in renamed.json()["actions"]] == [
        ("add", "filesystem"),
        ("rename", "weather-2"),
    ]
    assert cli.doc()["mcpServers"]["weather"]["args"] == ["old.py"]
    assert cli.doc()["mcpServers"]["weather-2"]["args"] == ["weather.py"]
    cli.write({"mcpServers": {"weather": {"command": "python", "args": ["old.py"]}}})
    assert cli("import", "claude-desktop", str(source), "--on-conflict", "replace", "--yes").code == 0
    assert cli.doc()["mcpServers"]["weather"]["args"] == ["weather.py"]


def test_cursor_and_vscode_from_their_project_files(cli: Cli) -> None:  # noqa: F811
    cli.write(
        {
            "mcpServers": {
                "linear": {"url": "https://mcp.linear.app/sse"},
                "tool": {"command": "node", "args": ["${workspaceFolder}/t.js"], "envFile": ".env"},
            }
        },
        cli.cwd / ".cursor" / "mcp.json",
    )
    (cli.cwd / ".vscode").mkdir()
    (cli.cwd / ".vscode" / "mcp.json").write_text(
        '{\n  // comments are fine\n  "servers": {"gh": {"type": "http", "url": "https://gh.example/mcp/",\n'
        '    "headers": {"Authorization": "Bearer ${input:token}"}},},\n}\n'
    )
    cursor = cli("import", "cursor")
    assert cursor.code == 0, cursor.err
    assert "envFile" in cursor.err  # said what was dropped
    vscode = cli("import", "vscode")
    assert vscode.code == 0
    assert "${TOKEN}" in vscode.err
    servers = cli.doc()["mcpServers"]
    assert servers["linear"] == {"type": "sse", "url": "https://mcp.linear.app/sse"}
    assert servers["tool"]["args"] == [f"{cli.cwd}/t.js"]
    assert servers["gh"]["headers"] == {"Authorization": "Bearer ${TOKEN}"}


def test_nothing_to_read_or_a_broken_file(cli: Cli) -> None:  # noqa: F811
    none = cli("import", "cursor")
    assert none.code == 1
    assert "no cursor config found; looked at" in none.err
    claude = cli("import", "claude-code")  # ~/.claude.json holds two sources: named once
    assert claude.code == 1
    assert claude.err.count(".claude.json") == 1, claude.err
    assert cli("import", "vscode", "missing.json").code == 2
    broken = cli.root / "broken.json"
    broken.write_text('{"mcpServers": {"a": [}')
    bad = cli("import", "claude-desktop", str(broken))
    assert bad.code == 2
    assert "broken.json" in bad.err
    assert not cli.config.exists()
