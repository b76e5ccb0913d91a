"""The registration messages an upstream sends the router, applied by `RegistryCore`.

Frozen records, dispatched by type (docs/style.md rule 6); no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mcpvisor.actors.core.catalog import UpstreamLists

__all__ = ["UpstreamDown", "UpstreamListed", "UpstreamState", "UpstreamUp"]


class UpstreamUp(msgspec.Struct, frozen=True):
    """A server finished its handshake and listed everything."""

    server: str
    lists: UpstreamLists


class UpstreamListed(msgspec.Struct, frozen=True):
    """A server's list of one kind, listed again (after its list_changed notification, or
    on a cadence)."""

    server: str
    kind: str
    items: tuple[Any, ...]
    announced: bool = False
    """The server itself said this list changed: its clients hear so even when the list
    compares equal (the server may have changed it and back; a client connected directly
    hears every announcement)."""


class UpstreamDown(msgspec.Struct, frozen=True):
    """A server stopped serving. ``withdraw`` removes its tools from clients (circuit open,
    disabled, removed); otherwise they stay listed through a brief restart."""

    server: str
    withdraw: bool
    reason: str | None = None


class UpstreamState(msgspec.Struct, frozen=True):
    """A server's state changed (the router keeps it for pending-tool reports)."""

    server: str
    state: str
    reason: str | None = None
