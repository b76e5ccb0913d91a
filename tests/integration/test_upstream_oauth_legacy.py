"""Remote servers written to the 2025-03-26 authorization spec: OAuth without its metadata.

`tests/servers/oauth_protected.py --discovery MODE` plays them: ``as`` answers its 401
with a bare ``Bearer`` challenge and serves no Protected Resource Metadata, only the
authorization server metadata at its origin; ``none`` serves no metadata at all, only the
spec's default ``/register``, ``/authorize`` and ``/token``; ``closed`` answers 401 with no
challenge and has no way to log in. The proxy is a real ``mcpvisor serve`` over stdio and
the login a real ``mcpvisor mcp login --no-browser``, whose printed URL the test opens the
way a person's browser would.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Final

import pytest
import trio
from mcp import Client

from tests.helpers import PY, REAL_IO_BOUND_S, http_client, text_of
from tests.integration.test_upstream_oauth import (
    LOGIN_MESSAGE,
    admin,
    assert_no_token_in,
    cli,
    config,
    env,
    no_browser,
    protected,
    serving,
    state_is,
    status_of,
)
from tests.polling import poll_until

pytestmark = pytest.mark.slow

AUTHORIZE: Final = re.compile(rb"http://\S+/authorize\?\S+\s")
"""The authorization URL ``mcp login --no-browser`` prints, once its line is complete."""


async def login_without_browser(tmp_path: Path) -> tuple[int, str]:
    """``mcpvisor mcp login prot --no-browser``: open the URL it prints as a person would
    (the test server's ``/authorize`` redirects at once to the login's listener); return
    its exit code and stderr."""
    browser, _ = no_browser(tmp_path)
    proc = await trio.lowlevel.open_process(
        [PY, "-m", "mcpvisor", "mcp", "login", "prot", "--no-browser",
         "--config", str(tmp_path / "mcpvisor.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(tmp_path, browser))
    err = b""
    try:
        assert proc.stderr is not None
        while not AUTHORIZE.search(err):  # the whole URL, up to the line's end
            chunk = await proc.stderr.receive_some(65536)
            if not chunk:
                break
            err += chunk
        found = AUTHORIZE.search(err)
        if found is not None:
            async with http_client() as http:
                page = await http.get(found.group().decode().strip(), follow_redirects=True)
            assert "logged in to prot" in page.text
        while chunk := await proc.stderr.receive_some(65536):
            err += chunk
        return await proc.wait(), err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


@pytest.mark.parametrize("discovery", ["as", "none"])
async def test_a_server_without_resource_metadata_logs_in_and_serves(tmp_path: Path, discovery: str) -> None:
    """A server of the 2025-03-26 spec (metadata at its origin only, or none at all) is
    ``needs_login`` to ``mcp test`` and in a proxy that may not open a browser; ``mcp login --no-browser``
    completes against it (registration, authorization and token at the endpoints its
    metadata names or at the defaults); the running proxy then calls its tools, and keeps
    doing so when its access token dies (a refresh at the same token endpoint); no token
    reaches the proxy's debug log."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected("--discovery", discovery) as url:
            config(tmp_path, url, open_browser=False)
            probe = await trio.to_thread.run_sync(cli, tmp_path, "test", "prot")
            assert probe.returncode == 1
            assert LOGIN_MESSAGE in probe.stdout
            async with serving(tmp_path, no_browser(tmp_path)[0], tmp_path / "serve.log") as client:
                await poll_until(lambda: state_is(client, "needs_login"))
                assert (await status_of(client))["reason"] == LOGIN_MESSAGE
                code, err = await login_without_browser(tmp_path)
                assert code == 0, err
                await poll_until(lambda: state_is(client, "ready"))
                assert text_of(await client.call_tool("whoami", {})) == "logged in"
                await admin(url, "expire")
                assert text_of(await client.call_tool("whoami", {})) == "logged in"
            stats = await admin(url, "stats")
            assert (stats["register"], stats["authorization_code"], stats["refresh_token"]) == (1, 1, 1)
            assert_no_token_in(tmp_path / "serve.log", set(stats["access"]) | set(stats["refresh"]))


async def test_a_401_with_no_way_to_log_in_says_what_was_tried(tmp_path: Path) -> None:
    """A server that answers 401 with no challenge and no metadata is not ``needs_login``
    (nothing says a login would help): its status and ``mcp test`` name the server, the
    metadata URLs tried and what to do; ``mcp login`` fails with the default registration
    endpoint it tried, in one plain line."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected("--discovery", "closed") as url:
            base = url.removesuffix("/mcp")
            config(tmp_path, url, open_browser=True)
            browser, opened = no_browser(tmp_path)
            async with serving(tmp_path, browser, tmp_path / "serve.log") as client:
                await poll_until(lambda: reason_has(client, "offers no way to log in"))
                status = await status_of(client)
                reason = status["reason"]
                assert status["state"] != "needs_login"
                assert reason.startswith("server prot answered HTTP 401 and offers no way to log in:")
                assert f"{base}/.well-known/oauth-protected-resource/mcp: 404" in reason
                assert f"{base}/.well-known/oauth-authorization-server: 404" in reason
                assert "run mcpvisor mcp login prot" in reason
            probe = await trio.to_thread.run_sync(cli, tmp_path, "test", "prot")
            assert probe.returncode == 1
            assert "server prot answered HTTP 401 and offers no way to log in" in probe.stdout
            assert "HTTP 404" not in probe.stdout  # not the last answer of the discovery
            login = await trio.to_thread.run_sync(cli, tmp_path, "login", "prot")
            assert login.returncode == 1
            assert login.stderr.strip().splitlines() == [
                f"mcpvisor: login to prot failed: server prot answered HTTP 401 and offers no way to log in: "
                f"no OAuth metadata (tried {base}/.well-known/oauth-protected-resource/mcp: 404, "
                f"{base}/.well-known/oauth-protected-resource: 404, "
                f"{base}/.well-known/oauth-authorization-server: 404), "
                f"and no client registration at {base}/register: 404"]
            assert not opened.exists()


async def reason_has(client: Client, words: str) -> bool:
    status = await status_of(client)
    return words in (status.get("reason") or "")
