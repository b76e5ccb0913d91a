"""What one upstream actor says and uses: its status record, and the ports it uses (the
router, the supervisor's hooks). Its states are the lifecycle table's
(`mcpvisor.actors.core.lifecycle`), re-exported here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from mcpvisor.actors.core.lifecycle import WAITABLE, State

__all__ = ["USEFUL_METHODS", "WAITABLE", "Hooks", "RouterPort", "State", "UpstreamMeter", "UpstreamStatus"]

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mcpvisor.actors.core.catalog import CacheHint, UpstreamLists
    from mcpvisor.actors.core.spec import ServerSpec
    from mcpvisor.actors.link import CallOrigin
    from mcpvisor.actors.link.oauth_store import TokenStore


USEFUL_METHODS: Final = frozenset({"tools/call", "resources/read", "prompts/get", "completion/complete"})
"""Client requests whose answer shows a life did useful work (issue 18): not our own
initialize, listings or pings."""


class UpstreamStatus(msgspec.Struct, frozen=True):
    """What `mcpvisor status` and ``get-server-status`` show for one server.

    Times (``since``, ``retry_at``) are on the Trio clock; ``uptime`` is seconds.
    ``restarts`` counts failures that led to a restart (crashes, failed starts, hangs);
    ``starts`` counts every start, whatever the reason. ``healthy_lives`` counts lives
    that did useful work before they ended (answered a client, or stayed up
    ``restartResetAfter``), ``failed_starts`` the lives that ended before that;
    ``availability`` is the fraction of client calls the server answered since the proxy
    started (None before the first call).
    """

    name: str
    transport: str
    state: str
    reason: str | None
    since: float
    uptime: float | None
    restarts: int
    circuit: str
    retry_at: float | None
    last_error: str | None
    tool_count: int
    pid: int | None
    protocol_version: str | None
    """The version the server's link was opened in (its session's, for a dual-era one)."""
    in_flight: int
    description: str | None
    starts: int = 0
    consecutive_failures: int = 0
    healthy_lives: int = 0
    failed_starts: int = 0
    restarts_last_minute: int = 0
    calls: int = 0
    answered: int = 0
    availability: float | None = None
    protocol_versions: tuple[str, ...] = ()
    """Every version the proxy reaches it in: ``protocol_version``, then, for a dual-era HTTP
    server under ``auto``, 2026-07-28 (its session-less side); empty while not connected."""
    remembered: str | None = None
    """While a starting server has not listed in this run: when the lists clients are shown
    from memory were seen (UTC, ISO 8601); None otherwise."""


class RouterPort(Protocol):
    """What an upstream actor needs from the router (`mcpvisor.actors.router.Router` has it)."""

    async def send(self, message: object) -> None:
        """Queue a registration message."""

    async def submit(self, message: object) -> None:
        """Queue a registration message and wait until it is applied and announced."""


class UpstreamMeter(Protocol):
    """Where an actor reports what the proxy's metrics count (`mcpvisor.metrics.Metrics`).
    Both calls are synchronous and never wait; times are on the Trio clock."""

    def request_done(self, server: str, method: str, tool: str, started: float, now: float,
                     error: BaseException | None, result: Any = None) -> None:
        """A request sent to ``server`` was answered (``result``) or failed (``error``)."""

    def state_changed(self, server: str, now: float, state: str, event: str, failure: str | None) -> None:
        """``server`` entered ``state`` on lifecycle ``event``; ``failure``: its last failure text."""


class Hooks:
    """Supervisor-level services an upstream uses (logs to clients, fallback origins)."""

    def log_message(self, server: str, params: dict[str, Any]) -> None:  # pragma: no cover - interface
        pass

    def resource_updated(self, server: str, uri: str) -> None:  # pragma: no cover - interface
        pass

    def fallback_origin(self, method: str) -> CallOrigin | None:  # pragma: no cover - interface
        return None

    def log_level(self) -> str | None:  # pragma: no cover - interface
        """The most verbose level any client asked for (``logging/setLevel``), if any."""
        return None

    def token_store(self, server: str) -> TokenStore | None:
        """Where ``server``'s OAuth tokens live (None: nowhere; it cannot log in)."""
        return None

    def open_browser(self) -> bool:
        """Whether a login the running proxy needs opens the browser itself."""
        return False

    def lists_seen(self, spec: ServerSpec, lists: UpstreamLists, era: str | None,
                   hints: Mapping[str, CacheHint] | None = None) -> None:  # pragma: no cover - interface
        """The server of ``spec`` listed ``lists`` while speaking ``era``, each list with the
        caching directives the server sent (``hints``, by kind; none in the handshake era):
        what a later start may list from memory. Must not block."""
