"""The restart policy of one upstream, driven with a fake clock: actors/core/policy.py with
its numbers (policy_config.py) and its intensity window (intensity.py).

The policy is sans-IO, so these are plain synchronous tests: time is a number we pass
in, jitter comes from a seeded ``random.Random``. No sleeps, no real time. Scenario ids
(B1-B3, C1-C4, S1/S4/S5) are docs/reliability.md §4 adapted to this API.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mcpvisor.actors.core.intensity import IntensityWindow
from mcpvisor.actors.core.policy import (
    Backoff,
    CircuitState,
    OpenCircuit,
    PolicyStatistics,
    RestartPolicy,
    StartNow,
    WaitUntil,
)
from mcpvisor.actors.core.policy_config import PolicyConfig
from mcpvisor.actors.core.spec import ServerSpec

NO_JITTER = PolicyConfig(jitter=0.0)
NEVER_OPENS = 10**6
"""A circuit_failures no test reaches: isolates the backoff from the breaker."""


def base_delay(config: PolicyConfig, attempt: int) -> float:
    """The jitter-free delay of the n-th consecutive failure, by the docs/design.md formula."""
    return min(config.restart_delay * 2.0 ** (attempt - 1), config.restart_delay_max)


def failed_start(policy: RestartPolicy, now: float, reason: str = "exited with 1") -> Backoff | OpenCircuit:
    """A start the policy allows that fails at once."""
    assert isinstance(policy.before_start(now), StartNow)
    return policy.on_failure(now, reason)


def opened(d: Backoff | OpenCircuit) -> OpenCircuit:
    """Assert the decision opened the circuit."""
    assert isinstance(d, OpenCircuit), d
    return d


def open_circuit(policy: RestartPolicy, now: float = 0.0) -> OpenCircuit:
    """Fail starts back to back (ignoring backoff delays) until the circuit opens."""
    while True:
        d = failed_start(policy, now)
        if isinstance(d, OpenCircuit):
            return d


def run_for(policy: RestartPolicy, start: float, uptime: float,
            reason: str = "crashed") -> Backoff | OpenCircuit:
    """A start that becomes ready at ``start`` and crashes ``uptime`` seconds later."""
    assert isinstance(policy.before_start(start), StartNow)
    policy.on_ready(start)
    return policy.on_failure(start + uptime, reason)


# --- 4.2 Backoff -------------------------------------------------------------------


def test_b1_delays_double_to_the_cap_and_restart_times_follow() -> None:
    """B1: jitter off, delay 1, max 30: delays 1,2,4,8,16,30,30 and restarts at
    t = 1,3,7,15,31,61,91 for a child that crashes at once every time."""
    policy = RestartPolicy(PolicyConfig(restart_delay=1, restart_delay_max=30, jitter=0,
                                        circuit_failures=NEVER_OPENS), rng=random.Random(0))
    now, delays, restarts = 0.0, [], []
    for attempt in range(1, 8):
        d = failed_start(policy, now)
        assert isinstance(d, Backoff)
        assert d.attempt == attempt
        delays.append(d.delay)
        now += d.delay
        restarts.append(now)
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    assert restarts == [1, 3, 7, 15, 31, 61, 91]


def test_default_delays_start_at_a_quarter_second() -> None:
    """docs/design.md defaults with jitter off: 0.25, 0.5, 1, 2 s, then the 5th failure opens
    the circuit instead of backing off."""
    policy = RestartPolicy(NO_JITTER)
    decisions = [failed_start(policy, 0.0) for _ in range(5)]
    assert decisions[:4] == [Backoff(0.25, 1), Backoff(0.5, 2), Backoff(1.0, 3), Backoff(2.0, 4)]
    assert isinstance(decisions[4], OpenCircuit)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 20),
    restart_delay=st.floats(0.0, 10.0),
    extra_max=st.floats(0.0, 100.0),
    jitter=st.floats(0.0, 5.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_b2_every_delay_is_within_the_jitter_bounds(
    n: int, restart_delay: float, extra_max: float, jitter: float, seed: int
) -> None:
    """B2: the k-th delay lies in [base(k), min(base(k) + jitter, max)] for every k up
    to n, attempts count 1..n; a jitter outside that band or past the cap fails here."""
    config = PolicyConfig(restart_delay=restart_delay, restart_delay_max=restart_delay + extra_max,
                          jitter=jitter, circuit_failures=n + 1)
    policy = RestartPolicy(config, rng=random.Random(seed))
    for k in range(1, n + 1):
        d = failed_start(policy, 0.0)
        assert isinstance(d, Backoff)
        assert d.attempt == k
        base = base_delay(config, k)
        assert base <= d.delay <= min(base + jitter, config.restart_delay_max)


def test_same_seed_gives_the_same_delays() -> None:
    """Determinism: two policies with equal seeds hand out identical jittered delays."""
    config = PolicyConfig(circuit_failures=NEVER_OPENS)
    a, b = RestartPolicy(config, rng=random.Random(7)), RestartPolicy(config, rng=random.Random(7))
    assert [failed_start(a, 0.0) for _ in range(10)] == [failed_start(b, 0.0) for _ in range(10)]


def test_b3_healthy_uptime_resets_the_backoff() -> None:
    """B3: a server ready for restart_reset_after (60 s) before it crashes is restarted at
    once and its crash does not count toward the breaker; one ready for less (and
    answering nothing) continues the streak."""
    policy = RestartPolicy(NO_JITTER)
    for _ in range(3):
        failed_start(policy, 0.0)
    assert run_for(policy, 10.0, 59.9) == Backoff(2.0, 4)  # short uptime: streak goes on
    assert run_for(policy, 100.0, 60.0) == Backoff(0.0, 1)  # exactly 60 s: healthy, at once
    assert policy.statistics().consecutive_failures == 0


def test_healthy_uptime_resets_the_open_level() -> None:
    """Point 2: after a healthy run the breaker's open level is back to circuit_open_for,
    so the next time the circuit opens it is for 30 s, not the doubled period."""
    policy = RestartPolicy(NO_JITTER)
    open_circuit(policy)
    assert isinstance(policy.on_failure(0.0, "dup"), OpenCircuit)  # duplicate report: ignored
    assert policy.before_start(30.0) == StartNow(trial=True)
    assert opened(policy.on_failure(30.0, "trial failed")).open_for == 60.0
    assert policy.before_start(90.0) == StartNow(trial=True)
    policy.on_ready(90.0)
    assert isinstance(policy.on_failure(150.0, "after an hour of calm"), Backoff)
    assert open_circuit(policy, 200.0).open_for == 30.0


# --- 4.3 Circuit breaker -------------------------------------------------------------


def test_c1_five_consecutive_failed_starts_open_the_circuit() -> None:
    """C1: the 5th failure returns OpenCircuit(until=now+30); no 6th start is allowed
    before then (5 starts, not 6)."""
    policy = RestartPolicy()
    now = 0.0
    for _ in range(4):
        d = failed_start(policy, now)
        assert isinstance(d, Backoff)
        now += d.delay
    d = opened(failed_start(policy, now, "bad command"))
    assert d == OpenCircuit(until=now + 30.0, open_for=30.0, reason=d.reason)
    assert "5 consecutive failures" in d.reason
    assert "bad command" in d.reason
    assert policy.circuit is CircuitState.OPEN
    wait = policy.before_start(now + 1)
    assert isinstance(wait, WaitUntil)
    assert wait.until == now + 30.0
    assert "bad command" in wait.reason
    assert policy.statistics().starts == 5


def test_crashes_after_a_short_uptime_count_towards_the_circuit() -> None:
    """Point 3: starts that succeed but crash a second later are consecutive failures
    too; the 5th opens the circuit."""
    policy = RestartPolicy(NO_JITTER)
    decisions = [run_for(policy, 10.0 * i, 1.0) for i in range(5)]
    assert all(isinstance(d, Backoff) for d in decisions[:4])
    assert isinstance(decisions[4], OpenCircuit)


def test_c2_a_healthy_run_between_streaks_keeps_the_circuit_closed() -> None:
    """C2: 4 failures, a run that stays healthy for restart_reset_after and crashes, 4
    failures: still CLOSED (the healthy run reset the consecutive count, its crash did
    not start a new one)."""
    policy = RestartPolicy(NO_JITTER)
    for _ in range(4):
        failed_start(policy, 0.0)
    assert isinstance(run_for(policy, 10.0, 60.0), Backoff)
    for _ in range(4):
        assert isinstance(failed_start(policy, 100.0), Backoff)
    assert policy.circuit is CircuitState.CLOSED
    assert policy.statistics().consecutive_failures == 4


def test_c3_exactly_one_trial_when_the_open_period_ends() -> None:
    """C3: OPEN at t0: WaitUntil(t0+30) before t0+30; at t0+30 exactly one
    StartNow(trial=True) (HALF_OPEN); while it runs, WaitUntil(t0+30) again."""
    policy = RestartPolicy()
    t0 = 5.0
    d = open_circuit(policy, t0)
    for now in (t0, t0 + 10, t0 + 29.999):
        wait = policy.before_start(now)
        assert isinstance(wait, WaitUntil)
        assert wait.until == t0 + 30
    assert policy.before_start(t0 + 30) == StartNow(trial=True)
    assert policy.circuit is CircuitState.HALF_OPEN
    for now in (t0 + 30, t0 + 31, t0 + 1000):
        again = policy.before_start(now)
        assert isinstance(again, WaitUntil)
        assert again.until == d.until
        assert "trial" in again.reason
    assert policy.statistics().starts == 6


def test_c4_failed_trials_double_the_open_period_up_to_the_max() -> None:
    """C4: each failed trial re-opens for twice the last period, capped at 5 min:
    30, 60, 120, 240, 300, 300."""
    policy = RestartPolicy()
    d = open_circuit(policy)
    periods = [d.open_for]
    for _ in range(5):
        assert policy.before_start(d.until) == StartNow(trial=True)
        d = opened(policy.on_failure(d.until, "still broken"))
        assert "trial" in d.reason
        periods.append(d.open_for)
    assert periods == [30, 60, 120, 240, 300, 300]


def test_c4_a_successful_trial_closes_and_clears_after_probation() -> None:
    """C4/point 4: a trial that becomes ready closes the circuit; surviving
    restart_reset_after makes the life healthy, clearing streak and open level: its crash
    restarts at once and the next opening lasts 30 s again."""
    policy = RestartPolicy(NO_JITTER)
    d = open_circuit(policy)
    assert policy.before_start(d.until) == StartNow(trial=True)
    d = opened(policy.on_failure(d.until, "trial failed"))  # level now 60
    assert policy.before_start(d.until) == StartNow(trial=True)
    policy.on_ready(d.until)
    assert policy.circuit is CircuitState.CLOSED
    stats = policy.statistics(d.until + 60)
    assert stats.consecutive_failures == 0
    assert stats.open_for == 30.0
    assert policy.on_failure(d.until + 61, "later") == Backoff(0.0, 1)
    assert open_circuit(policy, 1000.0).open_for == 30.0


def test_probation_failure_reopens_at_once_at_the_doubled_period() -> None:
    """Point 4: a trial that becomes ready but crashes before restart_reset_after of
    uptime re-opens the circuit immediately (no backoff) for the doubled period."""
    policy = RestartPolicy()
    d = open_circuit(policy)
    assert policy.before_start(d.until) == StartNow(trial=True)
    policy.on_ready(d.until)
    assert policy.statistics().open_for == 60.0  # the period it would re-open for
    again = opened(policy.on_failure(d.until + 1.0, "segfault"))
    assert again == OpenCircuit(until=d.until + 1.0 + 60.0, open_for=60.0, reason=again.reason)
    assert "probation" in again.reason
    assert "segfault" in again.reason


def test_a_server_that_crashes_soon_after_every_trial_cannot_escape() -> None:
    """Point 4: start fine, crash 1 s later, forever: the open periods still grow
    30, 60, 120, 240, 300, 300 and no Backoff is ever handed out after the first open."""
    policy = RestartPolicy()
    d = open_circuit(policy)
    periods = [d.open_for]
    for _ in range(5):
        assert policy.before_start(d.until) == StartNow(trial=True)
        policy.on_ready(d.until)
        d = opened(policy.on_failure(d.until + 1.0, "crashed"))
        periods.append(d.open_for)
    assert periods == [30, 60, 120, 240, 300, 300]


def test_probation_survives_a_clean_stop() -> None:
    """A clean stop during probation is not a pardon: the next start that crashes
    before restart_reset_after still re-opens the circuit."""
    policy = RestartPolicy()
    d = open_circuit(policy)
    assert policy.before_start(d.until) == StartNow(trial=True)
    policy.on_ready(d.until)
    policy.on_stopped(d.until + 5)
    assert policy.before_start(d.until + 10) == StartNow(trial=False)
    assert isinstance(policy.on_failure(d.until + 10, "failed to start"), OpenCircuit)


# --- Point 5: a server that never starts is not hammered ------------------------------


def simulate(policy: RestartPolicy, horizon: float, uptimes: list[float] | None = None) -> list[float]:
    """Drive the actor's loop with a fake clock until ``horizon``; return start times.

    Each start fails at once (``uptimes`` None) or becomes ready and crashes after the
    next uptime in ``uptimes`` (cycled). Backoff delays are slept exactly.
    """
    now, starts, i = 0.0, [], 0
    while now < horizon:
        d = policy.before_start(now)
        if isinstance(d, WaitUntil):
            assert d.until > now, "WaitUntil in the past would make the actor spin"
            now = d.until
            continue
        starts.append(now)
        if uptimes:
            policy.on_ready(now)
            now += uptimes[i % len(uptimes)]
            i += 1
        failure = policy.on_failure(now, "exited with 1")
        if isinstance(failure, Backoff):
            now += failure.delay
    return starts


def test_a_server_that_never_starts_is_not_hammered() -> None:
    """Point 5, defaults: at most 7 starts in the first 60 s, at most 2 in any 60 s
    window after 10 min, and every gap at least the backoff/open bound of its place
    in the sequence (0.25, 0.5, 1, 2, then 30, 60, 120, 240, 300...)."""
    config = PolicyConfig()
    for seed in range(20):
        starts = simulate(RestartPolicy(config, rng=random.Random(seed)), horizon=2 * 3600)
        assert sum(1 for t in starts if t < 60) <= 7
        late = [t for t in starts if t >= 600]
        assert late, "the policy gave up on the server for good"
        assert max(sum(1 for u in late if s <= u < s + 60) for s in late) <= 2
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        lower = [base_delay(config, k) for k in range(1, config.circuit_failures)]
        lower += [min(config.circuit_open_for * 2**j, config.circuit_open_max) for j in range(len(gaps))]
        for gap, bound in zip(gaps, lower, strict=False):
            assert gap >= bound - 1e-9  # start times are float sums


@settings(max_examples=100, deadline=None)
@given(
    uptimes=st.lists(st.floats(0.0, 59.9), min_size=1, max_size=10),
    seed=st.integers(0, 2**32 - 1),
)
def test_short_lived_servers_are_not_hammered_either(uptimes: list[float], seed: int) -> None:
    """Point 5 with crashes after short uptimes (< restart_reset_after): the same start
    bounds hold, whatever the uptimes and jitter."""
    starts = simulate(RestartPolicy(rng=random.Random(seed)), horizon=3600, uptimes=uptimes)
    assert sum(1 for t in starts if t < 60) <= 7
    late = [t for t in starts if t >= 600]
    assert all(sum(1 for u in late if s <= u < s + 60) <= 2 for s in late)


# --- Clean stop, reset, statistics, config ---------------------------------------------


def test_a_clean_stop_is_not_a_failure() -> None:
    """on_stopped leaves the streak alone: the next failure continues it at attempt 3."""
    policy = RestartPolicy(NO_JITTER)
    failed_start(policy, 0.0)
    failed_start(policy, 1.0)
    assert isinstance(policy.before_start(2.0), StartNow)
    policy.on_ready(2.0)
    policy.on_stopped(5.0)
    stats = policy.statistics(5.0)
    assert (stats.consecutive_failures, stats.total_failures, stats.ready_since) == (2, 2, None)
    assert failed_start(policy, 10.0) == Backoff(1.0, 3)


def test_a_stopped_trial_is_granted_again() -> None:
    """Stopping a half-open trial on request is not a failure: back to OPEN with the
    same retry_at, and the next before_start grants the trial again."""
    policy = RestartPolicy()
    d = open_circuit(policy)
    assert policy.before_start(d.until) == StartNow(trial=True)
    policy.on_stopped(d.until + 1)
    assert policy.circuit is CircuitState.OPEN
    assert policy.before_start(d.until + 2) == StartNow(trial=True)


def test_reset_gives_a_fresh_closed_policy() -> None:
    """reset() (operator re-enable) from OPEN: CLOSED, a normal start, backoff from
    attempt 1, open level back to 30 s; lifetime counters are kept."""
    policy = RestartPolicy(NO_JITTER)
    d = open_circuit(policy)
    policy.before_start(d.until)
    policy.on_failure(d.until, "trial failed")
    policy.reset()
    stats = policy.statistics()
    assert stats.circuit is CircuitState.CLOSED
    assert (stats.consecutive_failures, stats.retry_at, stats.open_for) == (0, None, 30.0)
    assert (stats.total_failures, stats.starts) == (6, 6)
    assert failed_start(policy, 100.0) == Backoff(0.25, 1)
    assert open_circuit(policy, 100.0).open_for == 30.0


def test_statistics_follow_the_circuit() -> None:
    """Point 6: statistics report the state, retry_at, open period, counts, last reason
    and ready_since through CLOSED -> OPEN -> HALF_OPEN -> CLOSED."""
    policy = RestartPolicy()
    assert policy.statistics() == PolicyStatistics(CircuitState.CLOSED, 0, 0, 0, None, 30.0, None, None)
    open_circuit(policy, 10.0)
    assert policy.statistics(11.0) == PolicyStatistics(
        CircuitState.OPEN, 5, 5, 5, retry_at=40.0, open_for=30.0,
        last_failure_reason="exited with 1", ready_since=None,
        failed_starts=5, restarts_last_minute=5)
    policy.before_start(40.0)
    half = policy.statistics(40.0)
    assert (half.circuit, half.starts, half.retry_at) == (CircuitState.HALF_OPEN, 6, 40.0)
    policy.on_ready(41.0)
    ready = policy.statistics(42.0)
    assert (ready.circuit, ready.ready_since, ready.retry_at, ready.open_for) == (
        CircuitState.CLOSED, 41.0, None, 60.0)
    assert ready.consecutive_failures == 5
    assert policy.statistics(101.0).consecutive_failures == 0  # 60 s of uptime forgive


def test_on_ready_while_open_is_a_caller_bug() -> None:
    """OPEN allows no start, so a ready report then is a protocol error, not silently
    accepted."""
    policy = RestartPolicy()
    open_circuit(policy)
    with pytest.raises(RuntimeError, match="circuit is open"):
        policy.on_ready(1.0)


def test_from_spec_reads_the_servers_knobs() -> None:
    """A server's restart knobs become its policy; jitter, which no config key sets,
    is the default unless the caller passes one."""
    spec = ServerSpec(name="s", transport="stdio", command="x", restart_delay=1, restart_delay_max=10,
                      restart_reset_after=120, circuit_failures=3, circuit_open_for=15, restart_intensity=4,
                      restart_period=20)
    assert PolicyConfig.from_spec(spec) == PolicyConfig(
        restart_delay=1.0, restart_delay_max=10.0, jitter=0.25, restart_reset_after=120.0,
        circuit_failures=3, circuit_open_for=15.0, circuit_open_max=300.0, restart_intensity=4,
        restart_period=20.0)
    assert PolicyConfig.from_spec(spec, jitter=0.0).jitter == 0.0


@pytest.mark.parametrize("kwargs", [
    {"restart_delay": -1.0},
    {"restart_delay": 5.0, "restart_delay_max": 1.0},
    {"jitter": float("nan")},
    {"restart_reset_after": float("inf")},
    {"circuit_failures": 0},
    {"circuit_open_for": 0.0},
    {"circuit_open_for": 60.0, "circuit_open_max": 30.0},
])
def test_implausible_config_is_rejected(kwargs: dict[str, Any]) -> None:
    """A config that would hammer a server or never restart it raises ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        PolicyConfig(**kwargs)


