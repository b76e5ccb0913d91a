"""Restart policy of one upstream server: backoff, circuit breaker, intensity window.

Sans-IO: plain synchronous classes with no ``await`` and no clock reads. The caller
passes ``now`` (seconds on the Trio clock, ``trio.current_time()``), so trio's MockClock
drives every timer, and a seeded :class:`random.Random` makes the jitter reproducible.

This module owns:

* :class:`RestartPolicy`: what an upstream actor does next after a start, a crash or a
  clean stop: start now, back off for a delay, or wait for the circuit to allow a trial.
  It owns the failure streak, the backoff attempt counter, the circuit state (closed,
  open, half open, and closed on probation after a trial) and the open period.
* The decisions it hands back (:class:`StartNow`, :class:`WaitUntil`, :class:`Backoff`,
  :class:`OpenCircuit`) and its frozen :class:`PolicyStatistics` record.

It runs with a :class:`~mcpvisor.actors.core.policy_config.PolicyConfig` (the per-server
numbers, docs/design.md "Behaviour under failure") and bounds restart storms with an
:class:`~mcpvisor.actors.core.intensity.IntensityWindow` (OTP's "at most MaxR restarts in
MaxT seconds": a storm of restarts of servers that do work between crashes still backs off).

The actor's loop::

    policy = RestartPolicy(PolicyConfig.from_spec(spec), rng=random.Random(seed))
    while True:
        d = policy.before_start(trio.current_time())
        if isinstance(d, WaitUntil):
            await trio.sleep_until(d.until)   # calls fail fast meanwhile (CircuitOpen)
            continue
        ...start the server...; on_ready() when listed; on_healthy() when it answers a
        client's request; on_failure() when it dies
        ...Backoff: sleep d.delay; OpenCircuit: loop (before_start returns WaitUntil)

A clean stop on request is not a failure (:meth:`RestartPolicy.on_stopped`). Time must
not go backwards between calls.
"""

from __future__ import annotations

import enum
import random
from typing import TYPE_CHECKING, Final, TypeAlias, cast

import msgspec

from mcpvisor.actors.core.intensity import IntensityWindow
from mcpvisor.actors.core.policy_config import DEFAULT_POLICY_CONFIG, PolicyConfig

if TYPE_CHECKING:
    from tenacity import RetryCallState, wait_exponential

BACKOFF_EXP_BASE: Final = 2
"""Backoff growth per consecutive failure. docs/design.md "doubling"; tenacity's default."""
CIRCUIT_OPEN_GROWTH: Final = 2
"""Open-period growth per failed trial. docs/design.md "doubling per failed trial"."""
HALF_OPEN_MAX_TRIALS: Final = 1
"""Starts allowed while half open. docs/reliability.md: "Half-open allows 1 probe"."""
HEALTHY_RESTART_DELAY_S: Final = 0.0
"""Wait before restarting a server whose life did useful work: none (OTP's supervisor
restarts a child at once; issue 18: "the restart happens at once"). Repeated failures of
starts that never became healthy still back off from ``restart_delay``."""
STATUS_WINDOW_S: Final = 60.0
"""The span of "restarts in the last minute" in status views."""




class CircuitState(enum.Enum):
    """Breaker state. A trial that became ready is CLOSED (on probation, see RestartPolicy)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class StartNow(msgspec.Struct, frozen=True):
    """Start the server now; ``trial`` is True for the single half-open probe."""

    trial: bool


class WaitUntil(msgspec.Struct, frozen=True):
    """Do not start before ``until`` (Trio clock); calls should fail fast with ``reason``."""

    until: float
    reason: str


class Backoff(msgspec.Struct, frozen=True):
    """Sleep ``delay`` seconds, then ask ``before_start`` again; ``attempt`` counts from 1.

    ``storm`` is set when the server did work before it died but restarts came faster
    than the intensity window allows, so the delay grew anyway (say so in the event).
    """

    delay: float
    attempt: int
    storm: str | None = None


class OpenCircuit(msgspec.Struct, frozen=True):
    """The circuit opened (or re-opened) until ``until``, a period of ``open_for`` seconds."""

    until: float
    open_for: float
    reason: str


Decision: TypeAlias = StartNow | WaitUntil | Backoff | OpenCircuit


class PolicyStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a :class:`RestartPolicy` for status, tests and bench.

    Attributes:
        circuit: the breaker state.
        consecutive_failures: the current failure streak (0 after a healthy run).
        total_failures: every failure since construction (kept by ``reset()``).
        starts: every start allowed since construction (kept by ``reset()``).
        retry_at: when OPEN, when the trial start is allowed; when HALF_OPEN, the same
            time (the trial is running); None when CLOSED.
        open_for: when OPEN or HALF_OPEN the current open period; when CLOSED the period
            the circuit would open for next (doubled while on probation).
        last_failure_reason: the reason given to the last counted failure.
        ready_since: when the running server became ready, None if it is not.
        healthy_lives: lives that did useful work (answered a client's request, or
            stayed up ``restart_reset_after``) before they ended.
        failed_starts: lives that ended before becoming healthy (failed to start, or died
            before doing anything).
        restarts_last_minute: failures (each one a restart) within the last 60 s.
        healthy: whether the running life has become healthy.
    """

    circuit: CircuitState
    consecutive_failures: int
    total_failures: int
    starts: int
    retry_at: float | None
    open_for: float | None
    last_failure_reason: str | None
    ready_since: float | None
    healthy_lives: int = 0
    failed_starts: int = 0
    restarts_last_minute: int = 0
    healthy: bool = False


