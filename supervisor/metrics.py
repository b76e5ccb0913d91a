"""What the proxy counts about itself while it runs: the figures `/metrics` exports and the
dashboard draws.

Owns `Metrics`, the one recorder the call paths and the upstream actors report to (one
small hook each; with metrics off the hook is one attribute check and nothing is
recorded), and `ServedTimer`, the SDK middleware that times the other requests the
front serves. The recorder is plain synchronous code with no clock reads and no
Prometheus import (times are passed in, on the Trio clock). A finished call is queued as
it came (a small raw result is read for ``isError`` later, with the batch); `BATCH`
calls at a time are counted, mostly in C loops, so the fast path keeps its speed.
`mcpvisor.metrics_export` turns these figures into Prometheus families only when
something scrapes them.

Recorded from the proxy's start:

* per (method, tool, server, outcome, error type): the duration histograms of the
  operations the proxy serves (``mcp.server.operation.duration``) and of those it
  sends upstream (``mcp.client.operation.duration``), with the buckets of
  `DURATION_BUCKETS_S`;
* restarts and circuit-breaker opens per server, by a bounded reason (`failure_kind`:
  never the failure's text, which may quote a server's stderr);
* list changes announced to clients, by kind;
* for the dashboard (`mcpvisor.metrics_history.History`): per server, calls, errors and
  a latency histogram per minute over the last hour (ring buffers of `HISTORY_MINUTES`
  buckets), the state changes of the last hour, and per tool the calls, errors and
  latencies since start.
"""

from __future__ import annotations

import re
from operator import sub
from typing import Any, Final

import msgspec
import trio

from mcpvisor.actors.fronts.stdio_own import REPLAY_ID
from mcpvisor.metrics_history import (
    DURATION_BUCKETS_S,
    HISTORY_MINUTES,
    MAX_TOOLS_KEPT,
    MINUTE_S,
    OTHER_TOOL,
    Histogram,
    History,
    place,
)
from mcpvisor.outcomes import outcome_of

__all__ = [
    "BATCH",
    "DURATION_BUCKETS_S",
    "HISTORY_MINUTES",
    "MAX_SERIES",
    "MAX_TOOLS_KEPT",
    "OTHER_TOOL",
    "Histogram",
    "History",
    "Metrics",
    "OpKey",
    "ServedTimer",
    "failure_kind",
    "outcome",
]

BATCH: Final = 512
"""Calls queued by `Metrics.served` before they are counted, and successful calls of one
tool kept as bare durations before they are added up. Adding up call by call, between
the proxy's own work, cost ~9 us a call (measured in-process, `mcpvisor.bench.metrics_cost`,
c=32, on a ~45 us call); a batch is read in C loops (one search of its joined results,
its durations sorted once into the buckets: `mcpvisor.metrics_history.place`)."""

DEFER_BYTES: Final = 1024
"""A raw result up to this size is kept with its call until the batch reads whether it
says ``isError`` (a larger one is read at once: a batch must not hold megabytes)."""

MAX_SERIES: Final = 10_000
"""Label sets kept per histogram family; further ones are counted under tool `OTHER_TOOL`
(a Prometheus series each: a bound on what one scrape carries)."""

RESTART_EVENTS: Final = frozenset({"back_off", "open_circuit"})
"""The lifecycle events that record a failure and restart the server (`Upstream.restarts`)."""

FAILURE_KINDS: Final = (
    ("did not start within", "start_timeout"),
    ("hung:", "hang"),
    ("garbage on stdout", "garbage"),
    ("exited with status", "exit"),
    ("killed by", "killed"),
    ("cannot write", "closed"),
    ("closed", "closed"),
)
"""How a failure text (`mcpvisor.actors.upstream.failures`) maps to a reason label: the
first phrase found names it; anything else is ``other``."""


def failure_kind(text: str | None) -> str:
    """The bounded reason label of a failure text (never the text itself: it may quote
    a server's stderr, and a label with free text would make a series per failure)."""
    if not text:
        return "other"
    for phrase, kind in FAILURE_KINDS:
        if phrase in text:
            return kind
    return "other"


def outcome(error: BaseException | None, result: Any) -> str:
    """The journal's outcome of a call (``ok``, ``tool_error``, ``timeout``, ``server_down``,
    ``cancelled``, ``error``); ``result`` is a dict (SDK path) or the raw JSON (fast path)."""
    if error is None:
        if isinstance(result, msgspec.Raw | bytes):
            return "tool_error" if _is_error(bytes(result)) else "ok"
        if isinstance(result, dict):
            return "tool_error" if result.get("isError") is True else "ok"
        return "ok"
    return outcome_of(error, None)


def _is_error(data: bytes) -> bool:
    """Whether a raw result says ``"isError": true`` (many servers send ``false``)."""
    return _TOOL_ERROR.search(data) is not None