# --- Stateful: invariants under any sequence of calls ----------------------------------


class PolicyMachine(RuleBasedStateMachine):
    """Drives a policy through any order of start/ready/fail/stop/reset and time steps."""

    def __init__(self) -> None:
        super().__init__()
        self.config = PolicyConfig(circuit_failures=3)
        self.policy = RestartPolicy(self.config, rng=random.Random(0))
        self.now = 0.0
        self.running = False
        self.ready_at: float | None = None
        self.answered = False

    @rule(dt=st.floats(0.0, 400.0))
    def advance(self, dt: float) -> None:
        self.now += dt

    @precondition(lambda self: not self.running)
    @rule()
    def start(self) -> None:
        before = self.policy.circuit
        d = self.policy.before_start(self.now)
        if isinstance(d, StartNow):
            assert d.trial == (before is not CircuitState.CLOSED)
            self.running = True
        else:
            assert before is not CircuitState.CLOSED
            assert self.policy.circuit is not CircuitState.CLOSED

    @precondition(lambda self: self.running and self.ready_at is None)
    @rule()
    def ready(self) -> None:
        self.policy.on_ready(self.now)
        assert self.policy.circuit is CircuitState.CLOSED
        self.ready_at = self.now

    @precondition(lambda self: self.ready_at is not None)
    @rule()
    def answer(self) -> None:
        self.policy.on_healthy(self.now)
        self.answered = True
        assert self.policy.statistics().consecutive_failures == 0

    @precondition(lambda self: self.running)
    @rule()
    def fail(self) -> None:
        before = self.policy.circuit
        healthy = self.ready_at is not None and (
            self.answered or self.now - self.ready_at >= self.config.restart_reset_after)
        d = self.policy.on_failure(self.now, "boom")
        if healthy:
            # A life that did work is restarted at once, or backs off in a storm; never opens.
            assert isinstance(d, Backoff)
            assert d.delay == 0.0 or (d.storm is not None and d.delay <= self.config.restart_delay_max)
        elif isinstance(d, Backoff):
            assert before is CircuitState.CLOSED
            assert 1 <= d.attempt < self.config.circuit_failures
            base = base_delay(self.config, d.attempt)
            assert base <= d.delay <= min(base + self.config.jitter, self.config.restart_delay_max)
        else:
            assert self.config.circuit_open_for <= d.open_for <= self.config.circuit_open_max
            assert d.until == self.now + d.open_for
        self.running, self.ready_at, self.answered = False, None, False

    @precondition(lambda self: self.running)
    @rule()
    def stop(self) -> None:
        self.policy.on_stopped(self.now)
        self.running, self.ready_at, self.answered = False, None, False

    @rule()
    def reset(self) -> None:
        self.policy.reset()  # forgets the run state too: the running life starts over
        self.ready_at, self.answered = None, False

    @invariant()
    def consistent(self) -> None:
        stats = self.policy.statistics()
        assert (stats.retry_at is None) == (stats.circuit is CircuitState.CLOSED)
        assert stats.open_for is not None
        assert stats.open_for <= self.config.circuit_open_max
        assert stats.total_failures >= stats.consecutive_failures
        if stats.circuit is CircuitState.OPEN:
            assert not self.running, "OPEN while a server runs"
        if stats.circuit is CircuitState.HALF_OPEN:
            assert self.running, "HALF_OPEN without the trial running"