class _Attempt(msgspec.Struct):
    """The one field of tenacity's RetryCallState its ``wait_*`` strategies read."""

    attempt_number: int


class RestartPolicy:
    """When to restart one upstream server: exponential backoff and a circuit breaker.

    * Healthy lives: a life becomes healthy once the server answers a request a client
      asked for (:meth:`on_healthy`; not our own initialize, list or ping) or stays ready
      for ``restart_reset_after``, whichever comes first. That clears the streak, the
      probation and the open level. A healthy life that then crashes is restarted at
      once (:data:`HEALTHY_RESTART_DELAY_S`) and never counts toward the breaker: the breaker is for
      servers that cannot start or die before doing anything (issue 18).
    * Storms: every failure is recorded in an :class:`IntensityWindow`; when healthy
      lives end more than ``restart_intensity`` times in ``restart_period`` the backoff
      grows with each further one (``Backoff.storm`` says so), so even a server that
      works between crashes is never restarted in a tight loop.
    * CLOSED: each failure of a life that never became healthy extends the streak and
      returns :class:`Backoff` with tenacity's exponential delay plus jitter, capped at
      ``restart_delay_max``. The ``circuit_failures``-th such failure in a row returns
      :class:`OpenCircuit` instead (pybreaker: consecutive failures).
    * OPEN: :meth:`before_start` returns :class:`WaitUntil` until ``retry_at``, then
      moves to HALF_OPEN and returns ``StartNow(trial=True)`` once.
    * HALF_OPEN: further :meth:`before_start` calls return ``WaitUntil(retry_at)`` (a
      time already past): the trial's outcome, not a timer, ends this state, so the
      caller must not poll. A failure re-opens the circuit for twice the last period,
      capped at ``circuit_open_max``; :meth:`on_ready` closes it on probation.
    * Probation: CLOSED, but a failure before the trial's life became healthy re-opens
      the circuit at once at the next (doubled) period, so a server that starts fine and
      crashes a second later without doing anything cannot escape the breaker.
    * Forgiveness by uptime is applied by the next call that passes ``now``.

    Not thread-safe; one actor owns it.
    """

    def __init__(self, config: PolicyConfig = DEFAULT_POLICY_CONFIG, *,
                 rng: random.Random | None = None) -> None:
        """Create a fresh CLOSED policy.

        Args:
            config: the numbers; the docs/design.md defaults if omitted.
            rng: the jitter source; seed it for reproducible delays. A fresh unseeded
                ``random.Random()`` if omitted.
        """
        self._config = config
        self._rng = rng if rng is not None else random.Random()
        # tenacity's formula, min(restart_delay * 2**(n-1), restart_delay_max); only its
        # wait strategy: its stop/timers read time.monotonic() (docs/style.md rule 15).
        # Made at the first failure (`_delay`): tenacity costs ~4 ms of imports at every
        # start, and a server that never fails never needs it.
        self._wait: wait_exponential | None = None
        self._total_failures = 0
        self._starts = 0
        self._healthy_lives = 0
        self._failed_starts = 0
        self._last_failure_reason: str | None = None
        self._window = IntensityWindow(config.restart_intensity, config.restart_period)
        self._minute = IntensityWindow(config.restart_intensity, STATUS_WINDOW_S)
        self._storm = 0
        self._clear()

    def _clear(self) -> None:
        """Forget the streak, circuit and run state (lifetime counters stay)."""
        self._circuit = CircuitState.CLOSED
        self._streak = 0
        self._probation = False
        self._last_open_for: float | None = None
        self._retry_at: float | None = None
        self._open_reason = ""
        self._trials = 0
        self._ready_since: float | None = None
        self.healthy = False
        """The running life has become healthy (`on_healthy`, or uptime; as of the last call):
        a plain attribute, since every answered fast-path call reads it."""

    @property
    def circuit(self) -> CircuitState:
        """The breaker state as of the last call (a healthy-uptime reset is applied lazily)."""
        return self._circuit

    @property
    def config(self) -> PolicyConfig:
        """The numbers this policy runs with (an actor rebuilds it when they change)."""
        return self._config

    def before_start(self, now: float) -> StartNow | WaitUntil:
        """Ask whether the server may be started now; records the start if so.

        Args:
            now: the Trio clock.

        Returns:
            ``StartNow(trial=False)`` when CLOSED. When OPEN: ``WaitUntil(retry_at)``
            before ``retry_at``, then (state HALF_OPEN) ``StartNow(trial=True)`` exactly
            once. When HALF_OPEN with the trial running: ``WaitUntil(retry_at)`` again,
            never a second start. The policy does not enforce :class:`Backoff` delays;
            the caller sleeps them.
        """
        self._settle(now)
        if self._circuit is CircuitState.OPEN:
            assert self._retry_at is not None
            if now < self._retry_at:
                return WaitUntil(self._retry_at, self._open_reason)
            self._circuit = CircuitState.HALF_OPEN  # pybreaker: timeout elapsed -> half open
        if self._circuit is CircuitState.HALF_OPEN:
            assert self._retry_at is not None
            if self._trials >= HALF_OPEN_MAX_TRIALS:
                return WaitUntil(self._retry_at, f"trial start in progress; {self._open_reason}")
            self._trials += 1
            self._starts += 1
            self.healthy = False
            return StartNow(trial=True)
        self._starts += 1
        self.healthy = False  # a new life has done nothing yet
        return StartNow(trial=False)

    def on_ready(self, now: float) -> None:
        """Record that the server finished its handshake and first listing.

        During HALF_OPEN this closes the circuit on probation. Calling it twice for one
        run keeps the first time.

        Args:
            now: the Trio clock.

        Raises:
            RuntimeError: while OPEN: no start was allowed, so the caller has a bug.
        """
        self._settle(now)
        if self._circuit is CircuitState.OPEN:
            raise RuntimeError("on_ready() while the circuit is open: before_start() allowed no start")
        if self._circuit is CircuitState.HALF_OPEN:
            self._circuit = CircuitState.CLOSED
            self._probation = True
            self._retry_at = None
            self._trials = 0
        if self._ready_since is None:
            self._ready_since = now

    def on_healthy(self, now: float) -> None:
        """Record that the running server answered a request a client asked for.

        The life counts as healthy from here on: the failure streak, the probation of a
        trial and the open level are cleared, and its crash, whenever it comes, restarts
        the server at once. Idempotent; ignored when no life is ready
        (a late answer racing the server's death).

        Args:
            now: the Trio clock.
        """
        self._settle(now)
        if self._ready_since is not None:
            self._mark_healthy()

    def on_failure(self, now: float, reason: str) -> Backoff | OpenCircuit:
        """Record a failed start or a crash and say what to do next.

        Args:
            now: the Trio clock.
            reason: what happened, for status and error messages (``"exited with 1"``).

        Returns:
            ``Backoff(delay, attempt)`` while the circuit stays closed, else
            ``OpenCircuit(until=now + open_for, ...)``. While OPEN (nothing can be
            running, so this is a duplicate report of the failure that opened it) the
            current ``OpenCircuit`` is returned again and nothing is counted.
        """
        self._settle(now)
        if self._circuit is CircuitState.OPEN:
            assert self._retry_at is not None
            assert self._last_open_for is not None
            return OpenCircuit(self._retry_at, self._last_open_for, self._open_reason)
        uptime = None if self._ready_since is None else now - self._ready_since
        healthy = self.healthy
        self._ready_since = None
        self.healthy = False
        self._total_failures += 1
        self._last_failure_reason = reason
        self._minute.record(now)
        within = self._window.record(now)
        if healthy:
            # Issue 18: a server that did work between crashes is not crash-looping.
            self._healthy_lives += 1
            if within:
                # OTP restarts a child at once; the intensity window below bounds storms.
                self._storm = 0
                return Backoff(HEALTHY_RESTART_DELAY_S, 1)
            # OTP intensity exceeded: grow the backoff even though each life worked.
            self._storm += 1
            count = self._window.count(now)
            return Backoff(self._delay(1 + self._storm), 1 + self._storm,
                           storm=f"{count} restarts in {self._config.restart_period:g} s")
        self._failed_starts += 1
        self._streak += 1
        if self._circuit is CircuitState.HALF_OPEN:
            return self._open(now, f"trial start failed: {reason}")
        if self._probation:
            ran = "before becoming ready" if uptime is None else f"{uptime:.1f} s after the trial"
            return self._open(now, f"failed {ran} (probation): {reason}")
        if self._streak >= self._config.circuit_failures:
            return self._open(now, f"{self._streak} consecutive failures; last: {reason}")
        return Backoff(self._delay(self._streak), self._streak)

    def on_stopped(self, now: float) -> None:
        """Record a clean stop on request: not a failure, the streak is left alone.

        A healthy-uptime reset already earned still applies. A trial stopped before its
        outcome returns the circuit to OPEN with its ``retry_at`` (already past), so the
        next :meth:`before_start` grants the trial again.

        Args:
            now: the Trio clock.
        """
        self._settle(now)
        self._ready_since = None
        self.healthy = False
        if self._circuit is CircuitState.HALF_OPEN:
            self._circuit = CircuitState.OPEN
            self._trials = 0

    def reset(self) -> None:
        """Operator action (re-enable): back to a fresh CLOSED policy.

        The streak, probation, open level and run state are forgotten; the lifetime
        counters (``total_failures``, ``starts``, ``last_failure_reason``) and the rng
        are kept.
        """
        self._clear()

    def statistics(self, now: float | None = None) -> PolicyStatistics:
        """Return a snapshot; with ``now``, a healthy-uptime reset due by then is applied.

        Args:
            now: the Trio clock, or None to report the state as of the last call.
        """
        if now is not None:
            self._settle(now)
        return PolicyStatistics(
            circuit=self._circuit,
            consecutive_failures=self._streak,
            total_failures=self._total_failures,
            starts=self._starts,
            retry_at=self._retry_at,
            open_for=(self._last_open_for if self._circuit is not CircuitState.CLOSED
                      else self._next_open_for()),
            last_failure_reason=self._last_failure_reason,
            ready_since=self._ready_since,
            healthy_lives=self._healthy_lives,
            failed_starts=self._failed_starts,
            restarts_last_minute=self._minute.count(now) if now is not None else len(self._minute),
            healthy=self.healthy,
        )

    def _settle(self, now: float) -> None:
        """Apply the healthy-uptime reset if the running server has earned it."""
        if self._ready_since is not None and now - self._ready_since >= self._config.restart_reset_after:
            self._mark_healthy()

    def _mark_healthy(self) -> None:
        """The running life did useful work: forgive the streak, probation and open level."""
        self.healthy = True
        self._streak = 0
        self._probation = False
        self._last_open_for = None

    def _delay(self, attempt: int) -> float:
        """tenacity's exponential delay for ``attempt`` plus jitter, capped at the max."""
        if self._wait is None:
            import tenacity

            self._wait = tenacity.wait_exponential(multiplier=self._config.restart_delay,
                                                   max=self._config.restart_delay_max,
                                                   exp_base=BACKOFF_EXP_BASE)
        base: float = self._wait(cast("RetryCallState", _Attempt(attempt)))
        jitter = self._rng.uniform(0, self._config.jitter) if self._config.jitter > 0 else 0.0
        return min(base + jitter, self._config.restart_delay_max)

    def _next_open_for(self) -> float:
        """The period the circuit opens for next: the first, or the last doubled."""
        if self._last_open_for is None:
            return self._config.circuit_open_for
        return min(self._last_open_for * CIRCUIT_OPEN_GROWTH, self._config.circuit_open_max)

    def _open(self, now: float, reason: str) -> OpenCircuit:
        """Open (or re-open) the circuit for the next open period."""
        open_for = self._next_open_for()
        self._circuit = CircuitState.OPEN
        self._probation = False
        self._trials = 0
        self._last_open_for = open_for
        self._retry_at = now + open_for
        self._open_reason = f"circuit open until retry at t={self._retry_at:.1f}: {reason}"
        return OpenCircuit(self._retry_at, open_for, reason)
