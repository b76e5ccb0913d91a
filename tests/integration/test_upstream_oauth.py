"""mcpvisor logs in to a remote server that needs OAuth (issue 27), against a real one.

`tests/servers/oauth_protected.py` is an MCP server behind bearer tokens with its own
authorization server (metadata, DCR, an ``/authorize`` that redirects at once, token,
refresh with rotation, revoke) on 127.0.0.1; `tests/servers/follow_browser.py` is the
``$BROWSER`` that follows its redirect to the login's loopback listener. The proxy is a
real ``mcpvisor serve`` over stdio, its stderr captured at debug level; the logins are
real ``mcpvisor mcp login`` / ``logout`` commands.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from mcpvisor.actors.core.spec import ServerSpec
from mcpvisor.actors.link.oauth import UpstreamAuth
from mcpvisor.actors.link.oauth_store import REFRESH_AT
from mcpvisor.tokens import FileTokenStore
from tests.helpers import PY, REAL_IO_BOUND_S, SERVERS_DIR, http_client, http_fixture, proxy_params, text_of
from tests.integration.dashboard import server_state
from tests.integration.dashboard import serving as serving_dashboard
from tests.polling import poll_until

pytestmark = pytest.mark.slow

BROWSER: Final = str(SERVERS_DIR / "follow_browser.py")
LOGIN_MESSAGE: Final = "server prot needs a login: run mcpvisor mcp login prot"
CONCURRENT_CALLS: Final = 10


@asynccontextmanager
async def protected(*flags: str) -> AsyncIterator[str]:
    """Start oauth_protected.py; yield its MCP URL; kill it after."""
    async with http_fixture("oauth_protected.py", *flags) as (_, url):
        yield url


async def admin(url: str, what: str) -> dict[str, Any]:
    """The test server's ``/admin/stats`` (GET) or one of its POSTs."""
    base = url.removesuffix("/mcp")
    async with http_client() as http:
        address = f"{base}/admin/{what}"
        response = await (http.get(address) if what == "stats" else http.post(address))
    result: dict[str, Any] = response.json()
    return result


def config(tmp_path: Path, url: str, *, open_browser: bool, namespacing: str = "none") -> Path:
    path = tmp_path / "mcpvisor.json"
    path.write_text(json.dumps({
        "mcpServers": {"prot": {"type": "http", "url": url, "protocol": "legacy", "restartWait": "30s"}},
        "settings": {"exposure": "all", "namespacing": namespacing, "startupWait": "60s",
                     "startupTimeout": "60s",
                     "oauth": {"openBrowser": open_browser}},
    }))
    return path


def env(tmp_path: Path, browser: str) -> dict[str, str]:
    return {**os.environ, "BROWSER": browser, "MCPVISOR_STATE_DIR": str(tmp_path / "state")}


def cli(tmp_path: Path, *args: str, browser: str = BROWSER) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "mcpvisor", "mcp", *args, "--config", str(tmp_path / "mcpvisor.json")],
                          capture_output=True, text=True, env=env(tmp_path, browser), timeout=REAL_IO_BOUND_S)


def no_browser(tmp_path: Path) -> tuple[str, Path]:
    """A ``$BROWSER`` that only notes it was opened (and fails: nobody logs in)."""
    marker = tmp_path / "browser-opened"
    script = tmp_path / "no_browser.sh"
    script.write_text(f"#!/bin/sh\necho \"$1\" >> {marker}\nexit 1\n")
    script.chmod(0o755)
    return str(script), marker


@asynccontextmanager
async def serving(tmp_path: Path, browser: str, log: Path) -> AsyncIterator[Client]:
    """``mcpvisor serve --log-level debug`` over stdio, its stderr in ``log``."""
    params = proxy_params(tmp_path / "mcpvisor.json", "--log-level", "debug", env=env(tmp_path, browser))
    with log.open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", cache=None) as client:
            yield client


async def status_of(client: Client) -> dict[str, Any]:
    result = await client.call_tool("get-server-status", {})
    servers: list[dict[str, Any]] = (result.structured_content or {}).get("servers", [])
    return next(s for s in servers if s["name"] == "prot")


async def state_is(client: Client, state: str) -> bool:
    return bool((await status_of(client))["state"] == state)


async def refusal(client: Client, tool: str) -> str:
    """What a call to ``tool`` that cannot be served says (a JSON-RPC error or an error result)."""
    try:
        result = await client.call_tool(tool, {})
    except MCPError as exc:
        return exc.error.message
    assert result.is_error, text_of(result)
    return text_of(result)