TestPolicyMachine = PolicyMachine.TestCase
TestPolicyMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


# --- IntensityWindow (OTP restart intensity) -------------------------------------------


def test_s1_intensity_allows_max_restarts_then_refuses() -> None:
    """S1: intensity 3 in 5 s, restarts with no delay: 3 allowed, the 4th exceeds."""
    window = IntensityWindow(3, 5.0)
    assert [window.record(0.0) for _ in range(4)] == [True, True, True, False]
    assert window.count(0.0) == 4


def test_s4_restarts_spaced_wider_than_the_period_never_exceed() -> None:
    """S4: a crash every 6 s with intensity 1 in 5 s for an hour never exceeds."""
    window = IntensityWindow(1, 5.0)
    assert all(window.record(6.0 * i) for i in range(600))
    assert window.count(6.0 * 599) == 1


def test_s5_two_restarts_inside_the_period_exceed() -> None:
    """S5: two crashes 1 s apart with intensity 1 in 5 s: the second exceeds."""
    window = IntensityWindow(1, 5.0)
    assert window.record(10.0)
    assert not window.record(11.0)


def test_intensity_window_boundary_follows_otp() -> None:
    """OTP add_restart keeps restarts with R >= Now - Period: a restart exactly
    `period` old still counts, a hair older does not."""
    window = IntensityWindow(1, 5.0)
    window.record(0.0)
    assert window.count(5.0) == 1
    assert window.count(5.001) == 0
    assert window.record(5.001)
    with pytest.raises(ValueError, match="period"):
        IntensityWindow(1, 0.0)


