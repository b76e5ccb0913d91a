"""What the tree does when a call finishes or a list changes: count it, tell, journal it.

`CallNotes` is a part of `mcpvisor.proxy.Supervisor` (a base class): `note_call`, which
every call path runs once per finished call (the metrics, the ``events()`` subscribers,
the journal's queue), and `_announce`, where the list changes of the router (gathered
during start-up) reach the front's clients, the event bus and the metrics. Neither waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from mcpvisor.actors import telemetry
from mcpvisor.actors.messages import CallFinished, EventBus, ListChanged

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.core.registry import Changes
    from mcpvisor.actors.fronts.front import Front
    from mcpvisor.actors.router import Router
    from mcpvisor.actors.upstream import Upstream
    from mcpvisor.journal import Journal
    from mcpvisor.metrics import Metrics


class CallNotes:
    """Where finished calls and list changes go (mixed into `Supervisor`)."""

    event_bus: EventBus
    front: Front
    router: Router
    upstreams: dict[str, Upstream]
    _journal: Journal | None = None
    _metrics: Metrics | None = None
    hears_calls: bool = False
    """Whether `note_call` has anyone to tell: metrics, the journal or an ``events()``
    subscriber. Kept current as they come and go (`heard_changed`): the fast path reads it
    on every call before it builds a note."""

    @property
    def journal(self) -> Journal | None:
        """Where finished calls are recorded (``journal=``, ``settings.journal``), if anywhere."""
        return self._journal

    @journal.setter
    def journal(self, journal: Journal | None) -> None:
        self._journal = journal
        self.heard_changed()

    @property
    def metrics(self) -> Metrics | None:
        """What ``/metrics`` and the dashboard's history read (``open_supervisor(metrics=True)``;
        `mcpvisor.metrics`); None: nothing is counted."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self.heard_changed()

    def heard_changed(self) -> None:
        """Metrics, the journal or the event bus's subscribers changed: `hears_calls` again."""
        self.hears_calls = (self._metrics is not None or self._journal is not None
                            or self.event_bus.has_subscribers)

    def note_call(self, server: str, tool: str, started: float, error: BaseException | None, *,
                  session: str | None = None, run: Any = None, arguments: Any = None, result: Any = None,
                  retries: int = 0, upstream: Upstream | None = None, trace_id: str | None = None,
                  direct: bool = False) -> None:
        """A call finished: count it (``direct``: the fast path's, whose upstream leg is the
        same request: counted on both sides), tell ``events()`` subscribers and queue a
        journal record.

        Never waits: the journal takes the raw arguments and result and works out sizes,
        digests and the outcome on its own writer task (`mcpvisor.journal`). ``trace_id``:
        the call's trace when the caller holds its spans (the fast path); otherwise the
        trace of the span current in this task, if any.
        """
        if not self.hears_calls:
            return  # nobody listens (no metrics, journal or dashboard)
        metrics = self._metrics
        journal = self._journal
        now = trio.current_time()  # one reading for all of them
        if metrics is not None:
            metrics.served(server, tool, started, now, error, result, direct)
        if journal is None and not self.event_bus.has_subscribers:
            return
        if self.event_bus.has_subscribers:
            self.event_bus.publish(CallFinished(server, tool, now - started, error is None,
                                             str(error) if error is not None else None))
        if journal is not None:
            if trace_id is None:
                trace_id = telemetry.current_trace_id()
            up = upstream if upstream is not None else self.upstreams.get(server)
            journal.record_nowait(journal.Record(now, server, tool, now - started, error, session, run,
                                                 arguments, result, retries,
                                                 up.restarts if up is not None else None,
                                                 self.router.snapshot.version, trace_id))

    def _announce(self, snapshot: Snapshot, changes: Changes) -> None:
        self.front.announce(snapshot, changes)
        if changes.kinds():  # not for a change only fixed views may see (`Changes.catalog`)
            self.event_bus.publish(ListChanged(changes.kinds(), snapshot.version))
            if self.metrics is not None:
                self.metrics.list_changed(changes.kinds())