_RAW: Final = msgspec.Raw
_TOOL_ERROR: Final = re.compile(rb'"isError"\s*:\s*true')
"""A raw result's ``"isError": true`` (JSON allows space around the colon)."""
_OK: Final = b""
_FAILED: Final = b'"isError":true'
"""What a call whose result was read at once is queued with (see `Metrics.served`)."""




OpKey = tuple[str, str, str, str, str]
"""(method, tool, server, outcome, error type): one series of an operation histogram; the
error type is the conventions' ``error.type``: the exception's class, ``tool_error`` for
an ``isError`` result, empty for success."""

SERVED: Final = 0
SENT: Final = 1
SERVED_AND_SENT: Final = 2
"""Which histograms a noted call goes to: the proxy's side, the upstream leg, or both."""




class _Slot:
    """The successful calls of one (server, tool) in one minute not added up yet: the hot
    path only appends a duration here."""

    __slots__ = ("both", "durations", "minute", "server", "since", "tool", "until")

    def __init__(self, server: str, tool: str, both: bool) -> None:
        self.server = server
        self.tool = tool
        self.both = both
        """Counted as a client operation too (the fast path's: its upstream leg is the call)."""
        self.minute = -1
        """The minute (``now // 60``) the pending durations finished in; ``since`` and
        ``until`` are its bounds, so a call compares its time rather than dividing it."""
        self.since = 0.0
        self.until = 0.0
        self.durations: list[float] = []