# --- Issue 18: a server that works between crashes is not crash-looping ---------------


def useful_life(policy: RestartPolicy, now: float, uptime: float = 0.1) -> Backoff | OpenCircuit:
    """A start that becomes ready, answers a client's request, and crashes ``uptime`` later."""
    assert isinstance(policy.before_start(now), StartNow)
    policy.on_ready(now)
    policy.on_healthy(now + uptime / 2)
    return policy.on_failure(now + uptime, "exited with 1")


def test_a_server_that_answers_between_crashes_never_opens_the_circuit() -> None:
    """A server that answers calls and crashes every 0.1 s of life is restarted at the
    first backoff step each time and the circuit never opens, however many crashes, as
    long as the restarts stay within the intensity window. A regression shows as an
    OpenCircuit after circuit_failures (5) crashes, the bug the issue reports."""
    policy = RestartPolicy(NO_JITTER)
    now = 0.0
    for _ in range(100):
        d = useful_life(policy, now)
        assert d == Backoff(0.0, 1)
        now += 0.1 + d.delay + 6.0  # 10 restarts a minute: within the window
    stats = policy.statistics(now)
    assert stats.circuit is CircuitState.CLOSED
    assert (stats.healthy_lives, stats.failed_starts, stats.consecutive_failures) == (100, 0, 0)


