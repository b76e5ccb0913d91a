"""Fixed views through a real ``mcpvisor serve``: ``/mcp/toolset/NAME``, ``/toolset/NAME`` on
websocket, and named tokens that carry a toolset.

The 2026-07-28 rule: ``tools/list`` must not vary per connection or as a side effect of
other requests on the connection, but may vary by the authorization presented. So a
client on a toolset's URL (or holding a toolset-bound token) sees exactly that toolset,
whatever another client equips on ``/mcp``, and hears ``list_changed`` only when that
toolset's own list changes. Clients of both eras are real SDK clients; the proxy is a
subprocess on 127.0.0.1 with the real everything fixture behind it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from mcpvisor.actors.link.ws import websocket_client
from tests.helpers import REAL_IO_BOUND_S, Recorder, everything, text_of, write_config
from tests.security.proxy import HTTP_HEADERS, INIT, Proxy, running_proxy

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

LEAD_TOKEN: Final = "lead-" + "a" * 40
CI_TOKEN: Final = "ci-" + "b" * 40
MANAGEMENT: Final = "equip-toolset"


@asynccontextmanager
async def proxy(tmp_path: Path, transport: str) -> AsyncIterator[Proxy]:
    """``mcpvisor serve --transport TRANSPORT`` with one everything fixture, toolsets ``dev``
    (its echo, and a ``fresh`` tool it does not have yet) and ``narrow`` (its add and
    add_tool), a plain
    token "lead" and a token "ci" bound to ``dev``."""
    config = write_config(
        tmp_path, {"ev": everything()}, namespacing="prefix",
        toolsets={"dev": ["ev.echo", "ev.fresh"], "narrow": ["ev.add", "ev.add_tool"]},
        authTokens={"lead": LEAD_TOKEN, "ci": {"token": "${CI_TOKEN}", "toolset": "dev"}},
    )
    env = {"CI_TOKEN": CI_TOKEN, "MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    async with running_proxy(config, "--transport", transport, "--port", "0", env=env) as running:
        yield running


@asynccontextmanager
async def http_client(url: str, token: str, mode: str, rec: Recorder | None = None) -> AsyncIterator[Client]:
    """A connected SDK client over streamable HTTP; its httpx client (the SDK leaves one it
    is handed open) is closed on the way out."""
    kwargs = rec.kwargs() if rec is not None else {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as auth, \
            Client(streamable_http_client(url, http_client=auth), mode=mode, cache=None, **kwargs) as client:
        yield client


def ws_client(url: str, token: str, mode: str, rec: Recorder | None = None) -> Client:
    transport = websocket_client(url, headers={"Authorization": f"Bearer {token}"}, max_message=1 << 20)
    kwargs = rec.kwargs() if rec is not None else {}
    return Client(transport, mode=mode, cache=None, **kwargs)


async def names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def next_event(events: Any) -> Any:
    with trio.fail_after(REAL_IO_BOUND_S):
        return await events.__anext__()


async def test_http_toolset_url_and_bound_token_views_in_both_eras(tmp_path: Path) -> None:
    """On ``/mcp/toolset/dev`` (either era) and with the dev-bound token on ``/mcp``, a
    client sees exactly dev's tools and can call only those; equipping another toolset on
    ``/mcp`` changes the lead's list and tells nobody else; dev's own change reaches the
    views' clients (``list_changed`` / their listen stream)."""
    lead_rec, view_rec, ci_rec = Recorder(), Recorder(), Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(tmp_path, "http") as running:
            url = running.url
            view_url = url + "/toolset/dev"
            assert url.endswith("/mcp")
            async with http_client(url, LEAD_TOKEN, "legacy", lead_rec) as lead, \
                    http_client(view_url, LEAD_TOKEN, "legacy", view_rec) as legacy_view, \
                    http_client(view_url, LEAD_TOKEN, "2026-07-28") as modern_view, \
                    http_client(url, CI_TOKEN, "2026-07-28") as modern_ci, \
                    http_client(url, CI_TOKEN, "legacy", ci_rec) as legacy_ci:
                assert {"ev_echo", "ev_add", "ev_touch", MANAGEMENT} <= await names(lead)
                for client in (legacy_view, modern_view, modern_ci, legacy_ci):
                    assert await names(client) == {"ev_echo"}
                    assert text_of(await client.call_tool("ev_echo", {"text": "v"})) == "echo: v"
                    # Outside the view: refused as unknown, never run (management tools too).
                    outside = await client.call_tool("ev_add", {"a": 1, "b": 2})
                    assert outside.is_error
                    assert (await client.call_tool(MANAGEMENT, {"name": "narrow"})).is_error
                assert {"ev_echo", MANAGEMENT} <= await names(lead)  # the refused equip changed nothing

                async with modern_view.listen(tools_list_changed=True) as view_events:
                    changed = lead_rec.changed
                    said = await lead.call_tool(MANAGEMENT, {"name": "narrow"})
                    assert not said.is_error, text_of(said)
                    await changed.wait()
                    lead_sees = await names(lead)
                    assert "ev_add" in lead_sees
                    assert "ev_echo" not in lead_sees
                    for client in (legacy_view, modern_view, modern_ci, legacy_ci):
                        assert await names(client) == {"ev_echo"}

                    # dev's own list changes: its clients hear it, each its era's way.
                    view_changed = view_rec.changed
                    assert text_of(await lead.call_tool("ev_add_tool", {"name": "fresh"})) == "added fresh"
                    await view_changed.wait()
                    assert isinstance(await next_event(view_events), ToolsListChanged)
                for client in (legacy_view, modern_view, modern_ci, legacy_ci):
                    assert await names(client) == {"ev_echo", "ev_fresh"}
                assert "ev_fresh" not in await names(lead)  # narrow is what /mcp shows


