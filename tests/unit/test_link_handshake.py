"""A stdio link's handshake, in our own bytes, says and concludes what the SDK's session does.

`mcpvisor.actors.link.session.handshake` replaced an SDK ``ClientSession`` that a stdio
link built only to open the session. Each test here runs the same scripted server
against both: a real ``ClientSession`` (with the callbacks the SDK links install) and a
production `StdioLink`, each over memory streams; the messages each writes, what each settles on (the
version, serverInfo, capabilities, instructions) and, when the server refuses, the
failure a user reads (`mcpvisor.actors.upstream.failures.failure_text`) must be equal.
A drift on either side (a new SDK that offers another version or declares other
capabilities, or a change of ours) fails here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp.client.session as sdk_client_session
import mcp_types
import pytest
import trio
import trio.testing
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

from mcpvisor.actors import sdk_compat, wire
from mcpvisor.actors.link import session as ours
from mcpvisor.actors.link.sdk_session import handshake as sdk_handshake
from mcpvisor.actors.link.sdk_session import opened, sdk_client_info, session_callbacks
from mcpvisor.actors.upstream.failures import failure_text
from tests.fakes.memory_front import new_link, start_link

ROOT = Path(__file__).resolve().parents[2]

Answer = tuple[str, Any]
"""How the scripted server answers a request: ("result", {...}), ("error", {...}) or ("silence", None)."""

SERVER_INFO = {"name": "scripted", "version": "3.1.4"}
CAPS = {"tools": {"listChanged": True}, "logging": {}, "resources": {"subscribe": True}}
MODERN_RESULT = {"supportedVersions": [LATEST_MODERN_VERSION], "capabilities": CAPS, "instructions": "modern",
                 "resultType": "complete", "_meta": {wire.SERVER_INFO_META_KEY: SERVER_INFO}}


def legacy_result(version: str = LATEST_HANDSHAKE_VERSION) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": CAPS, "serverInfo": SERVER_INFO, "instructions": "hi"}


SERVERS: dict[str, dict[str, Answer]] = {
    "handshake only": {"initialize": ("result", legacy_result()),
                       "server/discover": ("error", {"code": -32601, "message": "Method not found"})},
    "dual era": {"initialize": ("result", legacy_result("2025-06-18")),
                 "server/discover": ("result", MODERN_RESULT)},
    "2026-07-28 only": {
        "initialize": ("error", {"code": -32022, "message": "Unsupported protocol version",
                                 "data": {"supported": [LATEST_MODERN_VERSION], "requested": "2025-11-25"}}),
        "server/discover": ("result", MODERN_RESULT)},
    "answers initialize with a 2026 version": {"initialize": ("result", legacy_result(LATEST_MODERN_VERSION)),
                                               "server/discover": ("result", MODERN_RESULT)},
    "refuses both": {"initialize": ("error", {"code": -32600, "message": "not today"}),
                     "server/discover": ("error", {"code": -32601, "message": "Method not found"})},
    "discover names only a version we lack": {
        "initialize": ("error", {"code": -32601, "message": "Method not found"}),
        "server/discover": ("error", {"code": -32022, "message": "Unsupported protocol version",
                                      "data": {"supported": ["2027-01-01"],
                                               "requested": LATEST_MODERN_VERSION}})},
    "discover shares no version": {
        "initialize": ("error", {"code": -32601, "message": "Method not found"}),
        "server/discover": ("result", {**MODERN_RESULT, "supportedVersions": ["2027-01-01"]})},
    "never answers discover": {"initialize": ("error", {"code": -32601, "message": "Method not found"}),
                               "server/discover": ("silence", None)},
}

PROTOCOLS = ("legacy", LATEST_MODERN_VERSION, "auto")


class _NoClient:
    """The callbacks' link: what they would ask is never asked during these handshakes."""

    async def answer_server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise AssertionError(f"unexpected server request {method}")


