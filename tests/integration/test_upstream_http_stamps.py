"""What mcpvisor sends an HTTP upstream, as the upstream sees it.

A real ``mcpvisor serve`` (stdio) in front of `tests/servers/recording_http.py`, a real
HTTP server process that records every request's ``mcp-*`` headers and body:

* opened in 2026-07-28, every request carries the ``_meta`` envelope (protocol version,
  clientInfo, capabilities) and the headers (``MCP-Protocol-Version``, ``Mcp-Method``,
  ``Mcp-Name`` for the named methods, ``x-mcp-header`` parameters as ``Mcp-Param-*``);
  a tool whose ``x-mcp-header`` is malformed is dropped; a JSON Schema 2020-12 tool
  schema reaches the client exactly as the server wrote it, its remote ``$ref`` never
  fetched;
* opened with ``protocol: auto`` (the handshake first), every POST still names its
  method, ``initialize`` included; a 2026-07-28 client's requests reach a server that
  also answers ``server/discover`` in that era, without the session, with the envelope
  and the ``Mcp-Param-*`` headers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.helpers import (
    REAL_IO_BOUND_S,
    http_fixture,
    proxy_client,
    read_record,
    text_of,
    write_config,
)
from tests.servers.recording_http import lookup_schema

pytestmark = pytest.mark.slow

ENVELOPE: Final = ("io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientInfo",
                   "io.modelcontextprotocol/clientCapabilities")


@asynccontextmanager
async def recording(record: Path) -> AsyncIterator[str]:
    """Start recording_http.py; yield its URL; kill it after."""
    async with http_fixture("recording_http.py", "--record", str(record)) as (_, url):
        yield url


def posts(record: Path) -> list[dict[str, Any]]:
    return [r for r in read_record(record) if r["http"] == "POST"]


async def exercise(client: Any) -> dict[str, Any]:
    """List, call the tool, read the resource, get the prompt; the listed tools by name."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    result = await client.call_tool("rec_lookup", {"region": "us-west1", "item": {"sku": "a-1"}})
    assert json.loads(text_of(result)) == {"item": {"sku": "a-1"}, "region": "us-west1"}
    await client.read_resource("memo://one")
    await client.get_prompt("rec_greet", {})
    return tools


async def test_a_2026_upstream_gets_the_envelope_and_headers_on_every_request(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with recording(record) as url:
            config = write_config(tmp_path, {"rec": {"type": "http", "url": url, "protocol": "2026-07-28"}})
            async with proxy_client(config, mode="2026-07-28") as client:
                tools = await exercise(client)
    base = url.removesuffix("/mcp")
    assert "rec_broken" not in tools  # its x-mcp-header names no header: dropped
    sent = json.dumps(tools["rec_lookup"].input_schema, separators=(",", ":"))
    assert sent == lookup_schema(base)  # 2020-12 keywords, $defs and $refs as written
    assert [r for r in read_record(record) if r["http"] == "GET"] == []  # the remote $ref never fetched

    seen = posts(record)
    assert {r["body"]["method"] for r in seen} >= {"server/discover", "tools/list", "tools/call",
                                                   "resources/read", "prompts/get"}
    for r in seen:
        body, headers = r["body"], r["headers"]
        assert headers.get("mcp-protocol-version") == "2026-07-28", r
        assert headers.get("mcp-method") == body["method"], r
        if "id" in body:
            meta = body["params"]["_meta"]
            assert all(key in meta for key in ENVELOPE), r
            assert meta[ENVELOPE[0]] == "2026-07-28"
            assert meta[ENVELOPE[1]]["name"] == "mcpvisor"
            assert isinstance(meta[ENVELOPE[2]], dict)
    by_method = {r["body"]["method"]: r["headers"] for r in seen}
    call = by_method["tools/call"]
    assert call["mcp-name"] == "lookup"
    assert call["mcp-param-region"] == "us-west1"
    assert by_method["resources/read"]["mcp-name"] == "memo://one"
    assert by_method["prompts/get"]["mcp-name"] == "greet"


async def test_with_protocol_auto_every_post_names_its_method_initialize_too(tmp_path: Path) -> None:
    """The session in the handshake era; a 2026-07-28 client's requests beside it, session-less
    in that era (the server answers ``server/discover``), with the envelope and the headers."""
    record = tmp_path / "record.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with recording(record) as url:
            config = write_config(tmp_path, {"rec": {"type": "http", "url": url}})
            async with proxy_client(config, mode="2026-07-28") as client:
                await exercise(client)
    seen = posts(record)
    assert seen[0]["body"]["method"] == "initialize"  # auto opens with the handshake
    for r in seen:
        assert r["headers"].get("mcp-method") == r["body"]["method"], r
    modern = [r for r in seen if ENVELOPE[0] in ((r["body"].get("params") or {}).get("_meta") or {})]
    for r in modern:
        assert r["headers"].get("mcp-protocol-version") == "2026-07-28", r
        assert "mcp-session-id" not in r["headers"], r
    for r in seen[1:]:
        if r not in modern:
            assert r["headers"].get("mcp-protocol-version") == "2025-11-25", r
            assert r["headers"].get("mcp-session-id") == "recording-session", r
    by_method = {r["body"]["method"]: r["headers"] for r in modern}
    assert {"server/discover", "tools/call", "resources/read", "prompts/get"} <= set(by_method)
    assert by_method["tools/call"]["mcp-param-region"] == "us-west1"  # read from the side's own listing
