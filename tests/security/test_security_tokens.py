"""Who the network fronts let in, against a real ``mcpvisor serve`` over real sockets.

Where the traffic comes from: every request goes to 127.0.0.1. The proxy never looks at
the peer's address (a token, not the address or the Host header, is what guards a
non-loopback bind), so a request "from the network" is one that names the machine the
way a remote client would: a spoofed loopback ``Host`` (the trick that got a session
before issue 12) or the machine's own interface address. 127.0.0.2 would still be
loopback and an outside host would leave the machine, so neither is used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import psutil
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from trio_websocket import open_websocket_url

from tests.helpers import REAL_IO_BOUND_S, flaky, http_client, text_of
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write

pytestmark = pytest.mark.slow

CI_TOKEN = "ci-token-0123456789abcdef0123"
LAPTOP_TOKEN = "laptop-token-abcdef0123456789"


def machine_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return str(a.address)
    return None


def guarded_config(tmp_path: Path) -> Path:
    return write(
        tmp_path / "mcpvisor.json",
        {
            "mcpServers": {"fl": flaky()},
            "settings": {"exposure": "all", "authTokens": {"ci": "${CI_TOKEN}", "laptop": LAPTOP_TOKEN}},
        },
    )


async def test_bound_beyond_loopback_only_the_token_gets_a_session(tmp_path: Path) -> None:
    """Bound to 0.0.0.0 with tokens: no token, a wrong token and a spoofed loopback Host get
    401 with ``WWW-Authenticate: Bearer``; the right token gets a session even when the
    Host names the machine's address (it used to get 421), and a real SDK client works."""
    config = guarded_config(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            env={"CI_TOKEN": CI_TOKEN, "MCPVISOR_TOKEN": ""},
        ) as proxy:
            url = f"http://127.0.0.1:{proxy.port}/mcp"
            async with http_client() as http:
                for extra in (
                    {},
                    {"Authorization": "Bearer wrong-token-0123456789abcdef"},
                    {"Host": f"127.0.0.1:{proxy.port}"},
                    {"Authorization": f"Basic {CI_TOKEN}"},
                ):
                    refused = await http.post(url, json=INIT, headers={**HTTP_HEADERS, **extra})
                    assert refused.status_code == 401, extra
                    assert refused.headers["www-authenticate"].startswith("Bearer")
                    assert "mcp-session-id" not in refused.headers
                address = machine_address()
                hosts = [f"127.0.0.1:{proxy.port}"] + ([f"{address}:{proxy.port}"] if address else [])
                for host in hosts:
                    ok = await http.post(
                        url,
                        json=INIT,
                        headers={**HTTP_HEADERS, "Host": host, "Authorization": f"Bearer {CI_TOKEN}"},
                    )
                    assert ok.status_code == 200, (host, ok.text)
                    assert ok.headers.get("mcp-session-id")
                foreign = await http.post(
                    url,
                    json=INIT,
                    headers={**HTTP_HEADERS, "Host": "evil.example", "Authorization": f"Bearer {CI_TOKEN}"},
                )
                assert foreign.status_code == 421  # DNS rebinding: a name that is not this machine
            async with (
                http_client(headers={"Authorization": f"Bearer {LAPTOP_TOKEN}"}) as authed,
                Client(streamable_http_client(url, http_client=authed), mode="legacy", cache=None) as client,
            ):
                assert text_of(await client.call_tool("fl_echo", {"text": "hi"})) == "echo: hi"
    assert not any(secret in proxy.text() for secret in (CI_TOKEN, LAPTOP_TOKEN)), proxy.text()


