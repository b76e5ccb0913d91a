"""How a server is reached: the argv of a stdio or docker server, the SDK client transport
of an http, sse or ws one.

Shared by the upstream actor (`mcpvisor.actors.upstream.actor`) and `mcpvisor mcp test`
(`mcpvisor.probe`), so both start a server the same way.
"""

from __future__ import annotations

from typing import Any


def stdio_argv(spec: Any) -> list[str]:
    """The command line of a ``stdio`` or ``stdio-docker`` server."""
    if spec.transport == "stdio":
        return [spec.command or "", *spec.args]
    return docker_argv(spec)


def docker_argv(spec: Any) -> list[str]:
    argv = ["docker", "run", "-i", "--rm", "--init"]
    for key in spec.env:
        argv += ["-e", key]
    argv += list(spec.docker_args)
    argv.append(spec.image)
    argv += list(spec.args)
    return argv


def sdk_transport(spec: Any, max_message: int) -> Any:
    """The SDK client transport for an http, sse or ws server."""
    if spec.transport == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(spec.headers))
        return streamable_http_client(spec.url, http_client=client)
    if spec.transport == "sse":
        from mcp.client.sse import sse_client

        return sse_client(spec.url, headers=dict(spec.headers))
    if spec.transport == "ws":
        from mcpvisor.actors.ws import websocket_client

        return websocket_client(spec.url, headers=dict(spec.headers), max_message=max_message)
    raise ValueError(f"unknown transport {spec.transport!r}")
