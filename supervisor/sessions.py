"""Session-scoped servers and the harness's client view: one instance per client session.

Owns:

* `ScopedServers`: for each server marked ``"scope": "session"``, the instances that
  belong to client sessions (one per session, started on the session's first call to
  it, stopped when the session ends) and the warm pool (``"pool": N`` instances started
  and unused; a session takes one and a replacement starts at once; a used instance is
  never given to another session). The server's shared instance (the ordinary
  upstream actor under its name) is what clients see the tools of, and what serves
  calls made outside any session;
* `SessionView`: what `Supervisor.session` yields: an isolated client view without a
  transport: its own equipped toolset, its own session-scoped instances, its calls
  labelled with the run in the journal.

Instances are ordinary `mcpvisor.actors.upstream.Upstream` actors (same supervision, timeouts,
restarts) run in the supervisor's tree, so leaving the supervisor stops them all; they
report their lists to nobody (`_QuietRouter`): the shared instance speaks for the
server.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor.actors.core.toolsets import ToolsetError
from mcpvisor.actors.harness import ClientSession
from mcpvisor.actors.upstream import State, Upstream

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.core.model import Toolset
    from mcpvisor.ports import SessionHost

logger = logging.getLogger(__name__)

STOP_WAIT_S: Final = 10.0
"""Bound on waiting for a session's instances to stop when it ends: close stdin, 2 s,
SIGTERM, 2 s, SIGKILL (docs/design.md's stop sequence) fits with room to spare."""

class _QuietRouter:
    """The router port of a session instance: its lists go nowhere (the shared one lists)."""

    async def send(self, message: object) -> None:
        return None

    async def submit(self, message: object) -> None:
        return None


class ScopedStatistics(msgspec.Struct, frozen=True):
    """Instances by server: held by sessions, warm in the pool; sessions with instances."""

    in_sessions: Mapping[str, int]
    warm: Mapping[str, int]
    sessions: int
    started: int


class ScopedServers:
    """The instances of session-scoped servers for one supervisor."""

    def __init__(self, sup: SessionHost) -> None:
        self._sup = sup
        self._pools: dict[str, deque[Upstream]] = {}
        self._held: dict[ClientSession, dict[str, Upstream]] = {}
        self.started = 0
        """Instances started so far (pool and on demand)."""

    def fill_pools(self) -> None:
        """Start the warm instances of every session-scoped server (at supervisor start)."""
        for up in list(self._sup.upstreams.values()):
            if getattr(up.spec, "scope", "shared") == "session":
                self._refill(up.name)

    def instance(self, server: str, session: ClientSession) -> Upstream | None:
        """The session's instance of ``server``: its own, else a warm one, else a new one
        (starting: a call waits for it like for a restart, bounded by ``restartWait``).

        Never blocks. None once the session has ended or the supervisor is stopping.
        """
        if session.ended:
            return None
        held = self._held.get(session)
        if held is None:
            held = self._held[session] = {}
            session.on_end(lambda: self.end(session))
        up = held.get(server)
        if up is not None and up.state is not State.STOPPED:
            return up
        up = self._take_warm(server) or self._start(server)
        if up is None:
            return None
        held[server] = up
        self._refill(server)
        return up

    def _take_warm(self, server: str) -> Upstream | None:
        pool = self._pools.get(server)
        if not pool:
            return None
        shared = self._sup.upstreams.get(server)
        if shared is not None:
            current = self._instance_spec(shared).fingerprint()
            for stale in [up for up in pool if up.spec.fingerprint() != current]:
                pool.remove(stale)  # started before a reload changed the server: not what it is now
                stale.stop()
        # Prefer one that is ready; any other still saves part of its start.
        for up in pool:
            if up.state is State.READY:
                pool.remove(up)
                return up
        return pool.popleft()

    def _refill(self, server: str) -> None:
        shared = self._sup.upstreams.get(server)
        if shared is None:
            return
        pool = self._pools.setdefault(server, deque())
        while len(pool) < getattr(shared.spec, "pool", 0):
            up = self._start(server)
            if up is None:
                return
            pool.append(up)

    def _start(self, server: str) -> Upstream | None:
        shared = self._sup.upstreams.get(server)
        if shared is None:
            return None
        up = self._sup.make_upstream(self._instance_spec(shared))
        up.router = _QuietRouter()
        if not self._sup.start_soon(up.run):
            return None
        self.started += 1
        return up

    @staticmethod
    def _instance_spec(shared: Upstream) -> Any:
        """An instance's spec: the server's, always started (``lazy`` is for the shared one)."""
        return msgspec.structs.replace(shared.spec, lazy=False)

    async def end(self, session: ClientSession) -> None:
        """Stop the session's instances and wait (bounded by `STOP_WAIT_S`) until they have."""
        held = self._held.pop(session, {})
        for up in held.values():
            up.stop()
        with trio.move_on_after(STOP_WAIT_S, shield=True):
            for up in held.values():
                while up.state is not State.STOPPED:
                    await up.wait_changed()

    def instances(self, session: ClientSession) -> dict[str, Upstream]:
        """The session's instances by server name (a copy)."""
        return dict(self._held.get(session, {}))

    def statistics(self) -> ScopedStatistics:
        in_sessions: dict[str, int] = {}
        for held in self._held.values():
            for name in held:
                in_sessions[name] = in_sessions.get(name, 0) + 1
        return ScopedStatistics(in_sessions=in_sessions, warm={k: len(v) for k, v in self._pools.items()},
                                sessions=len(self._held), started=self.started)


class SessionView:
    """One harness client's view of a supervisor (see `Supervisor.session`).

    Calls go where a client connected through a front would send them (the same plan,
    `mcpvisor.actors.core.plan`: names, lazy loads, compound tools, ``use_tool``, refusals),
    except that session-scoped servers are served by this session's own instances and
    that an `equip` here changes only this view.
    """

    def __init__(self, sup: SessionHost, session: ClientSession) -> None:
        self.sup = sup
        self.client = session
        self._toolset: Toolset | None = None
        self._view: Snapshot | None = None
        self._view_of: Snapshot | None = None
        """The router's snapshot `_view` was built from: a newer one means the catalog changed."""

    @property
    def label(self) -> str:
        return self.client.label

    @property
    def snapshot(self) -> Snapshot:
        """What this session sees now: the proxy's snapshot, or with a toolset equipped
        here, that toolset's view of the same catalog (rebuilt when the catalog changes)."""
        base = self.sup.snapshot
        if self._toolset is None:
            return base
        if self._view is None or self._view_of is not base:
            self._view = self.sup.toolsets.view(self.sup.core, self._toolset)
            self._view_of = base
        return self._view

    def tools(self) -> list[dict[str, Any]]:
        """The tools this session sees now (its toolset's, else the proxy's)."""
        return [dict(t) for t in self.snapshot.tools_list]

    async def equip(self, name: str) -> list[str]:
        """Equip toolset ``name`` for this session only; returns the names it now sees.

        The names are the ones the proxy gives a toolset it equips (``calc.add`` is
        ``calc_add`` under the default namespacing); the management tools are not
        listed here (they act on the proxy's own exposure).

        Raises:
            ToolsetError: no toolset has that name.
        """
        toolsets = self.sup.toolsets.toolsets()
        toolset = toolsets.get(name)
        if toolset is None:
            raise ToolsetError("unknown_toolset", f"no toolset named {name!r}; toolsets: "
                               f"{', '.join(toolsets) or 'none'}", toolsets=list(toolsets))
        self._toolset = toolset
        self._view = None
        return self.snapshot.exposed_names()

    def unequip(self) -> None:
        """Back to the proxy's view."""
        self._toolset = None
        self._view = None

    def upstream(self, server: str) -> Upstream | None:
        """The instance this session's calls to ``server`` go to."""
        return self.sup.upstream_for(server, self.client)

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                        run: str | None = None) -> dict[str, Any]:
        """Call a tool as this session; see `Supervisor.call_tool` (same results and errors).

        ``run`` labels the call in the journal (default: the session's run label).
        """
        return await self.sup.execute_call(self, name, arguments, session=self.client,
                                           run=run or self.client.run)


@asynccontextmanager
async def open_session(sup: SessionHost, label: str | None = None, *,
                       run: str | None = None) -> AsyncIterator[SessionView]:
    """The body of `Supervisor.session`: a view whose instances stop when the block ends
    (also on cancellation or an exception; bounded by `STOP_WAIT_S`)."""
    session = ClientSession(label, run=run if run is not None else label)
    try:
        yield SessionView(sup, session)
    finally:
        with trio.CancelScope(shield=True):
            await session.end()
