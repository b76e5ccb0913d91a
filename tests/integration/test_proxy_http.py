"""The streamable HTTP front: two real SDK clients at once, one per protocol era.

The proxy runs in-process (`open_supervisor` + `serve_http` on 127.0.0.1, port 0);
the clients are the SDK's own streamable-HTTP clients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from mcpvisor import open_supervisor, serve_http
from tests.helpers import (
    REAL_IO_BOUND_S,
    Recorder,
    everything,
    flaky,
    http_client,
    text_of,
    time_server,
    write_config,
)

pytestmark = pytest.mark.slow


async def test_two_clients_in_both_eras_share_the_proxy_and_both_hear_list_changed(tmp_path: Path) -> None:
    """A handshake-era and a 2026-07-28 client use the same proxy at once; an upstream's
    list change reaches both (the legacy one on its GET stream, the modern one on its
    subscriptions/listen stream)."""
    config = write_config(tmp_path, {"ev": everything(), "fl": flaky(), "time": time_server()})
    legacy_rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup, trio.open_nursery() as nursery:
            await sup.wait_ready()  # about list changes after start-up, not during it
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            assert url.startswith("http://127.0.0.1:")
            assert url.endswith("/mcp")
            async with Client(url, mode="legacy", cache=None, **legacy_rec.kwargs()) as legacy, \
                    Client(url, cache=None) as modern:
                assert legacy.protocol_version == "2025-11-25"
                assert modern.protocol_version == "2026-07-28"
                for client in (legacy, modern):
                    names = {t.name for t in (await client.list_tools()).tools}
                    assert {"ev_echo", "fl_echo", "time_get_current_time"} <= names
                    assert text_of(await client.call_tool("fl_echo", {"text": "a"})) == "echo: a"
                    assert text_of(await client.call_tool("ev_echo", {"text": "b"})) == "echo: b"
                async with modern.listen(tools_list_changed=True) as subscription:
                    # The legacy client's standalone GET stream opens asynchronously after the
                    # handshake; a ping round-trip on it does not guarantee it, so wait for the
                    # proxy to have it registered before triggering the change.
                    changed = legacy_rec.changed
                    await legacy.call_tool("ev_add_tool", {"name": "shared"})
                    with trio.fail_after(30):
                        event = await subscription.__anext__()
                    assert isinstance(event, ToolsListChanged)
                    with trio.fail_after(30):
                        await changed.wait()
                for client in (legacy, modern):
                    names = {t.name for t in (await client.list_tools()).tools}
                    assert "ev_shared" in names
            nursery.cancel_scope.cancel()


async def test_dns_rebinding_protection_refuses_a_foreign_origin(tmp_path: Path) -> None:
    """A browser page on another origin cannot drive the local proxy (DNS rebinding)."""
    config = write_config(tmp_path, {"fl": flaky()})
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "x", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup, trio.open_nursery() as nursery:
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with http_client() as http:
                evil = await http.post(url, json=body, headers={**headers, "Origin": "http://evil.example"})
                assert evil.status_code in (400, 403)
                rebound = await http.post(url, json=body, headers={**headers, "Host": "evil.example"})
                assert rebound.status_code in (400, 403, 421)
                ok = await http.post(url, json=body, headers=headers)
                assert ok.status_code == 200
            nursery.cancel_scope.cancel()


async def test_sampling_reaches_the_http_client_whose_call_caused_it(tmp_path: Path) -> None:
    """Server-to-client requests during a call ride that call's response stream back."""
    config = write_config(tmp_path, {"ev": everything()})
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup, trio.open_nursery() as nursery:
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with Client(url, mode="legacy", cache=None, **rec.kwargs()) as client:
                sampled = await client.call_tool("ev_sample", {"prompt": "q"})
                assert text_of(sampled) == "sampled: from the client"
                assert text_of(await client.call_tool("ev_roots", {})) == "file:///workspace"
            nursery.cancel_scope.cancel()


async def test_a_retry_with_an_unknown_request_state_is_refused(tmp_path: Path) -> None:
    """A 2026-07-28 client's retry carrying a ``requestState`` the proxy never minted (or
    one that expired) is refused with a clear error instead of running the tool afresh."""
    config = write_config(tmp_path, {"ev": everything(protocol="legacy")})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup, trio.open_nursery() as nursery:
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with Client(url, mode="2026-07-28", cache=None) as client:
                with pytest.raises(MCPError, match="unknown or expired requestState"):
                    await client.session.call_tool("ev_sample", {"prompt": "q"}, input_responses={},
                                                   request_state="mcpvisor-bridge:never-minted",
                                                   allow_input_required=True)
            nursery.cancel_scope.cancel()

