"""The upstream lifecycle table (`mcpvisor.actors.core.lifecycle`): one place that names
every transition, which the actor feeds and which refuses what it does not name."""

from __future__ import annotations

from collections import deque

import pytest
import trio
import trio.testing

from mcpvisor.actors.core.lifecycle import (
    TRANSITIONS,
    WAITABLE,
    WITHDRAWS,
    Event,
    IllegalTransition,
    State,
    shown,
    transition,
)
from mcpvisor.actors.messages import StateChanged
from mcpvisor.actors.upstream import State as UpstreamState
from tests.fakes.harness import open_harness
from tests.fakes.links import NeverStartsUpstream


def _reachable(start: State) -> set[State]:
    seen = {start}
    todo = deque([start])
    while todo:
        state = todo.popleft()
        for (source, _event), target in TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("start", [State.STARTING, State.IDLE])
def test_every_state_is_reachable_from_where_an_actor_begins(start: State) -> None:
    """A server created running begins ``starting``, a lazy one ``idle``; from either,
    every state users can see is reachable through named transitions."""
    assert _reachable(start) == set(State)


def test_every_event_names_at_least_one_transition() -> None:
    assert {event for (_state, event) in TRANSITIONS} == set(Event)


def test_stopped_is_final_and_every_other_state_can_stop() -> None:
    """Nothing leaves ``stopped``; a stop and a shutdown reach it from every other state."""
    assert not [key for key in TRANSITIONS if key[0] is State.STOPPED]
    for state in set(State) - {State.STOPPED}:
        assert transition("s", state, Event.STOP) is State.STOPPED
        assert transition("s", state, Event.SHUTDOWN) is State.STOPPED


@pytest.mark.parametrize(("state", "event", "target"), [
    (State.IDLE, Event.LOAD, State.STARTING),
    (State.STARTING, Event.READY, State.READY),
    (State.STARTING, Event.BACK_OFF, State.BACKING_OFF),
    (State.READY, Event.BACK_OFF, State.BACKING_OFF),
    (State.READY, Event.OPEN_CIRCUIT, State.CIRCUIT_OPEN),
    (State.BACKING_OFF, Event.RETRY, State.STARTING),
    (State.CIRCUIT_OPEN, Event.TRIAL, State.HALF_OPEN),
    (State.HALF_OPEN, Event.READY, State.READY),
    (State.HALF_OPEN, Event.OPEN_CIRCUIT, State.CIRCUIT_OPEN),
    (State.READY, Event.DISABLE, State.DISABLED),
    (State.DISABLED, Event.ENABLE, State.STARTING),
    (State.READY, Event.RESTART, State.STARTING),
    (State.CIRCUIT_OPEN, Event.RESTART, State.STARTING),
    (State.STARTING, Event.UNLOAD, State.IDLE),
    (State.STARTING, Event.MISCONFIGURE, State.MISCONFIGURED),
    (State.MISCONFIGURED, Event.RESTART, State.STARTING),
])
def test_the_documented_transitions(state: State, event: Event, target: State) -> None:
    """The lifecycle users read about (idle -> starting -> ready -> backing_off ...,
    the circuit's open and half-open, disable/enable, restart, misconfigured)."""
    assert transition("s", state, event) is target


@pytest.mark.parametrize(("state", "event"), [
    (State.STOPPED, Event.RESTART),
    (State.STOPPED, Event.ENABLE),
    (State.READY, Event.READY),
    (State.READY, Event.LOAD),
    (State.READY, Event.UNLOAD),
    (State.IDLE, Event.READY),
    (State.BACKING_OFF, Event.READY),
    (State.CIRCUIT_OPEN, Event.READY),
    (State.CIRCUIT_OPEN, Event.RETRY),
    (State.DISABLED, Event.READY),
    (State.BACKING_OFF, Event.OPEN_CIRCUIT),
    (State.STARTING, Event.ENABLE),
])
def test_a_transition_the_table_does_not_name_is_refused(state: State, event: Event) -> None:
    """An event in a state with no row is a bug in the actor: refused with an error that
    names the server, the state, the event and what the state does allow."""
    with pytest.raises(IllegalTransition) as caught:
        transition("git", state, event)
    message = str(caught.value)
    assert message.startswith(f"git: no lifecycle transition from {state.value!r} on {event.value!r}")
    allowed = sorted(e.value for (s, e) in TRANSITIONS if s is state)
    assert message.endswith(f"allows: {', '.join(allowed) or 'nothing'})")
    assert (caught.value.state, caught.value.event) == (state, event)