async def _sdk_side(protocol: str, script: Mapping[str, Answer]) -> tuple[list[dict[str, Any]], Any]:
    """What a real ClientSession sends to the scripted server, and what it concludes."""
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](16)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    sent: list[dict[str, Any]] = []

    async def serve() -> None:
        async for message in from_client:
            data = message.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            sent.append({k: data[k] for k in ("method", "params") if k in data})
            if "id" not in data or "method" not in data:
                continue
            kind, body = script[data["method"]]
            if kind == "silence":
                continue
            reply = mcp_types.jsonrpc_message_adapter.validate_python(
                {"jsonrpc": "2.0", "id": data["id"], kind: body}, by_name=False)
            await to_client.send(SessionMessage(reply))

    outcome: Any
    async with to_server, from_client, to_client, from_server, trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        async with ClientSession(from_server, to_server, client_info=sdk_client_info(),
                                 **session_callbacks(_NoClient())) as session:
            try:
                await sdk_handshake(session, protocol)
                outcome = opened(session)
            except Exception as exc:
                outcome = exc
        nursery.cancel_scope.cancel()
    return sent, outcome


async def _our_side(protocol: str, script: Mapping[str, Answer]) -> tuple[list[dict[str, Any]], Any]:
    """What a production `StdioLink` writes to the scripted server (its real pipes' bytes,
    on memory streams), and what our handshake concludes."""
    link, server = new_link("")
    sent: list[dict[str, Any]] = []

    async def serve() -> None:
        while True:
            data = await server.receive()
            sent.append({k: data[k] for k in ("method", "params") if k in data})
            if "id" not in data:
                continue
            kind, body = script[data["method"]]
            if kind != "silence":
                await server.send({"jsonrpc": "2.0", "id": data["id"], kind: body})

    outcome: Any
    async with trio.open_nursery() as nursery:
        start_link(link, nursery)
        nursery.start_soon(serve)
        try:
            outcome = await ours.handshake(link, protocol)
        except Exception as exc:
            outcome = exc
        await trio.testing.wait_all_tasks_blocked()  # the server has read all we wrote
        nursery.cancel_scope.cancel()
    return sent, outcome


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("server", list(SERVERS))
async def test_our_handshake_sends_and_concludes_what_the_sdk_session_does(
        server: str, protocol: str, autojump_clock: trio.testing.MockClock) -> None:
    script = SERVERS[server]
    with trio.fail_after(60):  # virtual time: a silent server costs the 10 s discover bound, no more
        sdk_sent, sdk_outcome = await _sdk_side(protocol, script)
        start = trio.current_time()
        our_sent, our_outcome = await _our_side(protocol, script)
        our_time = trio.current_time() - start
    assert our_sent == sdk_sent
    if isinstance(sdk_outcome, ours.Opened):
        assert our_outcome == sdk_outcome
    else:
        assert isinstance(our_outcome, ours.HandshakeFailed), our_outcome
        assert failure_text(our_outcome, None) == failure_text(sdk_outcome, None)
    if script["server/discover"][0] == "silence" and protocol != "legacy":
        assert our_time == ours.DISCOVER_TIMEOUT_S


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_malformed_answer_is_no_refusal(protocol: str,
                                                autojump_clock: trio.testing.MockClock) -> None:
    """An ``initialize`` result without serverInfo: under ``auto`` no ``server/discover``
    follows, as none followed when the SDK's models rejected it. The words differ on
    purpose: the SDK's were pydantic's validation dump; ours say what the result lacks."""
    script = {"initialize": ("result", {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {}}),
              "server/discover": ("result", MODERN_RESULT)}
    with trio.fail_after(60):
        sdk_sent, sdk_outcome = await _sdk_side(protocol, script)
        our_sent, our_outcome = await _our_side(protocol, script)
    assert our_sent == sdk_sent
    if protocol == LATEST_MODERN_VERSION:
        assert our_outcome == sdk_outcome
        return
    assert type(sdk_outcome).__name__ == "ValidationError"
    assert isinstance(our_outcome, ours.MalformedAnswer)
    assert failure_text(our_outcome, None) == (
        "handshake failed: the server's initialize result is malformed (it needs protocolVersion, "
        "capabilities and serverInfo with name and version)")


def test_what_we_declare_is_what_a_session_with_our_callbacks_declares() -> None:
    """In each era's versions (the SDK drops claim-bearing extensions by version; we have none)."""
    send, receive = anyio.create_memory_object_stream[Any](1)
    with send, receive:
        session = ClientSession(receive, send, client_info=sdk_client_info(),
                                **session_callbacks(_NoClient()))
        for version in (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS):
            declared = sdk_compat.client_capabilities(session, version).model_dump(by_alias=True, mode="json",
                                                                                   exclude_none=True)
            assert ours.client_capabilities() == declared
    assert ours.client_info() == sdk_client_info().model_dump(by_alias=True, mode="json", exclude_none=True)
    assert ours.DISCOVER_TIMEOUT_S == sdk_client_session.DISCOVER_TIMEOUT_SECONDS


