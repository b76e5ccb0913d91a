"""Every reach into trio-websocket's private names, in one place, checked at import.

The websocket front reads the upgrade request itself, one task owning the stream, so
that a client gone before its request ends the wait at once and the front can refuse
an unauthorised or over-limit upgrade with its own status. trio-websocket's public
server loop (``serve_websocket``) allows neither, so the front drives the connection's
own reader and request wait, and reads the ``Host`` header, which wsproto moves out of
the header list into its request event and trio-websocket has no public accessor for.

Checked against trio-websocket 0.12 on wsproto 1.x (`CHECKED_TRIO_WEBSOCKET`).
Importing this module checks every name it reaches for and raises ImportError naming
each one missing.
"""

from __future__ import annotations

import dataclasses
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from trio_websocket import WebSocketConnection, WebSocketRequest
from wsproto.events import Request

__all__ = ["CHECKED_TRIO_WEBSOCKET", "get_request", "missing", "read_frames", "request_host"]

CHECKED_TRIO_WEBSOCKET: Final = "trio-websocket>=0.12,<0.13 with wsproto>=1.2,<2"
"""The versions every reach here was read against and tested with."""


def missing() -> list[str]:
    """The private names this module needs that the installed libraries lack (empty: all there)."""
    gone = [f"trio_websocket.WebSocketConnection.{name}" for name in ("_reader_task", "_get_request")
            if not callable(getattr(WebSocketConnection, name, None))]
    init = getattr(WebSocketRequest.__init__, "__code__", None)
    if init is None or "_event" not in init.co_names:
        gone.append("trio_websocket.WebSocketRequest._event")
    fields = {f.name for f in dataclasses.fields(Request)} if dataclasses.is_dataclass(Request) else set()
    if "host" not in fields:
        gone.append("wsproto.events.Request.host")
    return gone


def _installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


_GONE = missing()
if _GONE:
    raise ImportError(
        f"mcpvisor needs websocket library internals that the installed trio-websocket "
        f"{_installed('trio-websocket')} / wsproto {_installed('wsproto')} lack: {', '.join(_GONE)} "
        f"(mcpvisor was checked against {CHECKED_TRIO_WEBSOCKET})"
    )


async def read_frames(ws: WebSocketConnection) -> None:
    """Run the connection's reader: it reads the stream, answers the handshake's
    protocol errors, and queues messages; returns when the connection closes."""
    await ws._reader_task()


async def get_request(ws: WebSocketConnection) -> WebSocketRequest:
    """Wait for the client's upgrade request (the reader must be running)."""
    return await ws._get_request()


def request_host(request: WebSocketRequest) -> str:
    """The upgrade request's ``Host`` header."""
    return str(request._event.host)
