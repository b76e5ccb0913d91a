"""The closed vocabularies and call defaults every layer shares, each written once.

The config loader, the command line, the importers, the settings and the runtime all
take a server's transport, the other clients' names for it and the exposure modes from
here, so a new transport or mode is one edit and no two lists can drift apart.
"""

from __future__ import annotations

from typing import Final

TRANSPORTS: Final = ("stdio", "http", "sse", "ws", "stdio-docker")
"""A server's ``transport``: a child process (bare or in docker) or a URL."""

STDIO_TRANSPORTS: Final = ("stdio", "stdio-docker")
"""A server started as a child process and spoken to over its pipes (ours, not the SDK's)."""

URL_TRANSPORTS: Final = ("http", "sse", "ws")
"""The transports that reach a server by ``url`` (with optional ``headers``)."""

HTTP_ALIASES: Final = frozenset({"streamable-http", "streamableHttp", "streamable_http"})
"""Other clients' names for streamable HTTP (Cline, Cursor), accepted as "http"."""

WS_ALIASES: Final = frozenset({"websocket"})
"""Other clients' names for a websocket server, accepted as "ws" when importing them."""

OTLP_PROTOCOLS: Final = ("http/protobuf", "grpc")
"""The OTLP protocols the trace exporter speaks (``OTEL_EXPORTER_OTLP_PROTOCOL``,
``settings.telemetry.protocol``)."""

EXPOSURES: Final = ("menu", "all", "discovery")
"""How the catalog reaches a client: the toolset menu, every tool, or discovery tools."""

DEFAULT_DISCOVERY_BUDGET: Final = 8 * 1024
"""`settings.discoveryBudget`'s default (issue 16): bytes of catalog ``discover_tool``'s
description may carry (~2,000 tokens at 4 bytes a token); beyond it the description lists
servers and tool counts and says to search. dynmcp lists every tool; this keeps 20 servers'
catalogs in check."""

DEFAULT_TIMEOUT_S: Final = 60.0
"""A server's ``timeout`` (call inactivity) by default."""

DEFAULT_MAX_CALL_TIME_S: Final = 600.0
"""A server's ``maxCallTime`` (a call's whole life) by default."""


def canonical_transport(given: str) -> str:
    """``given`` with another client's alias replaced by our name (unknown names pass through)."""
    if given in HTTP_ALIASES:
        return "http"
    if given in WS_ALIASES:
        return "ws"
    return given


HTTP_PATH: Final = "/mcp"
"""Where the streamable HTTP front serves MCP (``--transport http``)."""
