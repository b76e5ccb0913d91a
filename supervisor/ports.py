"""What the supervisor's helpers need of the `Supervisor`, as narrow protocols.

The supervisor (`mcpvisor.proxy.Supervisor`) builds its session views (`mcpvisor.sessions`),
applies reloads (`mcpvisor.reload`) and serves its control socket (`mcpvisor.control`);
those helpers in turn call back into the tree. Typing
them against these ports instead of the tree's class keeps the arrows one way (the tree
imports its helpers, never the reverse) and says exactly what each helper touches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.core.registry import RegistryCore
    from mcpvisor.actors.core.toolsets import ToolsetExposure
    from mcpvisor.actors.fronts.plans import View
    from mcpvisor.actors.harness import ClientSession
    from mcpvisor.actors.router import Router
    from mcpvisor.actors.upstream import Upstream, UpstreamStatus
    from mcpvisor.config import Config, ServerSpec, Settings


class ActorHost(Protocol):
    """Making and running upstream actors as children of the tree."""

    upstreams: dict[str, Upstream]

    def make_upstream(self, spec: ServerSpec) -> Upstream: ...

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> bool: ...


class SessionHost(ActorHost, Protocol):
    """What a harness session view (`mcpvisor.sessions`) needs of the tree."""

    core: RegistryCore
    toolsets: ToolsetExposure

    @property
    def snapshot(self) -> Snapshot: ...

    def upstream_for(self, server: str, session: ClientSession | None) -> Upstream | None: ...

    async def execute_call(self, view: View, name: str, arguments: Mapping[str, Any] | None, *,
                           session: ClientSession | None = None,
                           run: str | None = None) -> dict[str, Any]: ...


class ReloadHost(ActorHost, Protocol):
    """What applying a config (`mcpvisor.reload`) needs of the tree."""

    config: Config
    settings: Settings
    router: Router
    reload_lock: trio.Lock

    async def start_actor(self, up: Upstream) -> None: ...

    async def reload(self, config: Config | None = None) -> dict[str, Any]: ...


class ControlHost(Protocol):
    """What the control socket (`mcpvisor.control`) needs of the tree: the status report
    (its config file, exposure, equipped toolset and servers) and the ops it forwards."""

    config: Config
    settings: Settings
    toolsets: ToolsetExposure

    def status(self) -> list[UpstreamStatus]: ...

    async def equip(self, name: str) -> dict[str, Any]: ...

    async def unequip(self) -> dict[str, Any]: ...

    async def reload(self, config: Config | None = None) -> dict[str, Any]: ...
