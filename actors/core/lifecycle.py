"""The upstream lifecycle: states, events, and the one table of transitions.

Sans-IO, like the restart policy beside it (`mcpvisor.actors.core.policy`): no trio, no
clock, no I/O. Everything that decides which state an upstream server moves to lives
here, in `TRANSITIONS`; the actor (`mcpvisor.actors.upstream.actor.Upstream`) only sleeps,
opens links, asks the policy, and feeds the events it sees to `transition`, which
refuses any pair the table does not name (`IllegalTransition`: a bug in the actor, never
a server's fault).

The states are what users see (``mcpvisor status``, the dashboard, ``get-server-status``,
``StateChanged`` events)::

    idle (lazy) -load-> starting -ready-> ready -back_off-> backing_off -retry-> starting ...
                                               \\-open_circuit-> circuit_open -trial-> half_open
    half_open -ready-> ready | -open_circuit-> circuit_open
    disable -> disabled -enable-> starting;  stop / shutdown -> stopped (final)
    misconfigured: the entry cannot start as it is; held until a restart or a reload
    starting | ready -need_login-> needs_login -login-> starting (a person logged in, or the
    proxy opens the browser itself); needs_login -ready-> ready (the login was done in the start)

What each transition does beyond the state change is named here too: which events take
the server's tools away from clients (`WITHDRAWS`), which states are logged as warnings
(`WARNS`), which states a call waits through (`WAITABLE`), and the name status views show
for a state (`shown`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
    "TRANSITIONS",
    "WAITABLE",
    "WARNS",
    "WITHDRAWS",
    "Event",
    "IllegalTransition",
    "State",
    "shown",
    "transition",
]


# Not StrEnum: that would change str(state) and f"{state}" from "State.READY" to "ready".
class State(str, enum.Enum):  # noqa: UP042
    """Where one upstream server is in its life (the value is the name users see)."""

    IDLE = "idle"
    """A lazy server not loaded yet (status views say "not loaded")."""
    STARTING = "starting"
    READY = "ready"
    BACKING_OFF = "backing_off"
    CIRCUIT_OPEN = "circuit_open"
    HALF_OPEN = "half_open"
    DISABLED = "disabled"
    STOPPED = "stopped"
    MISCONFIGURED = "misconfigured"
    """The entry cannot be used as it is (unset ``${VAR}``, invalid field, missing command,
    mcpvisor itself): never started, no restarts, until the config changes or a restart
    is asked for (`mcpvisor.actors.upstream.preflight`)."""
    NEEDS_LOGIN = "needs_login"
    """The server wants an OAuth authorization only a person can give: not a crash (no
    backoff, no breaker); held until a login stores tokens (or the proxy's own browser
    login, running while the state shows this, completes)."""


class Event(str, enum.Enum):  # noqa: UP042 - the same str() as State
    """What happened to (or was decided for) one upstream server."""

    START = "start"
    """The actor's first start (or a reload's replacement of a changed server)."""
    LOAD = "load"
    """A lazy server was loaded (first call, ``load_mcp``, equip, resource read)."""
    ENABLE = "enable"
    """A disabled server was enabled: it starts with a fresh policy."""
    RETRY = "retry"
    """The backoff delay after a failure ended: start again."""
    RESTART = "restart"
    """An operator or a reload asked for a restart: not a failure, skips backoff and an
    open circuit."""
    TRIAL = "trial"
    """The circuit's open period ended (or a trial was granted again): one trial start."""
    READY = "ready"
    """Spawned or connected, handshake done, everything listed."""
    BACK_OFF = "back_off"
    """A start failed (exit, handshake error, ``startupTimeout``) or a live server failed
    (crash, closed transport, missed pings, garbage on stdout), and the policy backs off."""
    OPEN_CIRCUIT = "open_circuit"
    """As `BACK_OFF`, but too many failures in a row (or a failed trial): the policy opens
    the circuit."""
    HOLD_OPEN = "hold_open"
    """Asked to start while the circuit is still open: keep waiting for the trial."""
    UNLOAD = "unload"
    """A lazy server is not loaded: at first, or after its load failed."""
    DISABLE = "disable"
    MISCONFIGURE = "misconfigure"
    """The entry was found unusable before a start (or the child said it is mcpvisor)."""
    NEED_LOGIN = "need_login"
    """The server answered 401 and no stored token or refresh can satisfy it, or its
    refresh token was refused (``invalid_grant``), or the proxy waits for a browser login."""
    LOGIN = "login"
    """Tokens were stored by a login (or the proxy starts its own): start again."""
    STOP = "stop"
    """Stopped on request (removed by a reload, the proxy's stop): the actor ends."""
    SHUTDOWN = "shutdown"
    """The proxy is shutting down under the actor: it ends without a stop request."""


