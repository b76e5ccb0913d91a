"""What the shared SDK front (`mcpvisor.actors.fronts.sdk`) and its call paths need from the supervisor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.harness import ClientSession
    from mcpvisor.actors.router import Router
    from mcpvisor.actors.upstream import Upstream


class Backend(Protocol):
    """What the front needs from the supervisor."""

    router: Router

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        """The upstream actors by server name (read-only here: the supervisor owns them)."""

    async def wait_startup(self) -> None: ...

    @property
    def started(self) -> bool: ...

    async def call_local_tool(self, name: str, arguments: dict[str, Any],
                              ctx: ServerRequestContext[Any, Any] | None, *,
                              snapshot: Snapshot | None = None) -> dict[str, Any]: ...

    hears_calls: bool
    """Whether `note_call` has anyone to tell (metrics, the journal, an ``events()``
    subscriber), kept current: the fast path skips building the note when not."""

    def note_call(self, server: str, tool: str, started: float, error: BaseException | None, *,
                  session: str | None = None, run: Any = None, arguments: Any = None, result: Any = None,
                  retries: int = 0, upstream: Upstream | None = None,
                  trace_id: str | None = None, direct: bool = False) -> None:
        """A call finished. ``direct``: the fast path's, whose request upstream began with
        it (its duration is the upstream leg's too, which nothing else measured)."""

    def upstream_for(self, server: str, session: ClientSession | None) -> Upstream | None: ...
