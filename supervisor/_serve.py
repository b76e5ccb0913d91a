"""Put a `Supervisor` behind a front: stdio, streamable HTTP or websocket.

Owns the fronts' lifetimes: `serve` returns when a stdio client closes its end, and
runs until cancelled for the network fronts.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import trio

from supervisor.config import DEFAULT_HOST, DEFAULT_PORT
from supervisor.tree import Supervisor

logger = logging.getLogger(__name__)

HTTP_PATH: Final = "/mcp"
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})


def _transport_security(host: str) -> Any:
    """DNS-rebinding protection stays on: only this host's names and loopback are accepted."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if host not in LOOPBACK and host not in ("0.0.0.0", "::"):
        hosts.append(f"{host}:*")
        origins.append(f"http://{host}:*")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


async def serve_http(sup: Supervisor, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (hypercorn's trio worker) until cancelled.

    ``task_status.started`` receives the URL actually bound (``port=0`` picks a free port).
    """
    import hypercorn.config
    import hypercorn.trio

    app = sup.front.server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        host=host,
        transport_security=_transport_security(host),
        max_request_body_size=sup.settings.max_message_bytes,
    )
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 2.0

    async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn.trio.serve(app, config, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(started)
        url = binds[0].rstrip("/") + HTTP_PATH
        task_status.started(url)


async def serve_stdio(sup: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve one client on this process's stdin/stdout until it closes stdin."""
    from actors.stdio_front import StdioFront, claim_stdio

    async with claim_stdio() as (receive, send):
        front = StdioFront(sup.front, receive, send, max_message=sup.settings.max_message_bytes,
                           fast_path=sup.settings.fast_path)
        task_status.started()
        await front.serve()


async def serve_ws(sup: Supervisor, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                   task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over websocket at ``ws://host:port/`` until cancelled."""
    from actors.ws import serve_websocket_front

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(lambda task_status: serve_websocket_front(
            sup.front, host, port, max_message=sup.settings.max_message_bytes, task_status=task_status))
        task_status.started(f"ws://{host}:{bound}/")


async def serve(sup: Supervisor, transport: str = "stdio", *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
    """Put ``sup`` behind a front. stdio returns at EOF; http and ws run until cancelled."""
    if transport == "stdio":
        await serve_stdio(sup, task_status=task_status)
    elif transport == "http":
        await serve_http(sup, host, port, task_status=task_status)
    elif transport == "ws":
        await serve_ws(sup, host, port, task_status=task_status)
    else:
        raise ValueError(f"unknown transport {transport!r} (stdio, http or ws)")
