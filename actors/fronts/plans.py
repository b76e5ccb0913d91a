"""A tool call's plan once nothing is left to wait for: what every caller's call path shares.

Owns:

* `settle`: the plan of a call (`mcpvisor.actors.core.plan`) once nothing is left to wait
  for: start-up waited for (once), a lazy server loaded on first use (once, its failure
  becoming the answer); what the embedding API, harness sessions and the SDK's front
  (`mcpvisor.actors.fronts.tools`) share;
* `View`: where a caller reads what it sees (the router, a harness session, a fixed view);
* `loader_of`: the lazy-server loader a backend has, if any.

It loads no SDK: the supervisor's own calls (`Supervisor.execute_call`) use it on a proxy
whose front never needed the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.core.catalog import ToolRoute
from mcpvisor.actors.core.discovery import USE_TOOL
from mcpvisor.actors.core.plan import (
    CallLocal,
    CallRoute,
    NeedsLoad,
    Plan,
    Refused,
    WaitForStartup,
    plan_call,
)
from mcpvisor.actors.lazy import LazyLoader, LoadFailed
from mcpvisor.actors.starting import await_listed

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.backend import Backend

Settled = ToolRoute | CallRoute | CallLocal | Refused
"""A plan `settle` leaves to execute: nothing in it waits."""


class View(Protocol):
    """Where a caller reads what it sees: the router, or a harness session."""

    @property
    def snapshot(self) -> Snapshot: ...


def loader_of(backend: Backend) -> LazyLoader | None:
    """The backend's lazy-server loader (a backend without lazy servers has none)."""
    return getattr(backend, "loader", None)


async def settle(backend: Backend, view: View, name: str, arguments: Any) -> Settled:
    """The plan of a call of ``name`` read from ``view`` once nothing is left to wait for.

    Waits for start-up at most once (a client that calls before listing waits as a
    ``tools/list`` would, instead of being told the tool does not exist) and loads at
    most one lazy server (first use; a failed load is the answer, a name still unknown
    after the load is refused). Cancellation: a wait or load in progress is abandoned
    (the load itself goes on for its other waiters, `LazyLoader.load`).
    """
    snapshot = view.snapshot
    if name not in snapshot.tools and name not in snapshot.local_tools and name != USE_TOOL:
        # Its server may be starting (wait for it, its restartWait) or down: then
        # `await_listed` raises the error naming the server, its state and the next try.
        await await_listed(backend, lambda s: name in s.tools, name=name)
    may_load = True
    while True:
        plan: Plan = plan_call(view.snapshot, name, arguments, started=backend.started, may_load=may_load,
                               servers=backend.upstreams)
        if isinstance(plan, WaitForStartup):
            await backend.wait_startup()
        elif isinstance(plan, NeedsLoad):
            failure = await load_server(backend, plan)
            if failure is not None:
                return Refused(failure)
            may_load = False
        else:
            return plan


async def load_server(backend: Backend, plan: NeedsLoad) -> dict[str, Any] | None:
    """Load the lazy server ``plan`` names; None when it loaded, else the ``isError`` result saying why."""
    loader = loader_of(backend)
    if loader is None:
        return None
    try:
        loaded = await loader.load(plan.server)
    except LoadFailed as exc:
        if telemetry.tracer is not None:
            telemetry.lifecycle("mcpvisor.lazy_load", plan.server, outcome="failed")
        text = f"{plan.tool_name} belongs to the lazy server {plan.server}, which could not be loaded: {exc}"
        return wire.tool_error_result(text, {"error": "load_failed", "server": plan.server,
                                             "message": str(exc), "givenUp": exc.given_up})
    if telemetry.tracer is not None:  # the first use's load, an event of the call that waited for it
        telemetry.lifecycle("mcpvisor.lazy_load", plan.server, outcome="loaded", tools=loaded.tool_count)
    return None
