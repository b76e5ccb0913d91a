"""Claude Code install lines from MCP servers' READMEs, with ``claude`` replaced by ``mcpvisor``.

Each line is as its README (or Claude Code's MCP docs) prints it; each must write exactly
the entry below into a new ./mcpvisor.json. Then the malformed forms: exit 2, a message
naming what is wrong, and the folder byte for byte as it was. And two of the lines run:
``mcp test`` reports the server online (the filesystem server through npx, pinned in
tests/npm-filesystem; the time server through ``python -m``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli_mcp import Cli

NPM_DIR = Path(__file__).parent.parent / "npm-filesystem"
"""The pinned filesystem server (package.json); .ci/run installs it with `npm ci`."""

LINES: list[tuple[str, str, dict[str, Any]]] = [
    # modelcontextprotocol/servers: filesystem, git, time, fetch, memory, sequential-thinking, everything
    (
        "claude mcp add filesystem -- npx -y @modelcontextprotocol/server-filesystem "
        "/Users/username/Desktop /path/to/other/allowed/dir",
        "filesystem",
        {
            "command": "npx",
            "args": [
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/Users/username/Desktop",
                "/path/to/other/allowed/dir",
            ],
        },
    ),
    (
        "claude mcp add git -- uvx mcp-server-git --repository path/to/git/repo",
        "git",
        {"command": "uvx", "args": ["mcp-server-git", "--repository", "path/to/git/repo"]},
    ),
    (
        "claude mcp add time -- uvx mcp-server-time --local-timezone=America/New_York",
        "time",
        {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=America/New_York"]},
    ),
    (
        "claude mcp add time -- python -m mcp_server_time --local-timezone=UTC",
        "time",
        {"command": "python", "args": ["-m", "mcp_server_time", "--local-timezone=UTC"]},
    ),
    (
        "claude mcp add fetch -- uvx mcp-server-fetch",
        "fetch",
        {"command": "uvx", "args": ["mcp-server-fetch"]},
    ),
    (
        "claude mcp add fetch -- python -m mcp_server_fetch",
        "fetch",
        {"command": "python", "args": ["-m", "mcp_server_fetch"]},
    ),
    (
        "claude mcp add memory -- npx -y @modelcontextprotocol/server-memory",
        "memory",
        {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
    ),
    (
        "claude mcp add sequential-thinking -- npx -y @modelcontextprotocol/server-sequential-thinking",
        "sequential-thinking",
        {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-sequential-thinking"]},
    ),
    # github/github-mcp-server: docker (env before --) and the remote server (http + header)
    (
        "claude mcp add github -e GITHUB_PERSONAL_ACCESS_TOKEN=your_github_pat -- docker run -i --rm "
        "-e GITHUB_PERSONAL_ACCESS_TOKEN ghcr.io/github/github-mcp-server",
        "github",
        {
            "command": "docker",
            "args": [
                "run",
                "-i",
                "--rm",
                "-e",
                "GITHUB_PERSONAL_ACCESS_TOKEN",
                "ghcr.io/github/github-mcp-server",
            ],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "your_github_pat"},
        },
    ),
    (
        'claude mcp add --transport http github https://api.githubcopilot.com/mcp -H "Authorization: Bearer YOUR_GITHUB_PAT"',  # noqa: E501 - as the README prints it
        "github",
        {
            "type": "http",
            "url": "https://api.githubcopilot.com/mcp",
            "headers": {"Authorization": "Bearer YOUR_GITHUB_PAT"},
        },
    ),
    # microsoft/playwright-mcp and ChromeDevTools/chrome-devtools-mcp: no --, the command follows NAME
    (
        "claude mcp add playwright npx @playwright/mcp@latest",
        "playwright",
        {"command": "npx", "args": ["@playwright/mcp@latest"]},
    ),
    (
        "claude mcp add chrome-devtools npx chrome-devtools-mcp@latest",
        "chrome-devtools",
        {"command": "npx", "args": ["chrome-devtools-mcp@latest"]},
    ),
    # upstash/context7: local with the command's own --api-key, remote over http and sse
    (
        "claude mcp add context7 -- npx -y @upstash/context7-mcp --api-key YOUR_API_KEY",
        "context7",
        {"command": "npx", "args": ["-y", "@upstash/context7-mcp", "--api-key", "YOUR_API_KEY"]},
    ),
    (
        'claude mcp add --transport http context7 https://mcp.context7.com/mcp --header "CONTEXT7_API_KEY: YOUR_API_KEY"',  # noqa: E501 - as the README prints it
        "context7",
        {
            "type": "http",
            "url": "https://mcp.context7.com/mcp",
            "headers": {"CONTEXT7_API_KEY": "YOUR_API_KEY"},
        },
    ),
    (
        "claude mcp add --transport sse context7 https://mcp.context7.com/sse",
        "context7",
        {"type": "sse", "url": "https://mcp.context7.com/sse"},
    ),
    # oraios/serena: uvx --from with a git URL after --
    (
        "claude mcp add serena -- uvx --from git+https://github.com/oraios/serena serena start-mcp-server "
        "--context ide-assistant --project /home/me/project",
        "serena",
        {
            "command": "uvx",
            "args": [
                "--from",
                "git+https://github.com/oraios/serena",
                "serena",
                "start-mcp-server",
                "--context",
                "ide-assistant",
                "--project",
                "/home/me/project",
            ],
        },
    ),
    # remote servers over HTTP and SSE (Notion, Asana, Sentry, Linear, Atlassian, Stripe, Vercel, Figma, HF)
    (
        "claude mcp add --transport http notion https://mcp.notion.com/mcp",
        "notion",
        {"type": "http", "url": "https://mcp.notion.com/mcp"},
    ),
    (
        "claude mcp add --transport sse asana https://mcp.asana.com/sse",
        "asana",
        {"type": "sse", "url": "https://mcp.asana.com/sse"},
    ),
    (
        "claude mcp add --transport http sentry https://mcp.sentry.dev/mcp",
        "sentry",
        {"type": "http", "url": "https://mcp.sentry.dev/mcp"},
    ),
    (
        "claude mcp add --transport sse linear-server https://mcp.linear.app/sse",
        "linear-server",
        {"type": "sse", "url": "https://mcp.linear.app/sse"},
    ),
    (
        "claude mcp add --transport sse atlassian https://mcp.atlassian.com/v1/sse",
        "atlassian",
        {"type": "sse", "url": "https://mcp.atlassian.com/v1/sse"},
    ),
    (
        "claude mcp add --transport http stripe https://mcp.stripe.com/",
        "stripe",
        {"type": "http", "url": "https://mcp.stripe.com/"},
    ),
    (
        "claude mcp add --transport http vercel https://mcp.vercel.com",
        "vercel",
        {"type": "http", "url": "https://mcp.vercel.com"},
    ),
    (
        "claude mcp add --transport sse figma-dev-mode-mcp-server http://127.0.0.1:3845/sse",
        "figma-dev-mode-mcp-server",
        {"type": "sse", "url": "http://127.0.0.1:3845/sse"},
    ),
    (
        'claude mcp add hf-mcp-server -t http https://huggingface.co/mcp -H "Authorization: Bearer <YOUR_HF_TOKEN>"',  # noqa: E501 - as the README prints it
        "hf-mcp-server",
        {
            "type": "http",
            "url": "https://huggingface.co/mcp",
            "headers": {"Authorization": "Bearer <YOUR_HF_TOKEN>"},
        },
    ),
    # Claude Code's MCP docs: headers over SSE and HTTP, --env with --transport stdio, -e around NAME
    (
        'claude mcp add --transport sse private-api https://api.company.com/sse --header "X-API-Key: your-key-here"',  # noqa: E501 - as the README prints it
        "private-api",
        {"type": "sse", "url": "https://api.company.com/sse", "headers": {"X-API-Key": "your-key-here"}},
    ),
    (
        'claude mcp add --transport http secure-server https://api.example.com/mcp --header "Authorization: Bearer your-token"',  # noqa: E501 - as the README prints it
        "secure-server",
        {
            "type": "http",
            "url": "https://api.example.com/mcp",
            "headers": {"Authorization": "Bearer your-token"},
        },
    ),
    (
        "claude mcp add --transport stdio airtable --env AIRTABLE_API_KEY=YOUR_KEY -- npx -y airtable-mcp-server",  # noqa: E501 - as the README prints it
        "airtable",
        {"command": "npx", "args": ["-y", "airtable-mcp-server"], "env": {"AIRTABLE_API_KEY": "YOUR_KEY"}},
    ),
    (
        "claude mcp add my-server -e API_KEY=123 -- /path/to/server arg1 arg2",
        "my-server",
        {"command": "/path/to/server", "args": ["arg1", "arg2"], "env": {"API_KEY": "123"}},
    ),
    (
        "claude mcp add -e API_KEY=123 my-server -- /path/to/server arg1 arg2",
        "my-server",
        {"command": "/path/to/server", "args": ["arg1", "arg2"], "env": {"API_KEY": "123"}},
    ),
    # supabase-community/supabase-mcp: -s local and -e between NAME and --
    (
        "claude mcp add supabase -s local -e SUPABASE_ACCESS_TOKEN=your_token_here -- npx -y "
        "@supabase/mcp-server-supabase@latest",
        "supabase",
        {
            "command": "npx",
            "args": ["-y", "@supabase/mcp-server-supabase@latest"],
            "env": {"SUPABASE_ACCESS_TOKEN": "your_token_here"},
        },
    ),
    # bytebase/dbhub: the command's own --transport after -- is the server's, not ours
    (
        'claude mcp add dbhub -- npx @bytebase/dbhub --transport stdio --dsn "postgres://user:password@localhost:5432/dbname?sslmode=disable"',
        "dbhub",
        {
            "command": "npx",
            "args": [
                "@bytebase/dbhub",
                "--transport",
                "stdio",
                "--dsn",
                "postgres://user:password@localhost:5432/dbname?sslmode=disable",
            ],
        },
    ),
    # modelcontextprotocol/servers (archived): puppeteer through docker, with the command's own -e
    (
        "claude mcp add puppeteer -- docker run -i --rm --init -e DOCKER_CONTAINER=true mcp/puppeteer",
        "puppeteer",
        {
            "command": "docker",
            "args": ["run", "-i", "--rm", "--init", "-e", "DOCKER_CONTAINER=true", "mcp/puppeteer"],
        },
    ),
]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def mcpvisor_argv(line: str) -> list[str]:
    """The line as a shell would split it, with ``claude`` replaced by ``mcpvisor`` (and dropped:
    `Cli` runs mcpvisor's main)."""
    words = shlex.split(line)
    assert words[0] == "claude", line
    return words[1:]


def test_there_are_enough_lines() -> None:
    assert len(LINES) >= 25
    assert len({line for line, _, _ in LINES}) == len(LINES)


@pytest.mark.parametrize(
    ("line", "name", "entry"), LINES, ids=[f"{i:02d}-{n}" for i, (_, n, _) in enumerate(LINES)]
)
def test_install_line_writes_exactly_its_entry(cli: Cli, line: str, name: str, entry: dict[str, Any]) -> None:
    done = cli(*mcpvisor_argv(line))
    assert done.code == 0, done.err
    assert cli.doc() == {"mcpServers": {name: entry}}
    assert sorted(p.name for p in cli.cwd.iterdir()) == ["mcpvisor.json"]  # no lock, no temp file


MALFORMED: list[tuple[tuple[str, ...], str]] = [
    (("mcp", "add"), "missing NAME"),
    (("mcp", "add", "--", "npx", "-y", "@modelcontextprotocol/server-filesystem"), "missing NAME"),
    (("mcp", "add", "fs", "--"), "nothing after --"),
    (("mcp", "add", "fs", "-e", "K=V", "--"), "nothing after --"),
    (
        ("mcp", "add", "docs", "--transport", "stdio", "https://example.com/mcp"),
        "needs --transport http, sse or ws",
    ),
    (
        ("mcp", "add", "docs", "--transport", "stdio", "--url", "https://example.com/mcp"),
        "needs --transport http",
    ),
    (("mcp", "add", "--transport", "grpc", "docs", "https://example.com/mcp"), "invalid choice: 'grpc'"),
    (("mcp", "add", "keep", "--", "npx", "other"), "'keep' already exists"),
    (("mcp", "add-json", "keep", '{"command": "other"}'), "'keep' already exists"),
    (("mcp", "add-json", "j", '{"command": 5, "env": {"A": 1}}'), 'field "command": expected a string'),
    (("mcp", "add-json", "j", '{"command": "x", "bogus": 1}'), 'unknown field "bogus"'),
    (("mcp", "add-json", "j", '{"type": "http"}'), 'needs field "url"'),
    (("mcp", "add-json", "j", '{"command": '), "JSON: Expecting value"),
    (("mcp", "add-json", "j", '["x"]'), "expected an object"),
]


@pytest.mark.parametrize(("args", "message"), MALFORMED, ids=[" ".join(a)[:50] for a, _ in MALFORMED])
def test_malformed_forms_exit_2_naming_the_problem_and_change_nothing(
    cli: Cli, args: tuple[str, ...], message: str
) -> None:
    cli.write({"mcpServers": {"keep": {"command": "npx", "args": ["keep"]}}})
    before = {p.name: p.read_bytes() for p in cli.cwd.iterdir()}
    done = cli(*args)
    assert done.code == 2, done
    assert message in done.err
    assert {p.name: p.read_bytes() for p in cli.cwd.iterdir()} == before


def test_add_json_reports_every_problem_on_its_own_line(cli: Cli) -> None:
    done = cli("mcp", "add-json", "j", '{"command": 5, "args": "a", "bogus": 1}')
    assert done.code == 2
    lines = [line for line in done.err.splitlines() if "mcp add-json j" in line]
    assert len(lines) == 3, done.err
    assert ['"command"' in lines[0], '"args"' in lines[1], '"bogus"' in lines[2]] == [True] * 3
    assert not cli.config.exists()


def test_add_json_writes_the_entry_without_empty_fields(cli: Cli) -> None:
    entry = '{"type": "stdio", "command": "/path/to/weather-cli", "args": ["--api-key", "abc"], "env": {}}'
    assert cli("mcp", "add-json", "weather", entry).code == 0
    assert cli.doc() == {
        "mcpServers": {
            "weather": {"type": "stdio", "command": "/path/to/weather-cli", "args": ["--api-key", "abc"]}
        }
    }


def test_scopes_write_claude_codes_files(cli: Cli) -> None:
    """local: the lookup's file (here a new ./mcpvisor.json); project: ./.mcp.json; user: the user config."""
    assert cli("mcp", "add", "a", "-s", "local", "--", "x").code == 0
    assert cli("mcp", "add", "b", "--scope", "project", "--", "x").code == 0
    assert cli("mcp", "add-json", "c", '{"command": "x"}', "-s", "user").code == 0
    assert list(cli.doc()["mcpServers"]) == ["a"]
    assert list(cli.doc(cli.cwd / ".mcp.json")["mcpServers"]) == ["b"]
    assert list(cli.doc(cli.root / "xdg" / "mcpvisor" / "mcpvisor.json")["mcpServers"]) == ["c"]
    assert cli("mcp", "add", "d", "--", "x").code == 0  # local again: the lookup finds ./mcpvisor.json first
    assert list(cli.doc()["mcpServers"]) == ["a", "d"]


def test_get_is_info(cli: Cli) -> None:
    cli.write({"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "secret"}}}})
    get = cli("mcp", "get", "a", "--no-probe", "--format", "json")
    info = cli("mcp", "info", "a", "--no-probe", "--format", "json")
    assert (get.code, get.out) == (0, info.out)
    assert get.json()["config"]["env"]["TOKEN"] == "***"


def test_add_from_claude_desktop_is_import_claude_desktop(cli: Cli) -> None:
    desktop = cli.write(
        {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}},
        cli.root / "claude_desktop_config.json",
    )
    done = cli("mcp", "add-from-claude-desktop", str(desktop), "--yes")
    assert done.code == 0, done.err
    assert cli.doc()["mcpServers"]["time"] == {"command": "uvx", "args": ["mcp-server-time"]}


# --- the lines run ---------------------------------------------------------------------------


def test_the_filesystem_line_is_online(cli: Cli) -> None:
    """npx finds the pinned package through ./node_modules as it would in a project that has it
    (no registry access during the test)."""
    modules = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem"
    missing = ("npx is not installed (node is required by this test)" if shutil.which("npx") is None
               else None if modules.is_dir() else f"run `npm ci --prefix {NPM_DIR}` first (.ci/run does)")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)  # CI installs everything: a missing piece is a failure there
        pytest.skip(missing)
    (cli.cwd / "node_modules").symlink_to(NPM_DIR / "node_modules", target_is_directory=True)
    shared = cli.root / "shared"
    shared.mkdir()
    line = f"claude mcp add filesystem -- npx -y @modelcontextprotocol/server-filesystem {shared}"
    assert cli(*mcpvisor_argv(line)).code == 0
    offline = {"npm_config_offline": "true", "npm_config_update_notifier": "false"}
    done = cli("mcp", "test", "filesystem", "--timeout", "60", "--format", "json", env=offline)
    assert done.code == 0, done.out + done.err
    result = done.json()
    assert result["ok"] is True
    assert "read_text_file" in {tool["name"] for tool in result["tools"]}


def test_the_python_m_time_line_is_online(cli: Cli) -> None:
    """`python` is the one on PATH, as for a user with the venv active."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    assert (
        cli(*mcpvisor_argv("claude mcp add time -- python -m mcp_server_time --local-timezone=UTC")).code == 0
    )
    done = cli("mcp", "test", "time", "--timeout", "60", "--format", "json", env={"PATH": path})
    assert done.code == 0, done.out + done.err
    assert {"get_current_time", "convert_time"} <= {tool["name"] for tool in done.json()["tools"]}


def test_what_follows_the_command_is_the_commands(cli: Cli) -> None:
    """A second -- and, without --, options after the command word belong to the server."""
    assert cli("mcp", "add", "a", "-e", "K=V", "--", "cmd", "--", "-e", "x").code == 0
    assert cli("mcp", "add", "b", "npx", "@playwright/mcp@latest", "--headless", "-e", "K=V").code == 0
    assert cli.doc()["mcpServers"] == {
        "a": {"command": "cmd", "args": ["--", "-e", "x"], "env": {"K": "V"}},
        "b": {"command": "npx", "args": ["@playwright/mcp@latest", "--headless", "-e", "K=V"]},
    }


def test_a_stray_word_before_dashes_is_refused(cli: Cli) -> None:
    done = cli("mcp", "add", "a", "npx", "--", "server")
    assert done.code == 2
    assert "unexpected 'npx' before --" in done.err
    extra = cli("mcp", "add", "a", "https://example.com/mcp", "more", "--", "server")
    assert extra.code == 2
    assert "unrecognized arguments: more" in extra.err
    assert not cli.config.exists()