class Updates(Recorder):
    """Records, and wakes a waiter on, each ``notifications/resources/updated``."""

    def __init__(self) -> None:
        super().__init__()
        self.updated: list[str] = []
        self.got = trio.Event()

    async def handler(self, message: Any) -> None:
        await super().handler(message)
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
            self.got.set()


async def test_a_views_client_hears_updates_of_the_resources_it_subscribed(tmp_path: Path) -> None:
    """A resource the view's client subscribed to (``resources/subscribe`` in the handshake
    era, its listen stream's ``resourceSubscriptions`` at 2026-07-28) is subscribed upstream
    for it, and its update reaches it on ``/mcp/toolset/dev``."""
    uri = "mem://greeting"
    updates = Updates()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(tmp_path, "http") as running:
            view_url = running.url + "/toolset/dev"
            async with http_client(running.url, LEAD_TOKEN, "legacy") as lead, \
                    http_client(view_url, LEAD_TOKEN, "legacy", updates) as legacy_view, \
                    http_client(view_url, LEAD_TOKEN, "2026-07-28") as modern_view:
                async with modern_view.listen(resource_subscriptions=[uri]) as events:
                    # Nobody else subscribed: only the view's own stream has it followed upstream.
                    assert text_of(await lead.call_tool("ev_touch", {"uri": uri})) == f"touched {uri}"
                    event = await next_event(events)
                    assert isinstance(event, ResourceUpdated)
                    assert event.uri == uri
                await legacy_view.subscribe_resource(uri)
                assert text_of(await lead.call_tool("ev_touch", {"uri": uri})) == f"touched {uri}"
                await updates.got.wait()
                assert updates.updated == [uri]


