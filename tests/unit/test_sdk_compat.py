"""The compatibility modules against the installed SDK and websocket library, on real objects.

`mcpvisor.actors.sdk_compat` and `mcpvisor.actors.ws_compat` hold every reach into a
private name of the `mcp` SDK and of trio-websocket. A release that renames one of them
must fail at import with a message naming it (not with an AttributeError in the middle
of a client's call), and every accessor must return the real thing: a regression shows
as an import that passes on a changed SDK, or an accessor answering the wrong object.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx2
import mcp_types as types
import pytest
import trio
import trio.testing
from mcp.client.session import ClientSession
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from trio_websocket import WebSocketConnection, WebSocketRequest
from wsproto import ConnectionType, WSConnection
from wsproto.events import Request

from mcpvisor.actors import sdk_compat, ws_compat
from mcpvisor.actors.link.sdk_session import sdk_client_info

BOUND_S = 30.0
"""Seconds any test here may take (in-memory streams: far more than enough)."""


def test_the_installed_libraries_have_every_name_the_modules_reach_for() -> None:
    assert sdk_compat.missing() == []
    assert ws_compat.missing() == []
    assert "2.3" in sdk_compat.CHECKED_SDK
    assert "0.12" in ws_compat.CHECKED_TRIO_WEBSOCKET


_BREAK_AND_IMPORT = """
import sys
{breakage}
try:
    import {module}
except ImportError as exc:
    print(exc)
    sys.exit(3)