def stored(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((tmp_path / "state" / "oauth" / "prot.json").read_text())
    entry: dict[str, Any] = doc["issuers"][doc["issuer"]]
    return entry


def assert_no_token_in(log: Path, tokens: set[str]) -> None:
    text = log.read_text()
    assert "DEBUG" in text or "debug" in text  # the log was captured at debug level
    leaked = [t for t in tokens if t in text]
    assert not leaked, f"token values in the proxy's log: {len(leaked)}"


async def test_login_then_a_restarted_proxy_uses_the_stored_tokens_and_logout_revokes(tmp_path: Path) -> None:
    """`mcp test` of a server that needs a login says so; `mcp login` stores tokens (0600 in
    a 0700 directory) and `mcp test` then connects with them; a proxy started afterwards
    serves the server with them and opens no browser; `mcp logout` revokes and deletes
    them; no token value ever reaches the proxy's debug log."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected() as url:
            config(tmp_path, url, open_browser=True)
            probe = await trio.to_thread.run_sync(cli, tmp_path, "test", "prot")
            assert probe.returncode == 1
            assert LOGIN_MESSAGE in probe.stdout
            login = await trio.to_thread.run_sync(cli, tmp_path, "login", "prot")
            assert login.returncode == 0, login.stderr
            assert "Logged in to prot" in login.stdout
            probe = await trio.to_thread.run_sync(cli, tmp_path, "test", "prot")
            assert probe.returncode == 0, probe.stdout
            token_file = tmp_path / "state" / "oauth" / "prot.json"
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            tokens = {stored(tmp_path)["tokens"]["access_token"], stored(tmp_path)["tokens"]["refresh_token"]}
            browser, opened = no_browser(tmp_path)
            log = tmp_path / "serve.log"
            for _ in range(2):  # two proxy lives on the same stored tokens
                async with serving(tmp_path, browser, log) as client:
                    await poll_until(functools.partial(state_is, client, "ready"))
                    assert text_of(await client.call_tool("whoami", {})) == "logged in"
            assert not opened.exists()
            stats = await admin(url, "stats")
            assert stats["authorization_code"] == 1  # the CLI's login only
            logout = await trio.to_thread.run_sync(cli, tmp_path, "logout", "prot")
            assert logout.returncode == 0, logout.stderr
            assert "revoked: refresh_token, access_token" in logout.stdout
            assert not token_file.exists()
            after = await admin(url, "stats")
            assert after["revoked"] == 2
            assert not set(after["access"]) & tokens
            assert_no_token_in(log, tokens)


async def test_the_proxy_logs_in_by_itself_and_ten_refused_calls_refresh_once(tmp_path: Path) -> None:
    """With no stored tokens and ``openBrowser`` on, ``serve`` runs the login itself
    through ``$BROWSER``; when every access token dies, ten concurrent calls all succeed
    after exactly one refresh."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected() as url:
            config(tmp_path, url, open_browser=True)
            log = tmp_path / "serve.log"
            async with serving(tmp_path, BROWSER, log) as client:
                await poll_until(lambda: state_is(client, "ready"))
                assert (await admin(url, "stats"))["authorization_code"] == 1
                await admin(url, "expire")
                results: list[str] = []

                async def call() -> None:
                    results.append(text_of(await client.call_tool("whoami", {})))

                async with trio.open_nursery() as nursery:
                    for _ in range(CONCURRENT_CALLS):
                        nursery.start_soon(call)
                assert results == ["logged in"] * CONCURRENT_CALLS
                stats = await admin(url, "stats")
                assert stats["refresh_token"] == 1
                assert stats["authorization_code"] == 1
            assert_no_token_in(log, set(stats["access"]) | set(stats["refresh"]))


async def test_invalid_grant_means_needs_login_until_mcp_login(tmp_path: Path) -> None:
    """With ``openBrowser`` off: a server with no tokens is ``needs_login`` (no backoff,
    no breaker) and its calls say how to log in; `mcp login` in another process brings it
    up; a refresh refused with ``invalid_grant`` deletes the tokens and it needs a login
    again, with the same words."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected() as url:
            # Prefixed names: a call names its server before the server ever listed a tool.
            config(tmp_path, url, open_browser=False, namespacing="prefix")
            browser, opened = no_browser(tmp_path)
            async with serving(tmp_path, browser, tmp_path / "serve.log") as client:
                await poll_until(lambda: state_is(client, "needs_login"))
                status = await status_of(client)
                assert status["restarts"] == 0
                assert status["circuit"] == "closed"
                assert status["reason"] == LOGIN_MESSAGE
                assert LOGIN_MESSAGE in await refusal(client, "prot_whoami")
                login = await trio.to_thread.run_sync(cli, tmp_path, "login", "prot")
                assert login.returncode == 0, login.stderr
                await poll_until(lambda: state_is(client, "ready"))
                assert text_of(await client.call_tool("prot_whoami", {})) == "logged in"
                await admin(url, "revoke-grants")
                await refusal(client, "prot_whoami")  # refused: the refresh gets invalid_grant
                await poll_until(lambda: state_is(client, "needs_login"))
                assert LOGIN_MESSAGE in await refusal(client, "prot_whoami")
                assert "tokens" not in stored(tmp_path)
                assert (await status_of(client))["restarts"] == 0
            assert not opened.exists()


async def test_a_token_is_refreshed_at_eighty_percent_of_its_life(tmp_path: Path) -> None:
    """Before `REFRESH_AT` of a token's lifetime the stored token goes out as it is; after
    it, one refresh first (on a clock the test moves, against the real server)."""
    now = [time.time()]
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected("--expires-in", "1000") as url:
            config(tmp_path, url, open_browser=True)
            assert (await trio.to_thread.run_sync(cli, tmp_path, "login", "prot")).returncode == 0
            obtained = stored(tmp_path)["obtainedAt"]
            spec = ServerSpec(name="prot", transport="http", url=url)
            auth = UpstreamAuth(spec, FileTokenStore(tmp_path / "state", "prot"), clock=lambda: now[0])
            body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            async with http_client(auth=auth.provider) as http:
                now[0] = obtained + (REFRESH_AT - 0.01) * 1000
                assert (await http.post(url, json=body)).status_code == 200
                assert (await admin(url, "stats"))["refresh_token"] == 0
                now[0] = obtained + (REFRESH_AT + 0.01) * 1000
                assert (await http.post(url, json=body)).status_code == 200
                assert (await admin(url, "stats"))["refresh_token"] == 1
                assert (await http.post(url, json=body)).status_code == 200
                assert (await admin(url, "stats"))["refresh_token"] == 1
            assert stored(tmp_path)["obtainedAt"] == now[0]



async def test_the_dashboard_log_in_button_starts_the_login_and_answers_the_url(tmp_path: Path) -> None:
    """The dashboard shows a server that needs a login as ``needs_login``; its "Log in"
    (``POST /api/servers/NAME/login``) starts the login in the proxy and answers the
    authorization URL; once a person has opened it, the server is ready; a server that is
    ready needs no login (409); the dashboard never shows a token."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected() as url:
            config(tmp_path, url, open_browser=False)
            async with serving_dashboard(tmp_path, tmp_path / "mcpvisor.json") as dash, \
                    http_client() as http:
                login = f"{dash.base}/api/servers/prot/login"
                await poll_until(lambda: dashboard_state_is(http, dash.base, "needs_login"))
                assert (await http.post(login)).status_code == 401  # the dashboard's token first
                answer = await http.post(login, headers=dash.auth())
                assert answer.status_code == 200, answer.text
                page = await http.get(answer.json()["url"], follow_redirects=True)  # the person
                assert "logged in to prot" in page.text
                await poll_until(lambda: dashboard_state_is(http, dash.base, "ready"))
                again = await http.post(login, headers=dash.auth())
                assert again.status_code == 409
                assert "needs no login" in again.json()["error"]
                shown = (await http.get(f"{dash.base}/api/servers", headers=dash.auth())).text
            stats = await admin(url, "stats")
            assert stats["authorization_code"] == 1
            assert not [t for t in stats["access"] + stats["refresh"] if t in shown]


async def dashboard_state_is(http: httpx2.AsyncClient, base: str, state: str) -> bool:
    return await server_state(http, base, "prot") == state


async def test_a_call_waits_for_the_login_the_proxy_runs_in_the_browser(tmp_path: Path) -> None:
    """A server that needs a login is listed from its remembered catalog; while the proxy's
    own browser login runs, a call to one of its tools waits for it (bounded by
    ``restartWait``) and is answered once the person has logged in, instead of failing with
    "needs a login". The browser is held until the call has reached the server's actor."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    browser = tmp_path / "held_browser.sh"
    browser.write_text(f"#!/bin/sh\nread go < {gate}\nexec {PY} {BROWSER} \"$1\"\n")
    browser.chmod(0o755)

    def release() -> None:
        with gate.open("w") as fifo:
            fifo.write("go\n")

    with trio.fail_after(REAL_IO_BOUND_S):
        async with protected() as url:
            config(tmp_path, url, open_browser=True)
            async with serving(tmp_path, BROWSER, tmp_path / "first.log") as client:
                await poll_until(lambda: state_is(client, "ready"))  # its tools are remembered
            assert (await trio.to_thread.run_sync(cli, tmp_path, "logout", "prot")).returncode == 0
            try:
                async with serving(tmp_path, str(browser), tmp_path / "serve.log") as client:
                    await poll_until(lambda: reason_is(client, "waiting for the login in the browser"))
                    assert "whoami" in {t.name for t in (await client.list_tools()).tools}
                    answers: list[str] = []

                    async def call() -> None:
                        answers.append(text_of(await client.call_tool("whoami", {})))

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(call)
                        await poll_until(lambda: calls_seen(client, 1))
                        await trio.to_thread.run_sync(release)
                    assert answers == ["logged in"]
            finally:
                unblock(gate)


def unblock(gate: Path) -> None:
    """Let a held browser go (its page then fails and it exits), if it still waits."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # nobody reads: it went already
    with os.fdopen(fd, "w") as fifo:
        fifo.write("go\n")


async def reason_is(client: Client, reason: str) -> bool:
    status = await status_of(client)
    return bool(status["state"] == "needs_login" and status.get("reason") == reason)


async def calls_seen(client: Client, count: int) -> bool:
    return bool((await status_of(client)).get("calls", 0) >= count)
