"""How a server is reached: the argv of a stdio or docker server, the SDK client transport
of an http, sse or ws one.

Shared by the upstream actor (`mcpvisor.actors.upstream.actor`) and `mcpvisor mcp test`
(`mcpvisor.probe`), so both start a server the same way. Owns `BoundedTransport`, the
httpx transport under the SDK's HTTP clients that holds an upstream's answers to
``settings.maxMessageBytes``, as the stdio framing does for a stdio server, and names
the method of every POST in ``Mcp-Method``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import httpx2
import trio

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.core.spec import ServerSpec

ResponseHook = Callable[[httpx2.Response], Awaitable[None]]
"""Awaited with each HTTP response an upstream's client receives."""

EVENT_STREAM: Final = "text/event-stream"
"""An SSE body streams for as long as the server likes; the SDK bounds each of its events."""
METHOD_HEADER: Final = "mcp-method"
"""The 2026-07-28 standard header naming a POST's JSON-RPC method."""


class BoundedTransport(httpx2.AsyncBaseTransport):
    """An httpx transport that reads no answer body beyond ``limit`` bytes.

    The SDK reads a JSON answer whole (``response.aread()``), so a server answering
    200 MB would cost the proxy about 1 GB. Here a body (other than an SSE stream) is
    read into memory up to ``limit`` bytes; one that announces or reaches more is cut
    off, its connection closed, and the request gets a JSON-RPC error naming the server
    and the limit in its place, so the call fails clearly and the link stays up.
    """

    def __init__(self, server: str, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server = server
        self.limit = limit
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and METHOD_HEADER not in request.headers:
            # 2026-07-28: a client MUST name the method of every POST (gateways route on
            # it). The SDK stamps it only once a session is in that era; the handshake
            # requests of `protocol: auto` (``initialize``, ``notifications/initialized``)
            # go out before the era is known, and a server of either era reads them the
            # same with it (an older one ignores a header it does not know).
            method = _method_of(request)
            if method is not None:
                request.headers[METHOD_HEADER] = method
        if telemetry.tracer is not None and request.method == "POST":
            telemetry.inject_headers(request)  # the request's trace context as headers too
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith(EVENT_STREAM):
            return response
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        body = bytearray()
        size = _announced(response)
        try:
            if size is None or size <= self.limit:
                async for chunk in stream:
                    body += chunk
                    if len(body) > self.limit:
                        size = len(body)
                        break
        finally:
            await stream.aclose()
        if size is not None and size > self.limit:
            return self._refusal(request, size, at_least=len(body) > self.limit)
        return httpx2.Response(response.status_code, headers=response.headers, content=bytes(body),
                               request=request, extensions=response.extensions)

    def _refusal(self, request: httpx2.Request, size: int, *, at_least: bool) -> httpx2.Response:
        """A JSON-RPC error answering ``request`` in place of a body over the limit."""
        message = (f"server {self.server} sent a message larger than maxMessageBytes ({self.limit} bytes): "
                   f"{size}{'+' if at_least else ''} bytes")
        try:
            sent = json.loads(request.content)
        except ValueError:
            sent = None
        rid = sent.get("id") if isinstance(sent, dict) else None
        if rid is None:
            # A notification's answer: nobody reads it.
            return httpx2.Response(502, request=request, text=message)
        body = wire.error_frame(rid, wire.INTERNAL_ERROR, message,
                                {"server": self.server, "limit": self.limit, "size": size})
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body,
                               request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _method_of(request: httpx2.Request) -> str | None:
    """The JSON-RPC method a POST carries, when it is one a header can name as it is."""
    try:
        method = wire.decode_envelope(request.content).method
    except (httpx2.RequestNotRead, wire.DecodeError, wire.ValidationError):
        return None
    if isinstance(method, str) and method.isascii() and method.isprintable():
        return method
    return None


def _announced(response: httpx2.Response) -> int | None:
    """The body size the server announced (``Content-Length``), if any."""
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


def sdk_transport(spec: ServerSpec, max_message: int, *, http_timeout: httpx2.Timeout | None = None,
                  on_response: ResponseHook | None = None, auth: httpx2.Auth | None = None) -> Any:
    """The SDK client transport for an http, sse or ws server: the one builder for the
    upstream actor and `mcpvisor mcp test`, so a probe reaches a server exactly as the
    proxy will (headers, limits, redirects).

    Args:
        spec: the server (``transport``, ``url``, ``headers``).
        max_message: the largest answer or event read, in bytes (``settings.maxMessageBytes``).
        http_timeout: the HTTP timeouts (default: the SDK's own, long enough for an SSE stream).
        on_response: awaited with each HTTP response (a probe records the statuses seen).
        auth: the OAuth client of an http or sse server
            (`mcpvisor.actors.link.oauth.UpstreamAuth`): its requests carry the token, and
            a 401 runs the login flow.
    """
    if not spec.url:  # the config loader requires one; a hand-built spec may lack it
        raise ValueError(f'server {spec.name!r}: transport {spec.transport!r} needs field "url"')
    url = spec.url
    hooks = {"response": [on_response]} if on_response is not None else {}
    if spec.transport == "http":
        from mcp.client.streamable_http import streamable_http_client

        from mcpvisor.actors.sdk_compat import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        # What `create_mcp_http_client` builds, with our transport under it.
        timeout = http_timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
        client = httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout, event_hooks=hooks,
                                    transport=BoundedTransport(spec.name, max_message), auth=auth)
        transport = streamable_http_client(url, http_client=client, max_sse_event_size=max_message)
        return _owning(client, transport)
    if spec.transport == "sse":
        from mcp.client.sse import sse_client

        def bounded_client(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                           auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
            # The SDK's factory contract (`create_mcp_http_client`), with our transport under it.
            return httpx2.AsyncClient(headers=headers, timeout=http_timeout or timeout,
                                      auth=auth, follow_redirects=False, event_hooks=hooks,
                                      transport=BoundedTransport(spec.name, max_message))

        return sse_client(url, headers=dict(spec.headers), httpx_client_factory=bounded_client, auth=auth)
    if spec.transport == "ws":
        from mcpvisor.actors.link.ws import websocket_client

        return websocket_client(url, headers=dict(spec.headers), max_message=max_message)
    raise ValueError(f"server {spec.name!r}: unknown transport {spec.transport!r}")


CLIENT_CLOSE_S: Final = 1.0
"""Bound on closing an upstream's HTTP client (shielded: the link is usually being cancelled)."""


@asynccontextmanager
async def _owning(client: httpx2.AsyncClient,
                  transport: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
    """``transport`` over ``client``, closing ``client`` when the transport closes: the SDK
    leaves a client it was handed open (its caller's), so its pooled connections to the
    upstream would otherwise wait for the garbage collector."""
    try:
        async with transport as streams:
            yield streams
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLIENT_CLOSE_S):
            await client.aclose()
