"""`mcpvisor.importers`: other clients' config files, as they write them, become mcpvisor entries.

The sample files below follow each client's documented format: Claude Code's `.mcp.json`
and `~/.claude.json` (user and per-project servers), Claude Desktop's
`claude_desktop_config.json`, Cursor's `mcp.json`, VS Code's `.vscode/mcp.json` (JSONC,
``servers``, ``inputs``, editor variables) and its settings.json ``"mcp"`` block.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpvisor.config import parse_config
from mcpvisor.importers import (
    Found,
    ImportSource,
    default_sources,
    parse_jsonc,
    plan_import,
    read_sources,
    sanitize_name,
)

CLAUDE_JSON = {
    "numStartups": 12,
    "mcpServers": {"memory": {"type": "stdio", "command": "npx", "args": ["-y", "@mcp/memory"], "env": {}}},
    "projects": {
        "/work/app": {
            "mcpServers": {
                "db": {
                    "type": "stdio",
                    "command": "uvx",
                    "args": ["mcp-db"],
                    "env": {"DB_URL": "${DB_URL:-sqlite:///x.db}"},
                }
            },
            "allowedTools": [],
        },
        "/elsewhere": {"mcpServers": {"other": {"command": "x"}}},
    },
}

MCP_JSON = {
    "mcpServers": {
        "docs": {
            "type": "http",
            "url": "https://docs.example/mcp",
            "headers": {"Authorization": "Bearer ${TOKEN}"},
        },
        "events": {"type": "sse", "url": "https://events.example/sse"},
    }
}

DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "weather": {"command": "python", "args": ["weather.py"], "env": {"API_KEY": "abc123"}},
    },
    "globalShortcut": "Ctrl+Space",
}

CURSOR = {
    "mcpServers": {
        "linear": {"url": "https://mcp.linear.app/sse"},
        "ctx": {"url": "https://mcp.context7.com/mcp", "headers": {"X-Key": "${env:CTX_KEY}"}},
        "local": {
            "command": "node",
            "args": ["${workspaceFolder}/server.js"],
            "envFile": ".env",
            "disabled": True,
        },
    }
}

VSCODE_JSONC = """\
{
  // Workspace MCP servers
  "inputs": [{"type": "promptString", "id": "gh-token", "description": "GitHub token", "password": true}],
  "servers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {"Authorization": "Bearer ${input:gh-token}"}, /* asked once */
    },
    "py.tools": {"type": "stdio", "command": "python", "args": ["-m", "tools", "${userHome}/data"]},
    "weird": {"type": "stdio", "command": "x", "args": ["${command:pickFile}"]},
  },
}
"""


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
    return path


def by_name(found: list[Found]) -> dict[str, Found]:
    return {f.name: f for f in found}


def valid(entry: object) -> bool:
    parse_config({"mcpServers": {"x": entry}, "settings": {"envMode": "disable"}})
    return True


def test_claude_code_reads_project_local_and_user_scopes(tmp_path: Path) -> None:
    """./.mcp.json, ~/.claude.json's servers for this project, and its user servers; not other projects'."""
    home, cwd = tmp_path / "home", Path("/work/app")
    write(home / ".claude.json", CLAUDE_JSON)
    project = tmp_path / "app"
    write(project / ".mcp.json", MCP_JSON)
    sources = default_sources("claude-code", home=home, cwd=cwd)
    sources[0] = ImportSource(project / ".mcp.json", sources[0].label)
    found, warnings, existing = read_sources("claude-code", sources, home=home, cwd=cwd)
    assert not warnings
    assert len(existing) == 3
    names = [f.name for f in found]
    assert names == ["docs", "events", "db", "memory"]
    got = by_name(found)
    assert got["memory"].entry == {"command": "npx", "args": ["-y", "@mcp/memory"], "env": {}}
    assert got["db"].entry == {
        "command": "uvx",
        "args": ["mcp-db"],
        "env": {"DB_URL": "${DB_URL:-sqlite:///x.db}"},
    }
    assert got["docs"].entry == {
        "type": "http",
        "url": "https://docs.example/mcp",
        "headers": {"Authorization": "Bearer ${TOKEN}"},
    }
    assert got["events"].entry == {"type": "sse", "url": "https://events.example/sse"}
    assert all(valid(f.entry) for f in found)


def test_claude_desktop_lives_in_the_platform_app_dir(tmp_path: Path) -> None:
    home = tmp_path / "home"
    linux = default_sources("claude-desktop", home=home, env={}, platform="linux")
    mac = default_sources("claude-desktop", home=home, env={}, platform="darwin")
    win = default_sources(
        "claude-desktop", home=home, env={"APPDATA": str(tmp_path / "Roaming")}, platform="win32"
    )
    assert linux[0].path == home / ".config" / "Claude" / "claude_desktop_config.json"
    assert mac[0].path == home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    assert win[0].path == tmp_path / "Roaming" / "Claude" / "claude_desktop_config.json"
    write(linux[0].path, DESKTOP)
    found, _, _ = read_sources("claude-desktop", linux, home=home, cwd=tmp_path)
    got = by_name(found)
    assert got["weather"].entry == {"command": "python", "args": ["weather.py"], "env": {"API_KEY": "abc123"}}
    assert got["filesystem"].entry is not None
    assert got["filesystem"].entry["env"] == {}


def test_cursor_urls_env_variables_workspace_and_disabled(tmp_path: Path) -> None:
    """A bare URL is SSE when it ends in /sse, else streamable HTTP; ${env:X} becomes ${X};
    ${workspaceFolder} is the project; "disabled" becomes "enabled": false; unknown keys are named."""
    project = tmp_path / "proj"
    path = write(project / ".cursor" / "mcp.json", CURSOR)
    found, _, _ = read_sources("cursor", [ImportSource(path, "project")], home=tmp_path, cwd=tmp_path)
    got = by_name(found)
    assert got["linear"].entry == {"type": "sse", "url": "https://mcp.linear.app/sse"}
    assert got["ctx"].entry == {
        "type": "http",
        "url": "https://mcp.context7.com/mcp",
        "headers": {"X-Key": "${CTX_KEY}"},
    }
    local = got["local"].entry
    assert local == {"command": "node", "args": [f"{project}/server.js"], "env": {}, "enabled": False}
    assert any("envFile" in n for n in got["local"].notes)
    assert any("guessed" in n for n in got["linear"].notes)


def test_vscode_jsonc_inputs_and_unresolvable_variables(tmp_path: Path) -> None:
    project = tmp_path / "ws"
    path = write(project / ".vscode" / "mcp.json", VSCODE_JSONC)
    found, _, _ = read_sources("vscode", [ImportSource(path, "workspace")], home=tmp_path / "me", cwd=project)
    got = by_name(found)
    assert got["github"].entry == {
        "type": "http",
        "url": "https://api.githubcopilot.com/mcp/",
        "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
    }
    assert any("GH_TOKEN" in n for n in got["github"].notes)
    assert got["py-tools"].original == "py.tools"
    assert got["py-tools"].entry == {
        "command": "python",
        "args": ["-m", "tools", f"{tmp_path / 'me'}/data"],
        "env": {},
    }
    assert got["weird"].entry is None
    assert "command:pickFile" in got["weird"].notes[-1]


def test_vscode_user_settings_mcp_block(tmp_path: Path) -> None:
    settings = write(
        tmp_path / "settings.json",
        '{"editor.fontSize": 14, "mcp": {"servers": {"t": {"command": "t", "args": []}}},}',
    )
    found, _, _ = read_sources("vscode", [ImportSource(settings, "user")], home=tmp_path, cwd=tmp_path)
    assert [(f.name, f.entry) for f in found] == [("t", {"command": "t", "args": [], "env": {}})]


def test_a_broken_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", '{"mcpServers": {"a": }')
    with pytest.raises(ValueError, match=r"mcp\.json.*line 1"):
        read_sources("cursor", [ImportSource(path, "x")], home=tmp_path, cwd=tmp_path)


def test_jsonc_keeps_comment_markers_inside_strings() -> None:
    doc = parse_jsonc('{"url": "http://x/y//z", /* c */ "a": "/* not a comment */", // end\n "b": [1,],}')
    assert doc == {"url": "http://x/y//z", "a": "/* not a comment */", "b": [1]}


def test_names_are_made_valid() -> None:
    assert sanitize_name("my server.v2") == "my-server-v2"
    assert sanitize_name("ok_name-1") == "ok_name-1"
    assert sanitize_name("...") == "server"
    assert len(sanitize_name("x" * 100)) == 64


def found(name: str, entry: dict[str, object] | None) -> Found:
    return Found(name, name, entry, "test")


def test_plan_adds_new_skips_identical_and_handles_a_different_duplicate() -> None:
    existing = {
        "git": {"command": "uvx", "args": ["mcp-server-git"]},
        "docs": {"type": "http", "url": "https://a/mcp"},
    }
    incoming = [
        found("git", {"command": "uvx", "args": ["mcp-server-git"], "env": {}}),  # same server, empty env
        found("docs", {"type": "http", "url": "https://b/mcp"}),  # different, same name
        found("new", {"command": "new"}),
        found("bad", None),
    ]
    skip = plan_import(existing, incoming, "skip")
    assert [(a.kind, a.name) for a in skip] == [
        ("skip", "git"),
        ("skip", "docs"),
        ("add", "new"),
        ("skip", "bad"),
    ]
    assert skip[0].reason == "already configured"
    assert "--on-conflict" in (skip[1].reason or "")
    rename = plan_import({**existing, "docs-2": {"command": "x"}}, incoming, "rename")
    assert [(a.kind, a.name) for a in rename][:3] == [("skip", "git"), ("rename", "docs-3"), ("add", "new")]
    replace = plan_import(existing, incoming, "replace")
    assert [(a.kind, a.name) for a in replace][1] == ("replace", "docs")


def test_plan_handles_duplicates_within_one_import() -> None:
    """The same name in two scopes: the second is a conflict with the first, not a silent overwrite."""
    incoming = [found("db", {"command": "a"}), found("db", {"command": "b"}), found("db2", {"command": "a"})]
    plan = plan_import({}, incoming, "rename")
    assert [(a.kind, a.name) for a in plan] == [("add", "db"), ("rename", "db-2"), ("skip", "db2")]
    assert plan[2].reason == "already configured as 'db'"