def test_a_server_that_never_starts_still_opens_the_circuit() -> None:
    """Starts that fail before becoming ready open the circuit after circuit_failures."""
    policy = RestartPolicy(NO_JITTER)
    decisions = [failed_start(policy, float(i)) for i in range(5)]
    assert all(isinstance(d, Backoff) for d in decisions[:4])
    assert isinstance(decisions[4], OpenCircuit)
    assert policy.statistics().failed_starts == 5


def test_a_server_that_dies_before_doing_anything_still_opens_the_circuit() -> None:
    """A server that becomes ready (handshake and listing done) and exits 100 ms later
    without answering a client is not healthy: circuit_failures such lives open it."""
    policy = RestartPolicy(NO_JITTER)
    decisions = []
    for i in range(5):
        assert isinstance(policy.before_start(float(i)), StartNow)
        policy.on_ready(float(i))
        decisions.append(policy.on_failure(i + 0.1, "exited with 0"))
    assert isinstance(decisions[-1], OpenCircuit)
    assert policy.statistics().healthy_lives == 0


def test_one_useful_life_clears_a_failure_streak() -> None:
    """Four failed starts, then a life that answers a request and crashes: the streak is
    forgiven, so four more failed starts do not open the circuit (the fifth does)."""
    policy = RestartPolicy(NO_JITTER)
    for i in range(4):
        failed_start(policy, float(i))
    assert useful_life(policy, 10.0) == Backoff(0.0, 1)
    for i in range(4):
        assert isinstance(failed_start(policy, 20.0 + i), Backoff)
    assert isinstance(failed_start(policy, 30.0), OpenCircuit)