def test_only_the_events_that_hide_a_server_withdraw_its_tools() -> None:
    """A brief restart keeps the tools; an open circuit, disable, stop and misconfigured
    take them away (one list_changed)."""
    assert {TRANSITIONS[s, e] for (s, e) in TRANSITIONS if e in WITHDRAWS} == {
        State.CIRCUIT_OPEN, State.DISABLED, State.STOPPED, State.MISCONFIGURED}
    assert Event.BACK_OFF not in WITHDRAWS


def test_the_names_users_see_are_kept() -> None:
    """Status views, the dashboard and get-server-status show these names."""
    assert [s.value for s in State] == ["idle", "starting", "ready", "backing_off", "circuit_open",
                                        "half_open", "disabled", "stopped", "misconfigured", "needs_login"]
    assert shown(State.IDLE) == "not loaded"
    assert shown(State.CIRCUIT_OPEN) == "circuit_open"
    assert UpstreamState is State
    assert State.CIRCUIT_OPEN not in WAITABLE
    assert State.BACKING_OFF in WAITABLE


async def test_the_actor_moves_only_along_the_table(autojump_clock: trio.testing.MockClock) -> None:
    """A server that never starts, then disabled, recovered, enabled, restarted and
    stopped: every state change it publishes is a row of the table, and a feed the
    table refuses leaves the state as it was."""
    server = NeverStartsUpstream()
    async with open_harness({"s": server}) as h:
        up = h.upstreams["s"]
        await h.wait_state("s", "circuit_open")
        await h.wait_state("s", "half_open")
        await h.wait_state("s", "circuit_open")  # the trial failed too
        up.disable()
        await h.wait_state("s", "disabled")
        server.recover()
        up.enable()
        await h.wait_state("s", "ready")
        with pytest.raises(IllegalTransition, match="from 'ready' on 'load'"):
            up._feed(Event.LOAD, "a bug")
        assert up.state is State.READY
        up.restart("operator")
        await h.wait_state("s", "ready")
        up.stop()
        await h.wait_state("s", "stopped")
    moves = [(e.previous, e.state) for _t, e in h.bus.history if isinstance(e, StateChanged)]
    named = {(source.value, target.value) for (source, _event), target in TRANSITIONS.items()}
    assert [m for m in moves if m not in named] == []
    assert {("starting", "backing_off"), ("backing_off", "starting"), ("starting", "circuit_open"),
            ("circuit_open", "half_open"), ("half_open", "circuit_open"), ("circuit_open", "disabled"),
            ("disabled", "starting"), ("starting", "ready"), ("ready", "starting"),
            ("ready", "stopped")} <= set(moves)


def test_a_login_is_not_a_failure_and_keeps_the_tools() -> None:
    """needs_login is entered from a running life (a start, a trial, ready) without
    withdrawing the tools, and left by a login (to starting) or by the login done inside
    the start (to ready); a backoff or breaker never follows from it."""
    for source in (State.STARTING, State.HALF_OPEN, State.READY):
        assert transition("linear", source, Event.NEED_LOGIN) is State.NEEDS_LOGIN
    assert Event.NEED_LOGIN not in WITHDRAWS
    assert transition("linear", State.NEEDS_LOGIN, Event.LOGIN) is State.STARTING
    assert transition("linear", State.NEEDS_LOGIN, Event.READY) is State.READY
    with pytest.raises(IllegalTransition):
        transition("linear", State.BACKING_OFF, Event.NEED_LOGIN)
