"""The supervision tree: the nurseries that own every actor, and the order they stop in.

Owns the `Supervisor` object an embedding program (or the CLI) holds:

* the root nursery runs the router and the broadcaster; inside it the tree nursery
  runs one upstream actor per enabled server, all started concurrently, so on the
  way out the upstreams stop first (each process group stopped and reaped, in
  parallel) and the router sees them leave (STYLE rule 4);
* the process watchdog (`actors.process.Reaper`) lives around both, so children
  die even if the proxy itself is SIGKILLed;
* the start-up gate: the first ``tools/list`` waits for the eager servers' first
  start at most ``settings.startupWait``; what arrives later reaches clients by
  ``list_changed``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from actors.catalog import Snapshot
from actors.errors import ProxyError
from actors.front import Front, strip_upstream_stamps, unknown_tool_result
from actors.link import CallOrigin
from actors.messages import CallFinished, Event, EventBus, ListChanged
from actors.process import Reaper, open_reaper
from actors.router import Changes, RegistryCore, Router, ServerFilter
from actors.upstream import Hooks, State, Upstream, UpstreamStatus
from supervisor.config import Config, ServerSpec, load_config, parse_config

logger = logging.getLogger(__name__)

READY_STATES: Final = frozenset({State.READY})
SETTLED_STATES: Final = frozenset({State.READY, State.CIRCUIT_OPEN, State.DISABLED, State.STOPPED, State.IDLE})


def coerce_config(config: Config | str | Path | Mapping[str, Any]) -> Config:
    if isinstance(config, Config):
        return config
    if isinstance(config, str | Path):
        return load_config(config)
    return parse_config(dict(config))


def server_filter(spec: ServerSpec) -> ServerFilter:
    exposed = None
    if spec.exposed_tools is not None:
        exposed = {t.original: t.exposed for t in spec.exposed_tools}
    return ServerFilter(exposed=exposed, hidden=frozenset(spec.hidden_tools))


class _Hooks(Hooks):
    def __init__(self, sup: Supervisor) -> None:
        self._sup = sup

    def log_message(self, server: str, params: dict[str, Any]) -> None:
        self._sup.front.log_message(server, params)

    def resource_updated(self, server: str, uri: str) -> None:
        self._sup.front.resource_updated(uri)

    def fallback_origin(self, method: str) -> CallOrigin | None:
        return self._sup.front.fallback_origin(method)


class Supervisor:
    """A running proxy: its upstreams, its router, what clients see. Use `open_supervisor`."""

    def __init__(self, config: Config, *, reaper: Reaper | None, rng: random.Random | None = None) -> None:
        self.config = config
        self.settings = config.settings
        self.events = EventBus()
        self.reaper = reaper
        self._rng = rng or random.Random()
        self._era_memory: dict[str, str] = {}
        self.front = Front(self, name="mcpvisor", version=_version(),
                           instructions="mcpvisor: one MCP server in front of several; tool names are prefixed "
                                        "with the name of the server that provides them.")
        self.core = RegistryCore(
            [s.name for s in config.servers.values() if s.enabled],
            namespacing=self.settings.namespacing,
            filters={s.name: server_filter(s) for s in config.servers.values()},
        )
        self.router = Router(self.core, self._announce)
        self.upstreams: dict[str, Upstream] = {}
        self._hooks = _Hooks(self)
        self._startup_done = trio.Event()
        self._tree: trio.Nursery | None = None
        self._root: trio.Nursery | None = None

    # --- the embedding API --------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        """The tools a client would see now (the ``tools/list`` payload)."""
        return [dict(t) for t in self.router.snapshot.tools_list]

    @property
    def snapshot(self) -> Snapshot:
        return self.router.snapshot

    async def wait_ready(self, timeout: float | None = None) -> list[str]:
        """Wait until every eager server is ready or has settled (circuit open, disabled).

        Args:
            timeout: seconds to wait at most (default: ``settings.startupWait``).

        Returns:
            The names of servers that are not ready when it returns (empty when all are).
        """
        limit = self.settings.startup_wait if timeout is None else timeout
        with trio.move_on_after(limit):
            while True:
                pending = [u for u in self.upstreams.values() if u.state not in SETTLED_STATES]
                if not pending:
                    break
                await pending[0]._changed.wait()
        return [name for name, u in self.upstreams.items() if u.state not in READY_STATES and u.state is not State.IDLE]

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool by its exposed name, as a client would; returns the ``CallToolResult``.

        Tool failures come back as results with ``isError``; an unknown tool too.

        Raises:
            actors.errors.ProxyError: the server is down, timed out, or died mid-call.
        """
        snapshot = self.router.snapshot
        route = snapshot.tools.get(name)
        if route is None and not self.started:
            await self.wait_startup()
            snapshot = self.router.snapshot
            route = snapshot.tools.get(name)
        if route is None:
            if name in snapshot.local_tools:
                return await self.call_local_tool(name, dict(arguments or {}), None)
            return unknown_tool_result(name, snapshot)
        started = trio.current_time()
        try:
            result = await self.upstreams[route.server].request(
                "tools/call", {"name": route.original, "arguments": dict(arguments or {})},
                retry_safe=route.retry_safe,
            )
        except ProxyError as exc:
            self.note_call(route.server, route.original, started, exc)
            raise
        self.note_call(route.server, route.original, started, None)
        return strip_upstream_stamps(result)

    def subscribe(self) -> AsyncIterator[Event]:
        """``async for event in sup.subscribe()``: state changes, list changes, calls."""
        return self.events.subscribe()

    def status(self) -> list[UpstreamStatus]:
        return [u.status() for u in self.upstreams.values()]

    # --- seams other modules fill ---------------------------------------------------------
    async def equip(self, name: str) -> dict[str, Any]:
        """Equip a toolset (menu exposure): clients see exactly its tools. (toolsets module)"""
        raise NotImplementedError("toolsets arrive with actors/menu.py")

    async def unequip(self) -> dict[str, Any]:
        """Unequip the current toolset: back to the menu. (toolsets module)"""
        raise NotImplementedError("toolsets arrive with actors/menu.py")

    async def reload(self, config: Config | None = None) -> dict[str, Any]:
        """Re-read the config (or apply ``config``): start added servers, stop removed ones,
        restart changed ones, one list_changed. (supervisor/reload.py)"""
        raise NotImplementedError("hot reload arrives with supervisor/reload.py")

    # --- what the front needs -------------------------------------------------------------
    async def wait_startup(self) -> None:
        """Wait until every eager server made its first start attempt (at most ``startupWait``)."""
        await self._startup_done.wait()

    @property
    def started(self) -> bool:
        return self._startup_done.is_set()

    async def call_local_tool(self, name: str, arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return unknown_tool_result(name, self.router.snapshot)

    def note_call(self, server: str, tool: str, started: float, error: BaseException | None) -> None:
        if self.events.has_subscribers:
            self.events.publish(CallFinished(server, tool, trio.current_time() - started, error is None,
                                             str(error) if error is not None else None))

    def _announce(self, snapshot: Snapshot, changes: Changes) -> None:
        self.front.announce(snapshot, changes)
        self.events.publish(ListChanged(changes.kinds(), snapshot.version))

    # --- lifecycle -------------------------------------------------------------------------
    def _make_upstream(self, spec: ServerSpec) -> Upstream:
        return Upstream(spec, router=self.router, events=self.events, hooks=self._hooks, reaper=self.reaper,
                        max_message=self.settings.max_message_bytes, rng=self._rng, era_memory=self._era_memory)

    async def start_server(self, spec: ServerSpec) -> Upstream:
        assert self._tree is not None
        up = self._make_upstream(spec)
        self.upstreams[spec.name] = up
        await self._tree.start(up.run)
        return up

    async def _startup_gate(self) -> None:
        eager = [u for u in self.upstreams.values() if not u.spec.lazy]
        with trio.move_on_after(self.settings.startup_wait):
            for up in eager:
                await up.first_attempt_done.wait()
        self._startup_done.set()


def _version() -> str:
    from supervisor import __version__

    return __version__


@asynccontextmanager
async def open_supervisor(
    config: Config | str | Path | Mapping[str, Any],
    *,
    rng: random.Random | None = None,
) -> AsyncIterator[Supervisor]:
    """Start every enabled server under supervision for the duration of the block.

    Args:
        config: a `Config`, a path to a config file, or the config as a dict.

    Leaving the block stops everything: each server's process group is stopped
    (close stdin, SIGTERM, SIGKILL, bounded) and reaped; no task or process survives.
    """
    cfg = coerce_config(config)
    async with open_reaper() as reaper, trio.open_nursery() as root:
        sup = Supervisor(cfg, reaper=reaper, rng=rng)
        sup._root = root
        await root.start(sup.router.run)
        await root.start(sup.front.run)
        try:
            async with trio.open_nursery() as tree:
                sup._tree = tree
                for spec in cfg.enabled_servers():
                    await sup.start_server(spec)
                root.start_soon(sup._startup_gate)
                try:
                    yield sup
                finally:
                    tree.cancel_scope.cancel()
        finally:
            sup.events.close()
            root.cancel_scope.cancel()
