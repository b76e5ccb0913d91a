"""A token added by a hot reload guards a running, previously open, loopback proxy at once.

A real ``mcpvisor serve`` on 127.0.0.1 with no token at all serves everyone (loopback
needs none); the config then gains ``settings.authToken`` and the proxy gets SIGHUP. From
the next request on, ``/mcp``, the dashboard API and new websocket handshakes need that
token, and the reload's log line says the auth settings changed (issue 23 item 11).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Final

import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S, flaky, http_client
from tests.security.proxy import HTTP_HEADERS, INIT, Proxy, running_proxy, write
from tests.security.test_security_tokens import raw_handshake

pytestmark = pytest.mark.slow

ADDED_TOKEN: Final = "added-by-reload-0123456789abcdef"


def open_env() -> dict[str, str]:
    """The environment without ``$MCPVISOR_TOKEN``: the proxy starts with no token at all."""
    return {k: v for k, v in os.environ.items() if k != "MCPVISOR_TOKEN"}


def add_token(config: Path) -> None:
    doc = json.loads(config.read_text())
    doc.setdefault("settings", {})["authToken"] = ADDED_TOKEN
    config.write_text(json.dumps(doc))


async def add_token_and_reload(config: Path, proxy: Proxy) -> str:
    """Put `ADDED_TOKEN` in ``settings.authToken``, SIGHUP, and return the reload's log line."""
    seen = len(proxy.log)
    add_token(config)
    proxy.process.send_signal(signal.SIGHUP)
    return await proxy.wait_log("config reloaded", after=seen)


async def test_a_token_added_by_reload_guards_mcp_and_the_dashboard_api_at_once(tmp_path: Path) -> None:
    """Before the reload a request with no token gets a session and the API answers; after
    it the same requests get 401 (``WWW-Authenticate: Bearer`` on ``/mcp``), the token gets
    in on both, and the log says what changed without the token's value."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (
            running_proxy(config, "--transport", "http", "--port", "0", env=open_env()) as proxy,
            http_client() as http,
        ):
            api = proxy.url.removesuffix("/mcp") + "/api/servers"
            bearer = {"Authorization": f"Bearer {ADDED_TOKEN}"}
            assert (await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)).status_code == 200
            assert (await http.get(api)).status_code == 200

            line = await add_token_and_reload(config, proxy)
            assert "auth settings changed" in line
            assert "default" in line

            refused = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert (await http.get(api)).status_code == 401
            ok = await http.post(proxy.url, json=INIT, headers={**HTTP_HEADERS, **bearer})
            assert ok.status_code == 200
            assert ok.headers.get("mcp-session-id")
            assert (await http.get(api, headers=bearer)).status_code == 200
    assert ADDED_TOKEN not in proxy.text()


async def test_a_token_added_by_reload_guards_new_websocket_handshakes(tmp_path: Path) -> None:
    """The websocket front: a handshake with no token is accepted before the reload and
    refused with 401 after it; the token is accepted."""
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {"fl": flaky()}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0", env=open_env()) as proxy:
            assert (await raw_handshake(proxy.port, {}))[0] == 101
            line = await add_token_and_reload(config, proxy)
            assert "auth settings changed" in line
            status, head = await raw_handshake(proxy.port, {})
            assert status == 401, head
            assert "www-authenticate: bearer" in head.lower()
            assert (await raw_handshake(proxy.port, {"Authorization": f"Bearer {ADDED_TOKEN}"}))[0] == 101
    assert ADDED_TOKEN not in proxy.text()