def test_a_trial_that_does_work_ends_probation() -> None:
    """A half-open trial that answers a client is healthy: its later crash restarts it at
    the first step instead of re-opening the circuit (probation is for trials that die
    before doing anything)."""
    policy = RestartPolicy(NO_JITTER)
    d = open_circuit(policy)
    assert policy.before_start(d.until) == StartNow(trial=True)
    policy.on_ready(d.until)
    policy.on_healthy(d.until + 0.5)
    assert policy.on_failure(d.until + 1.0, "crashed") == Backoff(0.0, 1)
    assert policy.circuit is CircuitState.CLOSED


def test_a_restart_storm_backs_off_even_when_every_life_worked() -> None:
    """More than restart_intensity (10) restarts in restart_period (60 s) grow the
    backoff although each life answered calls, and the decision says it is a storm;
    once the window drains, restarts are immediate again. Never a tight loop."""
    policy = RestartPolicy(NO_JITTER)
    now = 0.0
    delays = []
    for _ in range(14):
        d = useful_life(policy, now, uptime=0.1)
        assert isinstance(d, Backoff)
        delays.append(d)
        now += 0.1 + d.delay
    assert all(d == Backoff(0.0, 1) for d in delays[:10])
    storm = delays[10:]
    assert [d.delay for d in storm] == [0.5, 1.0, 2.0, 4.0]
    assert all(d.storm is not None and "restarts in 60 s" in d.storm for d in storm)
    assert policy.circuit is CircuitState.CLOSED
    assert policy.statistics(now).restarts_last_minute == 14
    assert useful_life(policy, now + 61.0) == Backoff(0.0, 1)


def test_on_healthy_without_a_ready_life_is_ignored() -> None:
    """A late answer arriving after the server died does not mark the next start healthy."""
    policy = RestartPolicy(NO_JITTER)
    for i in range(4):
        failed_start(policy, float(i))
    policy.on_healthy(5.0)
    assert isinstance(failed_start(policy, 6.0), OpenCircuit)


def test_restart_intensity_is_validated() -> None:
    """A zero intensity or period is refused, since it would turn every restart into a storm."""
    with pytest.raises(ValueError, match="restart_intensity"):
        PolicyConfig(restart_intensity=0)
    with pytest.raises(ValueError, match="restart_period"):
        PolicyConfig(restart_period=0.0)