sys.exit(0)
"""


@pytest.mark.parametrize(("module", "breakage", "named"), [
    # An SDK whose session no longer keeps its connection under the name we read.
    ("mcpvisor.actors.sdk_compat",
     "import mcp.server.session as s\n"
     "def __init__(self, request_outbound, connection, *, request_meta=None):\n"
     "    self._conn = connection\n"
     "s.ServerSession.__init__ = __init__",
     "mcp.server.session.ServerSession._connection"),
    ("mcpvisor.actors.sdk_compat",
     "import mcp.client.session as c\ndel c.ClientSession._build_capabilities",
     "mcp.client.session.ClientSession._build_capabilities"),
    ("mcpvisor.actors.sdk_compat",
     "import mcp.server.runner as r\ndel r.serve_dual_era_loop",
     "mcp.server.runner.serve_dual_era_loop"),
    ("mcpvisor.actors.ws_compat",
     "import trio_websocket\ndel trio_websocket.WebSocketConnection._get_request",
     "trio_websocket.WebSocketConnection._get_request"),
])
def test_a_library_lacking_a_name_fails_at_import_naming_it(module: str, breakage: str, named: str) -> None:
    """In a fresh interpreter (the running one keeps its modules), with the library changed
    in memory only: the import fails, naming the missing name and the versions checked."""
    done = subprocess.run([sys.executable, "-c", _BREAK_AND_IMPORT.format(breakage=breakage, module=module)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert named in done.stdout
    assert "checked against" in done.stdout


async def test_the_server_side_accessors_reach_the_connection_and_the_request_channel() -> None:
    """A real lowlevel `Server` served by the SDK's dual-era loop (`serve_dual_era_loop` from the
    module) to a real `ClientSession`: inside a request handler the accessors give the
    connection (with the session id the loop was given) and the channel back to that client,
    which carries a request (a ping) to it and its answer back."""
    seen: dict[str, Any] = {}

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        connection = sdk_compat.connection_of(ctx.session)
        seen["connection"] = connection
        seen["maybe"] = sdk_compat.maybe_connection_of(ctx.session)
        seen["ping"] = await sdk_compat.request_outbound_of(ctx.session).send_raw_request("ping", None, None)
        return types.ListToolsResult(tools=[])

    server: Server[Any] = Server("compat", on_list_tools=list_tools)
    with trio.fail_after(BOUND_S):
        async with create_client_server_memory_streams() as (client_streams, server_streams), \
                trio.open_nursery() as nursery:
            async with server.lifespan(server) as state:
                nursery.start_soon(lambda: sdk_compat.serve_dual_era_loop(
                    server, *server_streams, lifespan_state=state, session_id="conn-1",
                    init_options=server.create_initialization_options()))
                async with ClientSession(*client_streams) as client:
                    await client.initialize()
                    await client.list_tools()
                nursery.cancel_scope.cancel()
    assert isinstance(seen["connection"], Connection)
    assert seen["connection"].session_id == "conn-1"
    assert isinstance(seen["connection"].state, dict)
    assert seen["maybe"] is seen["connection"]
    assert seen["ping"] == {}
    assert sdk_compat.maybe_connection_of(object()) is None


def test_http_session_transport_is_none_without_http_or_an_open_session() -> None:
    server: Server[Any] = Server("compat")
    assert sdk_compat.http_session_transport(server, "s-1") is None  # never served over HTTP
    server.streamable_http_app()
    assert sdk_compat.http_session_transport(server, "s-1") is None  # no such session open


def test_bus_listeners_are_the_subscribed_ones() -> None:
    bus = InMemorySubscriptionBus()
    heard: list[Any] = []
    unsubscribe = bus.subscribe(heard.append)
    listeners = sdk_compat.bus_listeners(bus)
    assert len(listeners) == 1
    listeners[0]("event")
    assert heard == ["event"]
    unsubscribe()
    assert sdk_compat.bus_listeners(bus) == []


async def test_the_client_side_accessors_stamp_and_send_under_our_own_id() -> None:
    """A real `ClientSession` to a real server: `stamp` gives a raw request the envelope the
    session negotiated, `dispatcher_of` sends it under an id we chose, and
    `client_capabilities` and `tool_output_schemas` are the session's own."""
    server: Server[Any] = Server("compat")
    with trio.fail_after(BOUND_S):
        async with create_client_server_memory_streams() as (client_streams, server_streams), \
                trio.open_nursery() as nursery:
            async with server.lifespan(server) as state:
                nursery.start_soon(lambda: sdk_compat.serve_dual_era_loop(
                    server, *server_streams, lifespan_state=state,
                    init_options=server.create_initialization_options()))
                async with ClientSession(*client_streams, client_info=sdk_client_info()) as client:
                    await client.initialize()
                    data: dict[str, Any] = {"method": "ping", "params": {}}
                    opts: dict[str, Any] = {"request_id": "mv-7"}
                    sdk_compat.stamp(client, data, opts)
                    answer = await sdk_compat.dispatcher_of(client).send_raw_request(
                        "ping", data.get("params") or None, opts)  # type: ignore[arg-type]
                    version = client.protocol_version
                    caps = sdk_compat.client_capabilities(client, version or "")
                    schemas = sdk_compat.tool_output_schemas(client)
                nursery.cancel_scope.cancel()
    assert answer == {}
    assert opts["request_id"] == "mv-7"
    assert isinstance(caps, types.ClientCapabilities)
    assert isinstance(schemas, dict)
    # A handshake-era session stamps no per-request envelope; the modern one would.
    meta = data["params"].get("_meta", {})
    assert PROTOCOL_VERSION_META_KEY not in meta
    assert CLIENT_CAPABILITIES_META_KEY not in meta


def test_the_http_defaults_are_the_ones_the_sdk_client_uses() -> None:
    """The http transport builds its own client with these numbers: they must be the SDK's."""
    client = create_mcp_http_client()
    assert client.timeout == httpx2.Timeout(sdk_compat.MCP_DEFAULT_TIMEOUT,
                                            read=sdk_compat.MCP_DEFAULT_SSE_READ_TIMEOUT)


async def test_the_websocket_accessors_read_the_upgrade_request_and_its_host() -> None:
    """A real trio-websocket server connection on a memory stream, a real wsproto client
    writing the upgrade: `read_frames` reads it, `get_request` hands it over, and
    `request_host` is the Host the client sent (which wsproto keeps out of the headers)."""
    ours, theirs = trio.testing.memory_stream_pair()
    ws = WebSocketConnection(ours, WSConnection(ConnectionType.SERVER))
    client = WSConnection(ConnectionType.CLIENT)
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws_compat.read_frames, ws)
            await theirs.send_all(client.send(Request(host="mcp.example:8443", target="/mcp")))
            request = await ws_compat.get_request(ws)
            nursery.cancel_scope.cancel()
    assert isinstance(request, WebSocketRequest)
    assert request.path == "/mcp"
    assert ws_compat.request_host(request) == "mcp.example:8443"
    assert "host" not in {k.decode().lower() for k, _ in request.headers}
