"""Claude Code's own CLI connects to mcpvisor on the first try (issue 25, item 1).

``claude mcp list`` (npm ``@anthropic-ai/claude-code``, pinned in tests/npm-servers,
installed by tests/setup.sh; it needs no account) starts each configured server, asks
for its tools and gives up after about 5 s (``! Connected · tools fetch failed``). Here
it is given exactly what a user types — ``claude mcp add mcpvisor -- mcpvisor serve`` —
in front of the nine real servers of the first-hour config, one of which takes 12 s to
start, with an empty state directory (nothing remembered: the worst case), and must
report mcpvisor ``Connected``. HOME is a temporary directory, so the user's own Claude
Code settings are neither read nor touched. No process is left behind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Final

import psutil
import pytest
import trio

from tests.helpers import PY, SERVERS_DIR
from tests.integration.real_servers import NPM_BIN, real_config, servers_or_skip
from tests.security.proxy import running_proxy

pytestmark = pytest.mark.slow

BOUND_S: Final = 60.0

EXIT_S: Final = 20.0
"""How long the proxy and its servers may take to exit once Claude Code closed the
proxy's stdin (the proxy stops each server: close stdin, 2 s, SIGTERM, 2 s, SIGKILL)."""


def claude_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update(HOME=str(home), CI="true", DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1",
               DISABLE_ERROR_REPORTING="1")
    return env


def left_behind(marker: str) -> list[psutil.Process]:
    """Processes of this test still running: their command line names its directory."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.mark.parametrize("exposure", ["menu", "all"])
async def test_claude_code_reports_mcpvisor_connected(tmp_path: Path, exposure: str) -> None:
    servers_or_skip()
    config = real_config(tmp_path, exposure=exposure)
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    claude = str(NPM_BIN / "claude")
    env = claude_env(home)
    try:
        await check_connected(claude, config, project, env, tmp_path)
    finally:
        for proc in left_behind(str(tmp_path)):  # only after a failure: never leave one running
            proc.kill()


async def check_connected(claude: str, config: Path, project: Path, env: dict[str, str],
                          tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        added = await trio.run_process(
            [claude, "mcp", "add", "mcpvisor", "--", PY, "-m", "mcpvisor", "serve", "--config", str(config),
             "--state-dir", str(tmp_path / "state")],
            cwd=project, env=env, capture_stdout=True, capture_stderr=True, stdin=b"")
        assert b"Added stdio MCP server mcpvisor" in added.stdout, added.stdout + added.stderr
        listed = await trio.run_process([claude, "mcp", "list"], cwd=project, env=env, capture_stdout=True,
                                        capture_stderr=True, stdin=b"", check=False)
        out = listed.stdout.decode()
        sys.stdout.write(out)
        line = next((ln for ln in out.splitlines() if ln.startswith("mcpvisor:")), None)
        assert line is not None, out + listed.stderr.decode()
        assert line.endswith("✔ Connected"), line
        assert "failed" not in line
        # Claude Code closed the proxy: it and every server it started exit.
        _, alive = await trio.to_thread.run_sync(psutil.wait_procs, left_behind(str(tmp_path)), EXIT_S)
        assert not alive, [p.info["cmdline"] for p in alive]


async def test_claude_code_connects_to_the_http_front(tmp_path: Path) -> None:
    """``claude mcp add --transport http`` of a running ``serve --transport http``: Claude Code
    (its own streamable-HTTP client, which speaks 2026-07-28 here: a ``server/discover``
    probe, a ``subscriptions/listen`` stream, the lists) reports it ``Connected``."""
    config = tmp_path / "mcpvisor.json"
    config.write_text(json.dumps({
        "mcpServers": {"up": {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", "up"]}},
        "settings": {"exposure": "all", "startupWait": "30s"},
    }))
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    claude = str(NPM_BIN / "claude")
    env = claude_env(home)
    with trio.fail_after(BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0",
                                 env={"MCPVISOR_STATE_DIR": str(tmp_path / "state")}) as proxy:
            added = await trio.run_process(
                [claude, "mcp", "add", "--transport", "http", "mcpvisor", proxy.url],
                cwd=project, env=env, capture_stdout=True, capture_stderr=True, stdin=b"")
            assert b"Added HTTP MCP server mcpvisor" in added.stdout, added.stdout + added.stderr
            listed = await trio.run_process([claude, "mcp", "list"], cwd=project, env=env,
                                            capture_stdout=True, capture_stderr=True, stdin=b"", check=False)
            out = listed.stdout.decode()
            line = next((ln for ln in out.splitlines() if ln.startswith("mcpvisor:")), None)
            assert line is not None, out + listed.stderr.decode()
            assert line.endswith("✔ Connected"), line