async def test_a_token_removed_by_a_hot_reload_is_refused_at_once(tmp_path: Path) -> None:
    """Removing a named token from the config and reloading (SIGHUP) locks that client out;
    the other named token keeps working."""
    config = guarded_config(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config, "--transport", "http", "--port", "0", env={"CI_TOKEN": CI_TOKEN, "MCPVISOR_TOKEN": ""}
        ) as proxy:
            async with http_client() as http:

                async def status(token: str) -> int:
                    r = await http.post(
                        proxy.url, json=INIT, headers={**HTTP_HEADERS, "Authorization": f"Bearer {token}"}
                    )
                    return r.status_code

                assert await status(LAPTOP_TOKEN) == 200
                doc = json.loads(config.read_text())
                del doc["settings"]["authTokens"]["laptop"]
                seen = len(proxy.log)
                config.write_text(json.dumps(doc))
                proxy.process.send_signal(signal.SIGHUP)
                await proxy.wait_log("config reloaded", after=seen)
                assert await status(LAPTOP_TOKEN) == 401
                assert await status(CI_TOKEN) == 200


async def raw_handshake(port: int, headers: dict[str, str]) -> tuple[int, str]:
    """Send a websocket upgrade request by hand; the status and the raw response head."""
    fields = {
        "Host": f"127.0.0.1:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Protocol": "mcp",
        **headers,
    }
    request = "GET / HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    text = head.decode("latin-1")
    return int(text.split(" ", 2)[1]), text


async def ws_handshake(url: str, headers: dict[str, str]) -> int:
    """The handshake's HTTP status; when accepted (101), a real client's initialize answers too."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    status, head = await raw_handshake(port, headers)
    if status == 401:
        assert "www-authenticate: bearer" in head.lower(), head
    if status == 101:
        extra = [(k.encode(), v.encode()) for k, v in headers.items() if k != "Host"]
        async with open_websocket_url(url, subprotocols=["mcp"], extra_headers=extra) as ws:
            await ws.send_message(json.dumps(INIT))
            reply = json.loads(await ws.get_message())
            assert reply["result"]["serverInfo"]["name"]
    return status


async def test_the_websocket_front_checks_token_host_and_origin_like_the_http_front(tmp_path: Path) -> None:
    """With a token: none gets 401; the token gets in from a CLI client (no Origin); a web
    page on a foreign origin is refused with 403 even with the token; a foreign Host 421."""
    config = guarded_config(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            "ws",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            env={"CI_TOKEN": CI_TOKEN, "MCPVISOR_TOKEN": ""},
        ) as proxy:
            url = f"ws://127.0.0.1:{proxy.port}/"
            bearer = {"Authorization": f"Bearer {CI_TOKEN}"}
            assert await ws_handshake(url, {}) == 401
            assert await ws_handshake(url, {"Authorization": "Bearer nope-0123456789abcdefg"}) == 401
            assert await ws_handshake(url, bearer) == 101
            assert await ws_handshake(url, {**bearer, "Origin": "http://evil.example"}) == 403
            assert await ws_handshake(url, {**bearer, "Origin": f"http://127.0.0.1:{proxy.port}"}) == 101
            assert await ws_handshake(url, {**bearer, "Host": f"127.0.0.1:{proxy.port}"}) == 101
            assert await ws_handshake(url, {**bearer, "Host": "evil.example"}) == 421
            address = machine_address()
            if address:
                assert await ws_handshake(url, {**bearer, "Host": f"{address}:{proxy.port}"}) == 101


async def test_on_loopback_without_a_token_a_foreign_origin_is_refused_and_a_cli_client_is_not(
    tmp_path: Path,
) -> None:
    """The websocket front on loopback: any web page the user visits could open
    ws://127.0.0.1 (browsers apply no CORS to websockets); only a foreign Origin is refused."""
    config = write(
        tmp_path / "mcpvisor.json",
        {"mcpServers": {}, "settings": {"allowedOrigins": ["https://app.example"]}},
    )
    env = {k: v for k, v in os.environ.items() if k != "MCPVISOR_TOKEN"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0", env=env) as proxy:
            url = f"ws://127.0.0.1:{proxy.port}/"
            assert await ws_handshake(url, {}) == 101
            assert await ws_handshake(url, {"Origin": "http://evil.example"}) == 403
            assert await ws_handshake(url, {"Origin": "https://app.example"}) == 101
            assert await ws_handshake(url, {"Origin": "http://localhost:3000"}) == 101
            assert await ws_handshake(url, {"Host": "evil.example"}) == 421
