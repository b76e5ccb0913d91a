"""The session-less 2026-07-28 side of a dual-era HTTP upstream opened in the handshake era.

`mcpvisor.actors.link.sdk` opens it beside the session (`Link.modern_side`) and sends
2026-07-28 clients' requests there (`mcpvisor.actors.link.base.Link.request`). What the
side needs besides its requests, while it lives (`follow`):

* the server's tool list, read on the side itself: a 2026-07-28 ``tools/call`` to a tool
  whose arguments map to ``Mcp-Param-*`` headers (``x-mcp-header``) must carry them, and
  the SDK session derives them from its own listing of the tool (re-read when the tools
  change);
* a ``subscriptions/listen`` stream: a dual-era server announces a change made during a
  2026-07-28 request on its listen streams, which the handshake-era session never hears.
  A server may announce one change on both (the SDK's own announce to the listen streams
  of every change and to the session of the changes its requests make), and clients must
  hear it once: `Announcements` takes an announcement on one link that follows one on the
  other within `ECHO_S` for its echo, and only re-lists for it (clients hear of it only
  if the list really changed).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from mcpvisor.actors.errors import ProxyError

if TYPE_CHECKING:
    from mcpvisor.actors.link.base import Link, LinkEvents
    from mcpvisor.actors.link.ports import CallOrigin

logger = logging.getLogger(__name__)

MAX_TOOL_PAGES: Final = 100
"""Bound on the pages of one tools listing on the side (a server that keeps handing out cursors)."""

LISTEN_FOR: Final = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
"""What the side's listen stream asks to hear: the list changes (resource updates are
followed on the session, where clients subscribe)."""


ECHO_S: Final = 1.0
"""How close an announcement on one link must follow one on the other to be taken for its
echo: a server announcing one change on both sends them together (milliseconds apart on
loopback); a second change so soon after is not lost, only re-listed (`Announcements`)."""


class Announcements:
    """The list changes a dual-era server announces on its session and on the side's
    listen stream, passed on once each (see the module's note)."""

    def __init__(self, events: LinkEvents) -> None:
        self._events = events
        self._unpaired: dict[tuple[bool, str], deque[float]] = {}

    def heard(self, kind: str, *, side: bool) -> None:
        """The server announced a change of ``kind`` on the side (``side``) or its session."""
        now = trio.current_time()
        other = self._unpaired.get((not side, kind))
        while other and other[0] < now - ECHO_S:
            other.popleft()
        if other:
            other.popleft()
            recheck = getattr(self._events, "list_rechecked", None)
            if recheck is not None:
                recheck(kind)
            return
        self._unpaired.setdefault((side, kind), deque()).append(now)
        self._events.list_changed(kind)


class SideEvents:
    """A side's events: the upstream's own (list changes through `Announcements`), and a
    re-read of the side's tool list when the server says there that its tools changed."""

    def __init__(self, events: LinkEvents) -> None:
        self._events = events
        self.announcements = Announcements(events)
        self.tools_changed = trio.Event()

    def list_changed(self, kind: str) -> None:
        self.announcements.heard(kind, side=True)
        if kind == "tools":
            self.tools_changed.set()

    def resource_updated(self, uri: str) -> None:
        self._events.resource_updated(uri)

    def log_message(self, params: dict[str, Any]) -> None:
        self._events.log_message(params)

    def fallback_origin(self, method: str) -> CallOrigin | None:
        return self._events.fallback_origin(method)

    @property
    def log_level(self) -> str | None:
        return getattr(self._events, "log_level", None)


async def list_tools(side: Link) -> None:
    """Read the server's tool list on the side's own session (which keeps each tool's
    ``Mcp-Param-*`` mapping from it)."""
    session = side.session
    assert session is not None
    cursor: str | None = None
    for _page in range(MAX_TOOL_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        cursor = result.next_cursor
        if not cursor:
            return


async def follow(side: Link, events: SideEvents) -> None:
    """Keep the side's tool list current and its listen stream open, until cancelled."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_listen, side)
        while True:
            await events.tools_changed.wait()
            events.tools_changed = trio.Event()
            try:
                await list_tools(side)
            except (MCPError, ProxyError) as exc:
                logger.debug("%s: could not re-read its tools on the 2026-07-28 side: %s", side.server,
                             type(exc).__name__)


async def _listen(side: Link) -> None:
    """Hold one ``subscriptions/listen`` stream open on the side; its announcements arrive
    through the side's reader. A server without one announces nothing there."""
    try:
        await side.request("subscriptions/listen", {"notifications": LISTEN_FOR}, timeout=math.inf,
                           max_time=math.inf)
    except ProxyError as exc:
        logger.debug("%s: no subscriptions/listen stream on the 2026-07-28 side (%s)", side.server,
                     type(exc).__name__)