_ALL: Final = frozenset(State)
_LIVE: Final = _ALL - {State.STOPPED}
"""Every state but the final one."""
_RUNNING_LIFE: Final = frozenset({State.STARTING, State.HALF_OPEN, State.READY, State.NEEDS_LOGIN})
"""The states a life is in while it runs: a start or a trial (or a start waiting for a
browser login), then ready."""


def _table(rows: Iterable[tuple[Iterable[State], Event, State]]) -> Mapping[tuple[State, Event], State]:
    table: dict[tuple[State, Event], State] = {}
    for sources, event, target in rows:
        for source in sources:
            assert (source, event) not in table, f"two rows for {source.value} on {event.value}"
            table[source, event] = target
    return MappingProxyType(table)


TRANSITIONS: Final = _table([
    # The first start: a server created running is already "starting" (the event gives the
    # reason); a lazy one loaded before its actor ran starts from "idle".
    ({State.STARTING, State.IDLE}, Event.START, State.STARTING),
    ({State.IDLE}, Event.LOAD, State.STARTING),
    ({State.DISABLED}, Event.ENABLE, State.STARTING),
    ({State.BACKING_OFF}, Event.RETRY, State.STARTING),
    # A restart can be asked for in any state but the final one (an enable followed at once by
    # a restart reaches the actor while it still shows "disabled").
    (_LIVE, Event.RESTART, State.STARTING),
    # An open period ends; a lazy server unloaded while open is loaded again; an interrupted
    # trial is granted again rather than left half open.
    ({State.CIRCUIT_OPEN, State.IDLE, State.HALF_OPEN}, Event.TRIAL, State.HALF_OPEN),
    ({State.STARTING, State.HALF_OPEN, State.NEEDS_LOGIN}, Event.READY, State.READY),
    # A login is not a failure: no backoff, no circuit; the tools stay listed (a call says
    # how to log in).
    (_RUNNING_LIFE, Event.NEED_LOGIN, State.NEEDS_LOGIN),
    ({State.NEEDS_LOGIN}, Event.LOGIN, State.STARTING),
    (_RUNNING_LIFE, Event.BACK_OFF, State.BACKING_OFF),
    (_RUNNING_LIFE, Event.OPEN_CIRCUIT, State.CIRCUIT_OPEN),
    ({State.CIRCUIT_OPEN, State.IDLE}, Event.HOLD_OPEN, State.CIRCUIT_OPEN),
    # Not loaded: at first (idle -> idle gives the reason), after a failed load, or when an
    # enabled or no longer misconfigured lazy server was never loaded.
    (_LIVE - {State.READY}, Event.UNLOAD, State.IDLE),
    (_LIVE, Event.DISABLE, State.DISABLED),
    (_LIVE, Event.MISCONFIGURE, State.MISCONFIGURED),
    (_LIVE, Event.STOP, State.STOPPED),
    (_LIVE, Event.SHUTDOWN, State.STOPPED),
])
"""{(state, event): next state}: every transition an upstream makes, and no other."""

WITHDRAWS: Final = frozenset({Event.OPEN_CIRCUIT, Event.DISABLE, Event.MISCONFIGURE, Event.STOP})
"""Events whose transition first takes the server's tools away from clients (one
``list_changed``); a brief restart (`Event.BACK_OFF`) keeps them, `Event.READY` brings
them back. A shutdown withdraws nothing: no client is left to tell."""

WARNS: Final = frozenset({State.BACKING_OFF, State.CIRCUIT_OPEN, State.MISCONFIGURED, State.NEEDS_LOGIN})
"""States whose entry is logged as a warning (the others at info)."""

WAITABLE: Final = frozenset({State.STARTING, State.BACKING_OFF, State.HALF_OPEN, State.IDLE, State.READY})
"""States a call waits through (bounded by ``restartWait``) instead of failing at once.
READY is here for the instant between a link dying and the actor recording it."""

_SHOWN: Final = MappingProxyType({State.IDLE: "not loaded"})


class IllegalTransition(RuntimeError):
    """The actor fed an event the table has no row for in the current state (a bug)."""

    def __init__(self, server: str, state: State, event: Event) -> None:
        self.server = server
        self.state = state
        self.event = event
        allowed = sorted(e.value for (s, e) in TRANSITIONS if s is state)
        super().__init__(f"{server}: no lifecycle transition from {state.value!r} on {event.value!r} "
                         f"(from {state.value!r} the table allows: {', '.join(allowed) or 'nothing'})")


def transition(server: str, state: State, event: Event) -> State:
    """The state ``event`` moves a server in ``state`` to.

    Raises:
        IllegalTransition: the table has no such transition; ``server`` names the server
            in the message.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(server, state, event) from None


def shown(state: State) -> str:
    """The name status views show for ``state`` ("not loaded" for an idle lazy server)."""
    return _SHOWN.get(state, state.value)