class Metrics:
    """The recorder the call paths and upstream actors report to (see the module docstring).

    Hooks (each never waits, never raises for what it is given):

    * `served`: a ``tools/call`` the proxy answered (`Supervisor.note_call`);
    * `request_done`: a request the proxy sent upstream was answered or failed
      (`mcpvisor.actors.upstream.Upstream.request`);
    * `state_changed`: an upstream's lifecycle moved (`Upstream._feed`);
    * `list_changed`: clients were told a list changed (`Supervisor._announce`).

    A call that did not raise, nearly every call, is only queued (`served`); the queue
    is counted `BATCH` calls at a time and before any read (a scrape, the dashboard).
    A successful call's duration goes to its tool's slot, added up `BATCH` durations at
    a time, when its minute ends, and before any read. Errors are rare and added up at once.
    """

    def __init__(self) -> None:
        self._server_ops: dict[OpKey, Histogram] = {}
        self._client_ops: dict[OpKey, Histogram] = {}
        self._history = History()
        self._slots: dict[tuple[str, str, bool], _Slot] = {}
        self._pending: list[tuple[str, str, bool, float, float, Any]] = []
        self.restarts: dict[tuple[str, str], int] = {}
        self.breaker_opens: dict[tuple[str, str], int] = {}
        self.list_changes: dict[str, int] = {}

    @property
    def server_ops(self) -> dict[OpKey, Histogram]:
        """``mcp.server.operation.duration`` per series, every noted call added up."""
        self.flush()
        return self._server_ops

    @property
    def client_ops(self) -> dict[OpKey, Histogram]:
        """``mcp.client.operation.duration`` per series, every noted call added up."""
        self.flush()
        return self._client_ops

    @property
    def history(self) -> History:
        """What the dashboard draws, every noted call added up."""
        self.flush()
        return self._history

    def served(self, server: str, tool: str, started: float, now: float, error: BaseException | None,
               result: Any = None, upstream_too: bool = False) -> None:
        """A ``tools/call`` the proxy served finished at ``now`` (started at ``started``);
        ``upstream_too``: its request upstream began and ended with it (the fast path's),
        so it is counted as a client operation as well."""
        if error is None:
            if type(result) is not _RAW or len(result) > DEFER_BYTES:
                result = _OK if outcome(None, result) == "ok" else _FAILED
            pending = self._pending
            pending.append((server, tool, upstream_too, started, now, result))
            if len(pending) >= BATCH:
                self._drain()
            return
        self._one(SERVED_AND_SENT if upstream_too else SERVED, "tools/call", tool, server, now, now - started,
                  outcome(error, result), error)

    def _drain(self) -> None:
        """Count the calls `served` queued. The common batch, every call of one tool and
        none failed, within one minute, is read in whole (C loops: one search of the
        joined results, durations by `map`); any other goes call by call."""
        pending, self._pending = self._pending, []
        servers, tools, boths, starts, nows, results = zip(*pending, strict=True)
        failed = _TOOL_ERROR.search(b"".join(results)) is not None
        if not failed and len(keys := set(zip(servers, tools, boths, strict=True))) == 1:
            ((server, tool, both),) = keys
            first, last = min(nows), max(nows)
            slot = self._slots.get((server, tool, both))
            if slot is None or not slot.since <= first < slot.until:
                slot = self._slot_for(server, tool, both, first)
            if last < slot.until:
                slot.durations.extend(map(sub, nows, starts))
                if len(slot.durations) >= BATCH:
                    self._add_up(slot)
                return
        for server, tool, both, started, now, result in pending:
            if failed and _TOOL_ERROR.search(result) is not None:
                self._one(SERVED_AND_SENT if both else SERVED, "tools/call", tool, server, now, now - started,
                          "tool_error", None)
                continue
            slot = self._slots.get((server, tool, both))
            if slot is None or not slot.since <= now < slot.until:
                slot = self._slot_for(server, tool, both, now)
            durations = slot.durations
            durations.append(now - started)
            if len(durations) >= BATCH:
                self._add_up(slot)

    def _slot_for(self, server: str, tool: str, both: bool, now: float) -> _Slot:
        """The slot of (``server``, ``tool``) for the minute of ``now``, the durations it
        held for an earlier minute added up first."""
        slot = self._slots.get((server, tool, both))
        if slot is None:
            slot = self._slots[server, tool, both] = _Slot(server, tool, both)
        elif slot.durations:
            self._add_up(slot)
        minute = int(now // MINUTE_S)
        slot.minute = minute
        slot.since = minute * MINUTE_S
        slot.until = (minute + 1) * MINUTE_S
        return slot

    def request_served(self, method: str, started: float, now: float, error: BaseException | None) -> None:
        """A request other than ``tools/call`` the proxy served (`ServedTimer`): no tool,
        no server label (the proxy answered it)."""
        self._one(SERVED, method, "", "", now, now - started, outcome(error, None), error)

    def request_done(self, server: str, method: str, tool: str, started: float, now: float,
                     error: BaseException | None, result: Any = None) -> None:
        """A request sent to ``server`` ended at ``now`` (its answer, or ``error``)."""
        self._one(SENT, method, tool, server, now, now - started, outcome(error, result), error)

    def flush(self) -> None:
        """Add up the durations every slot holds."""
        if self._pending:
            self._drain()
        for slot in self._slots.values():
            if slot.durations:
                self._add_up(slot)

    def _add_up(self, slot: _Slot) -> None:
        placed = place(slot.durations)
        key = ("tools/call", slot.tool, slot.server, "ok", "")
        _series(self._server_ops, key).add_placed(placed)
        if slot.both:
            _series(self._client_ops, key).add_placed(placed)
        self._history.calls(slot.server, slot.tool, slot.minute, placed, False)
        slot.durations = []

    def _one(self, side: int, method: str, tool: str, server: str, now: float, duration: float, kind: str,
             error: BaseException | None) -> None:
        if error is not None:
            error_type = type(error).__name__
        else:
            error_type = "tool_error" if kind == "tool_error" else ""
        key = (method, tool, server, kind, error_type)
        if side != SENT:
            _series(self._server_ops, key).observe(duration)
            if method == "tools/call":  # the dashboard's figures are of tool calls
                self._history.calls(server, tool, int(now // MINUTE_S), place((duration,)), kind != "ok")
        if side != SERVED:
            _series(self._client_ops, key).observe(duration)

    def state_changed(self, server: str, now: float, state: str, event: str, failure: str | None) -> None:
        """``server`` entered ``state`` on lifecycle ``event``; ``failure`` is its last failure text."""
        if event in RESTART_EVENTS:
            key = (server, failure_kind(failure))
            self.restarts[key] = self.restarts.get(key, 0) + 1
            if event == "open_circuit":
                self.breaker_opens[key] = self.breaker_opens.get(key, 0) + 1
        elif event == "restart":
            key = (server, "requested")
            self.restarts[key] = self.restarts.get(key, 0) + 1
        reason = failure_kind(failure) if event in RESTART_EVENTS else event
        self._history.state(server, now, state, reason)

    def list_changed(self, kinds: tuple[str, ...]) -> None:
        for kind in kinds:
            self.list_changes[kind] = self.list_changes.get(kind, 0) + 1


def _series(family: dict[OpKey, Histogram], key: OpKey) -> Histogram:
    hist = family.get(key)
    if hist is None:
        if len(family) >= MAX_SERIES:
            key = (key[0], OTHER_TOOL, key[2], key[3], key[4])
        hist = family.setdefault(key, Histogram())
    return hist


class ServedTimer:
    """A `Server.middleware` entry of the front's SDK server: times every request it serves
    but ``tools/call`` (`Supervisor.note_call` counts those, with their tool and server,
    the fast path's included), into `Metrics.request_served`. Notifications have no
    answer and are not timed. Reads the Trio clock (the recorder itself reads none)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        method = ctx.method
        if ctx.request_id is None or method == "tools/call" or ctx.request_id == REPLAY_ID:
            return await call_next(ctx)  # REPLAY_ID: a handshake the stdio front answered (and timed)
        started = trio.current_time()
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            self.metrics.request_served(method, started, trio.current_time(), exc)
            raise
        self.metrics.request_served(method, started, trio.current_time(), None)
        return result