async def test_http_unknown_toolset_is_404_and_a_bound_token_keeps_to_its_toolset(tmp_path: Path) -> None:
    """An unknown toolset's URL answers 404 naming the toolsets; the dev-bound token may not
    open another toolset's URL (403); without a token nothing is said about toolsets (401)."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(tmp_path, "http") as running, httpx2.AsyncClient(timeout=60) as http:
            def bearer(token: str) -> dict[str, str]:
                return {**HTTP_HEADERS, "Authorization": f"Bearer {token}"}

            unknown = await http.post(running.url + "/toolset/nope", json=INIT, headers=bearer(LEAD_TOKEN))
            assert unknown.status_code == 404
            message = unknown.json()["error"]["message"]
            for name in ("'nope'", "dev", "narrow"):
                assert name in message
            other = await http.post(running.url + "/toolset/narrow", json=INIT, headers=bearer(CI_TOKEN))
            assert other.status_code == 403
            assert "limited to the toolset 'dev'" in other.json()["error"]["message"]
            assert CI_TOKEN not in other.text
            anonymous = await http.post(running.url + "/toolset/dev", json=INIT, headers=HTTP_HEADERS)
            assert anonymous.status_code == 401
            assert "narrow" not in anonymous.text
            own = await http.post(running.url + "/toolset/dev", json=INIT, headers=bearer(CI_TOKEN))
            assert own.status_code == 200

            # The dashboard's API shows and changes every server: the dev-bound token gets none of it.
            base = running.url.removesuffix("/mcp")
            api = {"Authorization": f"Bearer {CI_TOKEN}"}
            for path in ("/api/status", "/api/servers", "/api/servers/ev"):
                limited = await http.get(base + path, headers=api)
                assert limited.status_code == 403, path
                assert "limited to the toolset 'dev'" in limited.json()["error"]
            entry = {"name": "x", "entry": {"command": "x"}}
            added = await http.post(base + "/api/servers", headers=api, json=entry)
            assert added.status_code == 403
            assert "limited to the toolset 'dev'" in added.json()["error"]
            lead = await http.get(base + "/api/servers/ev", headers={"Authorization": f"Bearer {LEAD_TOKEN}"})
            assert lead.status_code == 200
            assert CI_TOKEN not in running.text()  # no log line shows a token


async def test_websocket_toolset_path_and_bound_token_views(tmp_path: Path) -> None:
    """The websocket front: ``/toolset/dev`` and the dev-bound token on ``/`` see only dev's
    tools in both eras, an equip by another connection leaves them alone, and an unknown
    toolset's handshake is refused with 404 naming the toolsets."""
    lead_rec, view_rec = Recorder(), Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy(tmp_path, "ws") as running:
            root = running.url.rstrip("/")
            async with ws_client(root + "/", LEAD_TOKEN, "legacy", lead_rec) as lead, \
                    ws_client(root + "/toolset/dev", LEAD_TOKEN, "legacy", view_rec) as legacy_view, \
                    ws_client(root + "/toolset/dev", LEAD_TOKEN, "2026-07-28") as modern_view, \
                    ws_client(root + "/", CI_TOKEN, "2026-07-28") as modern_ci:
                assert {"ev_echo", "ev_add", MANAGEMENT} <= await names(lead)
                for client in (legacy_view, modern_view, modern_ci):
                    assert await names(client) == {"ev_echo"}
                    assert (await client.call_tool("ev_add", {"a": 1, "b": 2})).is_error
                changed = lead_rec.changed
                assert not (await lead.call_tool(MANAGEMENT, {"name": "narrow"})).is_error
                await changed.wait()
                assert "ev_echo" not in await names(lead)
                for client in (legacy_view, modern_view, modern_ci):
                    assert await names(client) == {"ev_echo"}
                view_changed = view_rec.changed
                assert text_of(await lead.call_tool("ev_add_tool", {"name": "fresh"})) == "added fresh"
                await view_changed.wait()
                for client in (legacy_view, modern_view, modern_ci):
                    assert await names(client) == {"ev_echo", "ev_fresh"}
            lead_auth = [(b"authorization", f"Bearer {LEAD_TOKEN}".encode())]
            nope = root + "/toolset/nope"
            refused = open_websocket_url(nope, subprotocols=["mcp"], extra_headers=lead_auth)
            with pytest.raises(ConnectionRejected) as rejected:
                await refused.__aenter__()
            assert rejected.value.status_code == 404
            body = json.loads(rejected.value.body or b"{}")
            for name in ("dev", "narrow"):
                assert name in body["error"]["message"]


async def test_a_websocket_whose_tokens_toolset_a_reload_changes_is_closed_with_the_reason(
        tmp_path: Path) -> None:
    """A reload binds the ci token to ``narrow`` instead of ``dev``: its open websocket is
    closed (1008) with a reason naming both toolsets, since a connection's tools list must
    not change under it; its next connection is served narrow. A connection whose view did
    not change (dev's URL with the lead token) keeps answering."""
    config = write_config(
        tmp_path, {"ev": everything()}, namespacing="prefix",
        toolsets={"dev": ["ev.echo"], "narrow": ["ev.add"]},
        authTokens={"lead": LEAD_TOKEN, "ci": {"token": "${CI_TOKEN}", "toolset": "dev"}},
    )
    env = {"CI_TOKEN": CI_TOKEN, "MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    ci = [(b"Authorization", f"Bearer {CI_TOKEN}".encode())]
    lead = [(b"Authorization", f"Bearer {LEAD_TOKEN}".encode())]
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0", env=env) as running:
            root = running.url.rstrip("/")
            dev_url = root + "/toolset/dev"
            async with open_websocket_url(root + "/", subprotocols=["mcp"], extra_headers=ci) as ws_ci, \
                    open_websocket_url(dev_url, subprotocols=["mcp"], extra_headers=lead) as ws_dev:
                for ws in (ws_ci, ws_dev):
                    await ws.send_message(json.dumps(INIT))
                    assert "result" in json.loads(await ws.get_message())
                doc = json.loads(config.read_text())
                doc["settings"]["authTokens"]["ci"]["toolset"] = "narrow"
                config.write_text(json.dumps(doc))
                running.process.send_signal(signal.SIGHUP)
                with pytest.raises(ConnectionClosed) as closed:
                    await ws_ci.get_message()
                assert closed.value.reason is not None
                assert closed.value.reason.code == 1008
                said = closed.value.reason.reason
                assert said == "the token's toolset changed ('dev' -> 'narrow'); reconnect"
                await ws_ci._stream.aclose()  # trio-websocket 0.12 leaves it open when the peer closed first
                await ws_dev.send_message(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
                listed = json.loads(await ws_dev.get_message())
                assert [t["name"] for t in listed["result"]["tools"]] == ["ev_echo"]
            async with ws_client(root + "/", CI_TOKEN, "legacy") as again:
                assert await names(again) == {"ev_add"}
            assert CI_TOKEN not in running.text()