@pytest.mark.parametrize(("name", "value"), [
    ("UNSUPPORTED_PROTOCOL_VERSION", mcp_types.UNSUPPORTED_PROTOCOL_VERSION),
    ("CLIENT_INFO_META_KEY", mcp_types.CLIENT_INFO_META_KEY),
    ("CLIENT_CAPABILITIES_META_KEY", mcp_types.CLIENT_CAPABILITIES_META_KEY),
    ("SERVER_INFO_META_KEY", mcp_types.SERVER_INFO_META_KEY),
    ("LOG_LEVEL_META_KEY", mcp_types.LOG_LEVEL_META_KEY),
    ("HANDSHAKE_PROTOCOL_VERSIONS", HANDSHAKE_PROTOCOL_VERSIONS),
    ("LATEST_HANDSHAKE_VERSION", LATEST_HANDSHAKE_VERSION),
    ("MODERN_PROTOCOL_VERSIONS", MODERN_PROTOCOL_VERSIONS),
    ("LATEST_MODERN_VERSION", LATEST_MODERN_VERSION),
])
def test_a_handshake_constant_is_the_sdks(name: str, value: Any) -> None:
    assert getattr(wire, name) == value


# --- the modules a stdio link loads import no SDK -----------------------------------------

SDK_FREE = ("actors/link/__init__.py", "actors/link/stdio.py", "actors/link/base.py",
            "actors/link/session.py", "actors/link/ports.py", "actors/link/input_required.py",
            "actors/link/listing.py")


def _module_level_imports(tree: ast.Module) -> list[str]:
    """Modules imported when the module loads: every import outside functions and
    outside ``if TYPE_CHECKING:`` (conditional and try blocks included)."""
    found: list[str] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.append(node.module or "")
            elif isinstance(node, ast.If):
                test = node.test
                if not ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
                        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            elif isinstance(node, ast.With):
                walk(node.body)

    walk(tree.body)
    return found


@pytest.mark.parametrize("path", SDK_FREE)
def test_a_stdio_link_module_imports_no_sdk_at_load(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    sdk = [m for m in _module_level_imports(tree) if m.split(".")[0] in ("mcp", "mcp_types")]
    assert sdk == [], f"{path} imports {sdk} when it loads"


def test_the_ast_check_sees_a_module_level_sdk_import() -> None:
    """The check above can fail: a top-level, a conditional and a try import are seen; a
    TYPE_CHECKING one and one inside a function are not."""
    tree = ast.parse("import mcp\nif X:\n    from mcp_types import A\ntry:\n    import mcp.client\n"
                     "except E:\n    pass\nif TYPE_CHECKING:\n    import mcp.server\ndef f():\n"
                     "    import mcp.shared\n")
    assert _module_level_imports(tree) == ["mcp", "mcp_types", "mcp.client"]


def test_importing_the_stdio_link_loads_neither_sdk_link_module() -> None:
    """``import mcpvisor.actors.link.stdio`` (its package included) leaves the SDK links and
    the SDK's client session unloaded (`SdkLink` comes on first use)."""
    code = ("import sys, mcpvisor.actors.link.stdio as s\n"
            "print(sorted(m for m in ('mcpvisor.actors.link.sdk', 'mcpvisor.actors.link.sdk_session', "
            "'mcp.client.session', 'mcp') if m in sys.modules))\n"
            "from mcpvisor.actors.link import SdkLink\n"
            "print('mcpvisor.actors.link.sdk' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"]



async def test_a_server_request_during_the_handshake_is_answered_and_the_handshake_goes_on(
        autojump_clock: trio.testing.MockClock) -> None:
    """A server may ping (or ask anything) before it answers ``initialize``: the link answers
    it, as it does mid-call, and the handshake completes."""
    link, server = new_link("")
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            start_link(link, nursery)
            handshake_done: list[ours.Opened] = []

            async def run() -> None:
                handshake_done.append(await ours.handshake(link, "auto"))

            nursery.start_soon(run)
            init = await server.receive()
            assert init["method"] == "initialize"
            await server.send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
            assert await server.receive() == {"jsonrpc": "2.0", "id": "srv-1", "result": {}}
            await server.answer(init, legacy_result())
            assert (await server.receive())["method"] == "notifications/initialized"
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert [o.protocol_version for o in handshake_done] == [LATEST_HANDSHAKE_VERSION]
