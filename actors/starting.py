"""Requests that arrive before the name they ask for is listed: wait for it, or say why not.

Owns `await_listed`, what the SDK front and the embedding API do with a tool, prompt,
resource or completion request whose name (or URI) the router's snapshot does not
route:

* the name is in a configured server's namespace (`mcpvisor.actors.core.pending.owner_of`) and
  that server is starting: wait for it like a call to a restarting server does (its
  ``restartWait``), then look again;
* that server is down, disabled (also in the config, where it has no actor),
  circuit-open, misconfigured or needs a login: raise
  `UpstreamUnavailable`, whose message names the server, its state, why, and the next
  try (not "unknown tool");
* no server's namespace fits (a URI, a bare name under ``namespacing: none``): wait
  while start-up lasts, until the name is routed or start-up is over.

Lists never wait (they answer at once with what is known); only requests that name
something do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from mcpvisor.actors.core.pending import owner_of, plan_unrouted
from mcpvisor.actors.errors import UpstreamUnavailable

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.upstream import Upstream


class _Snapshots(Protocol):
    @property
    def snapshot(self) -> Snapshot: ...


class Starting(Protocol):
    """What `await_listed` needs from the supervisor (a `mcpvisor.actors.fronts.sdk.Backend` has it)."""

    @property
    def router(self) -> _Snapshots: ...

    @property
    def upstreams(self) -> Mapping[str, Upstream]: ...

    async def wait_startup(self) -> None: ...

    @property
    def started(self) -> bool: ...


def owner(backend: Starting, name: str, snapshot: Snapshot) -> str | None:
    """The configured server ``name`` (a tool or prompt name) belongs to, if any."""
    return owner_of(name, backend.upstreams, snapshot.namespacing)


async def await_listed(backend: Starting, routed: Callable[[Snapshot], bool], *,
                       name: str | None = None) -> Snapshot:
    """Wait until ``routed(snapshot)`` holds, its server cannot serve, or there is no
    reason to wait any more; returns the snapshot to answer from.

    Args:
        backend: the supervisor.
        routed: true once the snapshot routes what the request names.
        name: the tool or prompt name asked for (None for a URI): its server's state
            decides (`mcpvisor.actors.core.pending.plan_unrouted`).

    Raises:
        actors.errors.UpstreamUnavailable: the name's server is down, disabled, circuit
            open, misconfigured, or did not come up within its ``restartWait``.
    """
    snapshot = backend.router.snapshot
    if routed(snapshot):
        return snapshot
    if name is not None:
        disabled = _disabled(backend)
        off = owner_of(name, [*backend.upstreams, *disabled], snapshot.namespacing)
        if off is not None and off in disabled:
            raise UpstreamUnavailable(off, "disabled",
                                      f"enabled: false in the config; mcpvisor mcp enable {off}")
    server = owner(backend, name, snapshot) if name is not None else None
    up = backend.upstreams.get(server) if server is not None else None
    if up is not None:
        plan = plan_unrouted(up.state.value)
        if plan == "wait":
            await up.wait_link()  # ready, or UpstreamUnavailable naming why not
        elif plan == "down":
            # Down fails at once, except a server whose login runs in the browser right now
            # (`wait_link` waits for that one, bounded, and fails at once for the rest).
            await up.wait_link()
        return backend.router.snapshot  # ready (it has no such name) or lazy (its loader decides)
    while not backend.started:
        await _changed_or_started(backend)
        snapshot = backend.router.snapshot
        if routed(snapshot):
            return snapshot
    return backend.router.snapshot


def _disabled(backend: Starting) -> tuple[str, ...]:
    """Configured servers that are disabled (they have no actor), if the backend knows them."""
    disabled = getattr(backend, "disabled_servers", None)
    return tuple(disabled()) if disabled is not None else ()


async def _changed_or_started(backend: Starting) -> None:
    """Return at the next change of the router's snapshot, or when start-up ends."""
    wait_changed = getattr(backend.router, "wait_changed", None)
    if wait_changed is None:  # a router without change events: start-up is all there is
        await backend.wait_startup()
        return
    async with trio.open_nursery() as nursery:
        async def first(fn: Callable[[], Any]) -> None:
            await fn()
            nursery.cancel_scope.cancel()

        nursery.start_soon(first, backend.wait_startup)
        nursery.start_soon(first, wait_changed)
