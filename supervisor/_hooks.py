"""What the upstream actors tell the tree: `UpstreamHooks`, the tree's side of their `Hooks` port.

Each actor reaches the supervisor only through this adapter: an upstream's log messages
and resource updates go to the front's clients, the calling client of a request is
looked up on the front, the server's OAuth tokens live in the state directory (shared
by every proxy of this user) or the replicas' shared store, and what a server lists is
remembered for the next start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcpvisor.actors.core.catalog import CacheHint, UpstreamLists
from mcpvisor.actors.upstream import Hooks

if TYPE_CHECKING:
    from mcpvisor.actors.link import CallOrigin
    from mcpvisor.actors.link.oauth_store import TokenStore
    from mcpvisor.proxy import Supervisor


class UpstreamHooks(Hooks):
    """The hooks every upstream actor of one supervisor shares."""

    def __init__(self, sup: Supervisor) -> None:
        self._sup = sup

    def log_message(self, server: str, params: dict[str, Any]) -> None:
        self._sup.front.log_message(server, params)

    def resource_updated(self, server: str, uri: str) -> None:
        self._sup.front.resource_updated(uri)

    def fallback_origin(self, method: str) -> CallOrigin | None:
        return self._sup.front.fallback_origin(method)

    def log_level(self) -> str | None:
        return self._sup.front.log_level

    def token_store(self, server: str) -> TokenStore:
        return self._sup.token_store(server)

    def open_browser(self) -> bool:
        return self._sup.settings.oauth_open_browser

    def lists_seen(self, spec: Any, lists: UpstreamLists, era: str | None,
                   hints: Mapping[str, CacheHint] | None = None) -> None:
        self._sup.remembered.pop(spec.name, None)
        self._sup.catalog.seen(spec, lists, era, hints)
