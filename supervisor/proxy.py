"""The `Supervisor`: a running proxy's parts, and what is asked of it.

`mcpvisor.tree.open_supervisor` builds one and runs it in the supervision tree; this
module owns the object itself, which an embedding program holds and every front serves:

* its parts, wired in `Supervisor.__init__`: the router and the broadcaster, the
  exposure (``settings.exposure``, ``$MCPVISOR_EXPOSURE``: the toolsets and
  configuration mode of `mcpvisor.actors.core.toolsets`, and the management tools of
  `mcpvisor.menu`; with ``discovery``, ``discover_tool`` and ``load_mcp``,
  `mcpvisor.menu.discovery`), the lazy servers' loader (`mcpvisor.actors.lazy.LazyLoader`),
  shared by every exposure, and the upstream actors it makes;
* the embedding API: ``tools``, ``wait_ready``, ``call_tool``, ``session``, ``events``,
  ``status``, ``equip``, ``unequip``, ``reload``;
* what the fronts, sessions, reload and the control socket need of it (`mcpvisor.ports`).

Beside it: `mcpvisor._hooks` (what the actors tell it) and `mcpvisor._notes` (finished
calls and list changes: metrics, events, journal; a base class).
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor._boot import instructions, recall
from mcpvisor._hooks import UpstreamHooks
from mcpvisor._notes import CallNotes
from mcpvisor.actors import __version__, telemetry
from mcpvisor.actors.core.catalog import Snapshot
from mcpvisor.actors.core.discovery import DISCOVER_TOOL, LOAD_MCP, LazyBook
from mcpvisor.actors.core.pending import WAIT_STATES
from mcpvisor.actors.core.plan import CallLocal, CallRoute, Refused, unknown_tool
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import ToolsetExposure
from mcpvisor.actors.eras import strip_upstream_stamps
from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.fronts.front import Front
from mcpvisor.actors.fronts.plans import View, settle
from mcpvisor.actors.fronts.views import ToolsetViews
from mcpvisor.actors.harness import ClientSession
from mcpvisor.actors.lazy import LazyLoader
from mcpvisor.actors.messages import Event, EventBus
from mcpvisor.actors.process import Reaper, withhold_values
from mcpvisor.actors.router import Router
from mcpvisor.actors.upstream import State, Upstream, UpstreamStatus
from mcpvisor.config import Config, ServerSpec, declared_toolset, server_filter
from mcpvisor.menu import DEFINITIONS, Menu
from mcpvisor.menu.discovery import discover, load_mcp
from mcpvisor.redact import scrub_known
from mcpvisor.remembered import CatalogFile, CatalogWriter, Remembered
from mcpvisor.sessions import ScopedServers, SessionView, open_session
from mcpvisor.settings import state_dir as resolve_state_dir
from mcpvisor.settings import with_env_overrides
from mcpvisor.startup import ListChangeCoalescer, startup_gate
from mcpvisor.state import StateStore
from mcpvisor.tokens import FileTokenStore

if TYPE_CHECKING:
    from mcpvisor.actors.link.oauth_store import TokenStore
    from mcpvisor.pgstore.store import PgStore


READY_STATES: Final = frozenset({State.READY})
SETTLED_STATES: Final = frozenset({State.READY, State.CIRCUIT_OPEN, State.DISABLED, State.STOPPED,
                                   State.IDLE, State.MISCONFIGURED})


class Supervisor(CallNotes):
    """A running proxy: its upstreams, its router, what clients see. Use `mcpvisor.open_supervisor`."""

    def __init__(self, config: Config, *, reaper: Reaper | None, rng: random.Random | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 shared: PgStore | None = None) -> None:
        self.config = config
        self.settings = with_env_overrides(config.settings)
        withhold_values(self.settings.auth_tokens.values())
        self.event_bus = EventBus(on_change=self.heard_changed)
        self.reaper = reaper
        self._rng = rng or random.Random()
        self._era_memory: dict[str, str] = {}
        self.front = Front(self, name="mcpvisor", version=__version__,
                           instructions=instructions(self.settings.namespacing))
        self.shared = shared
        """The PostgreSQL store shared with other replicas (``settings.store``); None: files."""
        directory = resolve_state_dir(state_dir, configured=self.settings.state_dir)
        self.store: StateStore = shared.state if shared is not None else StateStore(directory)
        self.lazy = LazyBook.of({s.name: s.description for s in config.enabled_servers() if s.lazy})
        self.toolsets = ToolsetExposure(
            self.settings.exposure,
            definitions=DEFINITIONS,
            declared={name: declared_toolset(decl) for name, decl in config.toolsets.items()},
            pin_schemas=self.settings.pin_schemas,
            lazy=self.lazy,
            discovery_budget=self.settings.discovery_budget,
            server_descriptions={s.name: s.description for s in config.servers.values() if s.description},
        )
        self.core = RegistryCore(
            [s.name for s in config.servers.values() if s.enabled],
            namespacing=self.settings.namespacing,
            filters={s.name: server_filter(s) for s in config.servers.values()},
            exposure=self.toolsets,
            compounds=tuple(config.compound_tools.values()),
        )
        self.coalescer = ListChangeCoalescer(self._announce)
        """Gathers the list changes of start-up into a few notifications (`mcpvisor.startup`)."""
        self.router = Router(self.core, self.coalescer.offer)
        self.front.views = ToolsetViews(
            self.toolsets.toolsets, lambda toolset: self.toolsets.view(self.core, toolset),
            lambda: self.router.snapshot, tokens=lambda: self.settings.auth_tokens,
            bindings=lambda: self.settings.token_toolsets,
        )
        """``/mcp/toolset/NAME`` and toolset-bound tokens (`mcpvisor.actors.fronts.views`)."""
        self.loader = LazyLoader(self.router, lambda: self.upstreams, self.lazy)
        """Every start of a lazy server goes through it (coalesced, 3 failed loads at most)."""
        self.menu = Menu(self)
        self.toolsets.server_state = self.menu.server_state
        self.upstreams: dict[str, Upstream] = {}
        self._hooks = UpstreamHooks(self)
        self._startup_done = trio.Event()
        self._tree: trio.Nursery | None = None
        self.reload_lock = trio.Lock()
        """Reloads are applied one at a time, in call order (`mcpvisor.reload`)."""
        self._root: trio.Nursery | None = None
        self.scoped = ScopedServers(self)
        """The instances of ``"scope": "session"`` servers and their warm pools."""
        self.catalog = CatalogWriter(shared.catalog if shared is not None
                                     else CatalogFile(self.store.directory))
        """Remembers what each server lists, for the next start (`mcpvisor.remembered`)."""
        self.remembered: dict[str, Remembered] = {}
        """Servers listed from memory that have not listed in this run yet."""

    # --- the embedding API --------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        """The tools a client would see now (the ``tools/list`` payload)."""
        return [dict(t) for t in self.router.snapshot.tools_list]

    @property
    def snapshot(self) -> Snapshot:
        return self.router.snapshot

    # The default comes from settings.startupWait: a caller's cancel scope could not supply it.
    async def wait_ready(self, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109
        """Wait until every eager server is ready or has settled (circuit open, disabled),
        and clients have been told of the lists start-up changed.

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
                await pending[0].wait_changed()
            await self.coalescer.wait_ended()  # and the list changes of start-up have been announced
        return [name for name, u in self.upstreams.items()
                if u.state not in READY_STATES and u.state is not State.IDLE]

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool by its exposed name, as a client would; returns the ``CallToolResult``.

        Tool failures come back as results with ``isError``; an unknown tool too. A tool of
        a server that is still starting waits for it (its ``restartWait``).

        Raises:
            actors.errors.ProxyError: the server is down, timed out, or died mid-call.
        """
        if telemetry.tracer is not None:  # the embedding program is the client: a root SERVER span
            with telemetry.api_span("tools/call", name):
                return await self.execute_call(self.router, name, arguments)
        return await self.execute_call(self.router, name, arguments)

    async def execute_call(self, view: View, name: str, arguments: Mapping[str, Any] | None, *,
                           session: ClientSession | None = None, run: str | None = None) -> dict[str, Any]:
        """Execute the plan (`mcpvisor.actors.core.plan`) of calling ``name`` as seen from ``view``.

        What `call_tool` and `SessionView.call_tool` do: the waits and loads of `settle`,
        then the routed call (to ``session``'s own instance of a session-scoped server),
        a management tool, or the refusal; each routed call is journalled with
        ``session``'s label and ``run``. Raises as `call_tool` does.
        """
        plan = await settle(self, view, name, arguments)
        if isinstance(plan, Refused):
            return plan.result
        if isinstance(plan, CallLocal):
            return await self.call_local_tool(plan.name, plan.arguments, None, snapshot=view.snapshot)
        if isinstance(plan, CallRoute):  # a compound tool's subtool, or the tool use_tool names
            route, args = plan.route, plan.arguments
        else:
            route, args = plan, dict(arguments or {})
        server, original = route.server, route.original
        up = self.upstream_for(server, session)
        label = session.label if session is not None else None
        started = trio.current_time()
        try:
            if up is None:
                raise ProxyError(f"server {server} is not running")
            result = await up.request("tools/call", {"name": original, "arguments": args},
                                      retry_safe=route.retry_safe)
        except (ProxyError, trio.Cancelled) as exc:
            self.note_call(server, original, started, exc, session=label, run=run, arguments=args,
                           upstream=up)
            raise
        self.note_call(server, original, started, None, session=label, run=run, arguments=args,
                       result=result, upstream=up)
        return strip_upstream_stamps(result)

    def session(self, label: str | None = None, *,
                run: str | None = None) -> AbstractAsyncContextManager[SessionView]:
        """``async with sup.session("episode-7") as s``: an isolated client view, no transport.

        ``s.call_tool``, ``s.tools()``, ``s.equip(name)`` act for this session only: its
        own equipped toolset, its own instance of every session-scoped server (from the
        warm pool when there is one). Its calls are journalled with session ``label`` and
        run ``run`` (default: ``label``). Leaving the block stops its instances and waits
        for them to be stopped (bounded), also on cancellation or an exception.
        """
        return open_session(self, label, run=run)

    def disabled_servers(self) -> list[str]:
        """Configured servers with ``enabled: false`` (no actor runs them): a request for one
        of their names is told the server is disabled, not that the name is unknown."""
        return [name for name, spec in self.config.servers.items() if not spec.enabled]

    def upstream_for(self, server: str, session: ClientSession | None) -> Upstream | None:
        """The actor a call to ``server`` goes to for ``session``: its own instance when the
        server is session-scoped (`mcpvisor.sessions`), the shared one otherwise."""
        up = self.upstreams.get(server)
        if up is None or session is None or getattr(up.spec, "scope", "shared") != "session":
            return up
        return self.scoped.instance(server, session)

    def events(self) -> AsyncIterator[Event]:
        """``async for event in sup.events()``: every upstream state change (with its
        reason), every list change, every finished call, from now on (`mcpvisor.actors.messages`)."""
        return self.event_bus.subscribe()

    def status(self) -> list[UpstreamStatus]:
        """Every configured server's status, in file order: those that run (whatever their
        state), and those the config disables (state ``disabled``), which have no actor; one
        listed from memory says from when, and how many tools; each reason and last error
        scrubbed of the config's secrets (they may quote a server's stderr, which may print
        its key)."""
        shown = [self._status_of(u) if (u := self.upstreams.get(name)) is not None else _disabled_status(spec)
                 for name, spec in self.config.servers.items() if name in self.upstreams or not spec.enabled]
        shown += [self._status_of(u) for name, u in self.upstreams.items() if name not in self.config.servers]
        return [msgspec.structs.replace(s, reason=s.reason and scrub_known(s.reason),
                                    last_error=s.last_error and scrub_known(s.last_error)) for s in shown]

    def _status_of(self, up: Upstream) -> UpstreamStatus:
        status = up.status()
        memory = self.remembered.get(up.name)
        if memory is not None and status.state in WAIT_STATES:  # withdrawn once it is down
            status = msgspec.structs.replace(status, remembered=memory.seen,
                                             tool_count=len(memory.lists.tools))
        return status

    async def recall(self) -> None:
        """List each eager server's remembered lists (`mcpvisor.remembered`) until it lists
        its own, and open it in the era it answered in last time. A server whose command,
        args, env, url or headers changed since is not listed from memory. Call before the
        first snapshot clients see."""
        self.remembered.update(await recall(self.catalog, self.config, self.core, self._era_memory))

    async def store_health(self) -> str | None:
        """None when the store is reachable, else a short reason (no secret in it): what
        ``/readyz`` reports. Files: always None. PostgreSQL: ``SELECT 1`` bounded to about
        a second, the answer reused for a second."""
        if self.shared is None:
            return None
        return await self.shared.health()

    def token_store(self, server: str) -> TokenStore:
        """Where ``server``'s upstream OAuth tokens live: the shared store, else the state directory."""
        if self.shared is not None:
            return self.shared.tokens(server)
        return FileTokenStore(self.store.directory, server)

    # --- seams other modules fill ---------------------------------------------------------
    async def login(self, name: str) -> str:
        """Start the OAuth login of server ``name`` (in ``needs_login``) and return the
        authorization URL for a person to open (`Upstream.start_login`).

        Raises:
            ValueError: no such running server, or it needs no login now.
        """
        up = self.upstreams.get(name)
        if up is None:
            raise ValueError(f"no running server named {name!r}")
        return await up.start_login()

    async def equip(self, name: str) -> dict[str, Any]:
        """Equip toolset ``name``: clients see exactly its tools (and, in menu exposure,
        ``enter-configuration-mode``); one ``list_changed`` when that changes what they see.

        Atomic: the state file is written first, then the router applies it; on any
        failure neither changes. Concurrent calls apply one at a time, in call order.

        Returns:
            The ``get-active-toolset`` report: each tool's state, the names clients see.

        Raises:
            actors.core.toolsets.ToolsetError: unknown toolset (``data["toolsets"]`` lists
                those that exist), a schema change refused by ``pinSchemas``, or the
                state directory cannot be written.
        """
        return await self.menu.equip(name)

    async def unequip(self) -> dict[str, Any]:
        """Unequip the current toolset: back to the menu (``all`` exposure: every tool).

        Raises:
            actors.core.toolsets.ToolsetError: nothing is equipped, or the state cannot be written.
        """
        return await self.menu.unequip()

    async def reload(self, config: Config | None = None) -> dict[str, Any]:
        """Re-read the config file (or apply ``config``): start added servers, stop removed
        or disabled ones, restart changed ones, leave the rest running; clients get one
        list_changed. A config that does not validate changes nothing (``ok: false``).
        See `mcpvisor.reload.reload_supervisor`."""
        from mcpvisor.reload import reload_supervisor

        return await reload_supervisor(self, config)

    # --- what the front needs -------------------------------------------------------------
    async def wait_startup(self) -> None:
        """Wait until every eager server made its first start attempt (at most ``startupWait``):
        how long a request naming something no server lists yet waits."""
        await self._startup_done.wait()

    @property
    def started(self) -> bool:
        return self._startup_done.is_set()

    async def call_local_tool(self, name: str, arguments: dict[str, Any], ctx: Any, *,
                              snapshot: Snapshot | None = None) -> dict[str, Any]:
        """Run a management tool (a name in ``snapshot.local_tools``; default: the router's
        snapshot; a harness session passes its own view, which ``discover_tool`` describes)."""
        snapshot = snapshot if snapshot is not None else self.router.snapshot
        if name not in snapshot.local_tools:
            return unknown_tool(name, snapshot)
        if name == DISCOVER_TOOL:
            return discover(snapshot, arguments)
        if name == LOAD_MCP:
            return await load_mcp(self.loader, arguments)
        return await self.menu.call(name, arguments)

    # --- lifecycle -------------------------------------------------------------------------
    def make_upstream(self, spec: ServerSpec) -> Upstream:
        """A new actor for ``spec`` wired to this tree (not started: `start_actor`)."""
        up = Upstream(spec, router=self.router, events=self.event_bus, hooks=self._hooks,
                      reaper=self.reaper, max_message=self.settings.max_message_bytes, rng=self._rng,
                      era_memory=self._era_memory)
        up.meter = self.metrics
        return up

    async def start_server(self, spec: ServerSpec) -> Upstream:
        up = self.make_upstream(spec)
        self.upstreams[spec.name] = up
        await self.start_actor(up)
        return up

    async def start_actor(self, up: Upstream) -> None:
        """Run ``up`` as a child of the tree; returns once it has started."""
        assert self._tree is not None, "the supervisor is not running"
        await self._tree.start(up.run)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        """Run ``fn(*args)`` as a task of the tree; False when the tree is not running
        (not started yet, or shutting down)."""
        if self._tree is None:
            return False
        try:
            self._tree.start_soon(fn, *args)
        except RuntimeError:  # the tree is closed: the supervisor is shutting down
            return False
        return True

    async def _startup_gate(self) -> None:
        eager = [u.first_attempt_done for u in self.upstreams.values() if not u.spec.lazy]
        await startup_gate(eager, self.settings.startup_wait, self._startup_done, self.coalescer)


def _disabled_status(spec: ServerSpec) -> UpstreamStatus:
    """The status of a server the config disables (no actor runs for it)."""
    return UpstreamStatus(name=spec.name, transport=spec.transport, state=State.DISABLED.value,
                          reason="disabled in the config", since=trio.current_time(), uptime=None, restarts=0,
                          circuit="closed", retry_at=None, last_error=None, tool_count=0, pid=None,
                          protocol_version=None, in_flight=0, description=spec.description)

