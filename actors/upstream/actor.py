"""One upstream server as a supervised actor: its state machine, its connection, its calls.

Owns, for one configured server:

* the lifecycle loop: start (spawn or connect, handshake, list everything), serve,
  detect failure (crash, closed transport, missed pings, garbage on stdout, a start
  that takes too long), ask the restart policy what next (backoff, circuit open,
  half-open trial);
* the lifecycle of `mcpvisor.actors.core.lifecycle`: the actor feeds that table the
  events it sees (`Upstream._enter`), the only way its state changes, and publishes
  every transition as a `StateChanged` event with its reason (the exit
  status and last stderr lines, "did not start within 30s", "hung: 3 pings
  unanswered", "garbage on stdout: ...");
* calls from clients (`mcpvisor.actors.upstream.calls`): they go straight to the live
  link (no mailbox hop); a call in flight when the server dies fails at once; a call to
  a restarting server waits, bounded by ``restartWait``; a call to an open circuit fails
  at once with the time of the next try;
* a server that needs an OAuth login (`mcpvisor.actors.upstream.login`): ``needs_login``
  between lives, not a failure;
* what clients see of the server's tools: kept through a brief restart (no
  list_changed churn while backing off), withdrawn once when the circuit opens or
  the server is disabled or stopped, back once it is ready again; re-listed after
  every start and after the server says a list changed.

Time comes only from trio (docs/style.md rule 15): under `trio.testing.MockClock` with an
in-memory link factory (``open_link=``) every backoff, circuit period, ping and
timeout runs in virtual time (tests/fakes).
"""

from __future__ import annotations

import logging
import math
import random

import trio

from mcpvisor.actors import telemetry
from mcpvisor.actors.core.catalog import UpstreamLists
from mcpvisor.actors.core.lifecycle import WARNS, WITHDRAWS, Event, shown, transition
from mcpvisor.actors.core.policy import Backoff, CircuitState, OpenCircuit, RestartPolicy, WaitUntil
from mcpvisor.actors.core.policy_config import DEFAULT_JITTER_S, PolicyConfig
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamUp
from mcpvisor.actors.core.spec import ServerSpec
from mcpvisor.actors.link import Link
from mcpvisor.actors.link.logins import NeedsLogin, login_message
from mcpvisor.actors.messages import EventBus, StateChanged
from mcpvisor.actors.process import Reaper
from mcpvisor.actors.upstream.calls import UpstreamCalls
from mcpvisor.actors.upstream.failures import classify, holds, with_stderr
from mcpvisor.actors.upstream.login import UpstreamLogin
from mcpvisor.actors.upstream.opener import OpenLink, UpstreamLinkEvents, open_real_link
from mcpvisor.actors.upstream.preflight import SELF_REASON, preflight, refused_as_self
from mcpvisor.actors.upstream.status import (
    Hooks,
    RouterPort,
    State,
    UpstreamMeter,
    UpstreamStatus,
)
from mcpvisor.actors.upstream.tasks import LinkTasks, era_of, spoken_versions

logger = logging.getLogger(__name__)


class Upstream(UpstreamCalls, UpstreamLogin, LinkTasks):
    """Actor and handle for one server. Start with ``await nursery.start(up.run)``.

    The public methods (`request`, `wait_link`, `status`, `load`, `stop`, `disable`,
    `enable`, `restart`) may be called from any task; the state machine itself runs
    only in `run`.
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        router: RouterPort,
        events: EventBus,
        hooks: Hooks,
        reaper: Reaper | None,
        max_message: int,
        rng: random.Random | None = None,
        era_memory: dict[str, str] | None = None,
        open_link: OpenLink | None = None,
        jitter: float = DEFAULT_JITTER_S,
    ) -> None:
        self.spec = spec
        self.name: str = spec.name
        self.router = router
        self.bus = events
        self.hooks = hooks
        self.reaper = reaper
        self.max_message = max_message
        self._rng = rng
        self._open_link: OpenLink = open_link if open_link is not None else open_real_link
        self._jitter = jitter
        """The restart policy's jitter (no config key sets it; a test passes 0 for exact times)."""
        self.policy = RestartPolicy(PolicyConfig.from_spec(spec, jitter=jitter), rng=rng)
        self.state = State.IDLE if spec.lazy else State.STARTING
        self.reason: str | None = None
        self.since = trio.current_time()
        self.ready_since: float | None = None
        self.retry_at: float | None = None
        """When the next start is due: while backing off, and while the circuit is open."""
        self.restarts = 0
        self.starts = 0
        self.calls = 0
        """Client calls (`USEFUL_METHODS`) sent to this server since the proxy started."""
        self.answered = 0
        """Of those, the ones the server answered (a result or a JSON-RPC error)."""
        self.last_error: str | None = None
        self.meter: UpstreamMeter | None = None
        """Where requests and state changes are counted (`mcpvisor.metrics`); None: metrics off."""
        self.link: Link | None = None
        self.starting_link: Link | None = None
        """The link of a start whose handshake is done while its lists are still coming: calls
        waiting for this server go through it (`wait_link` with ``early``), as a client of the
        server itself would call after its handshake; None otherwise."""
        self.lists = UpstreamLists()
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._poked = False
        self._dirty: set[str] = set()
        self._dirty_event = trio.Event()
        self._listen_uris: set[str] = set()
        self._listen_changed = trio.Event()
        self.hints = {}
        self._fresh_until = {}
        self._fresh_changed = trio.Event()
        self._desired = "run"  # run | stopped | disabled
        self._loaded = not spec.lazy
        self._restart_reason: str | None = None
        self._life: trio.CancelScope | None = None
        self._attempt: Link | None = None
        self._outcome: Backoff | OpenCircuit | None = None
        self._withdrawn = False
        self._era_memory = era_memory if era_memory is not None else {}
        self.start_reason = "first start"
        """Why the first start of this actor happens, as logged and published (a reload
        that replaces a changed server's actor says so)."""
        self._refused: str | None = None
        """Set when a start ended with the child refusing to be our server (it is mcpvisor)."""
        self._init_login()
        self._startup: trio.CancelScope | None = None
        self.first_attempt_done = trio.Event()
        """Set once the first start attempt has ended (ready or failed), or the server is
        not meant to start (lazy, disabled, stopped). The start-up gate waits for it."""

    # --- public -------------------------------------------------------------------
    def status(self) -> UpstreamStatus:
        now = trio.current_time()
        stats = self.policy.statistics(now)
        link = self.link
        live = link is not None and link.close_reason is None
        return UpstreamStatus(
            name=self.name,
            transport=self.spec.transport,
            state=shown(self.state),
            reason=self.reason,
            since=self.since,
            uptime=(now - self.ready_since) if self.state is State.READY and self.ready_since is not None
            else None,
            restarts=self.restarts,
            circuit=stats.circuit.value,
            retry_at=self.retry_at,
            last_error=self.last_error,
            tool_count=len(self.lists.tools),
            pid=getattr(link, "pid", None) if live else None,
            protocol_version=(link.protocol_version or None) if live and link is not None else None,
            protocol_versions=spoken_versions(link) if live and link is not None else (),
            in_flight=link.in_flight() if link is not None else 0,
            description=self.spec.description,
            starts=self.starts,
            consecutive_failures=stats.consecutive_failures,
            healthy_lives=stats.healthy_lives,
            failed_starts=stats.failed_starts,
            restarts_last_minute=stats.restarts_last_minute,
            calls=self.calls,
            answered=self.answered,
            availability=self.answered / self.calls if self.calls else None,
        )

    def load(self) -> None:
        """Start a lazy server (idempotent)."""
        if not self._loaded:
            self._loaded = True
            self._poke()

    def unload(self) -> None:
        """A lazy server's load failed: back to ``idle`` (not ready, nothing retried) until
        the next `load`. No effect on a server that is ready or not lazy."""
        if self.spec.lazy and self._loaded and self.state is not State.READY:
            self._loaded = False
            self._poke(end_life=True)

    def stop(self) -> None:
        """Stop for good: the process is stopped, the tools withdrawn, ``run`` returns."""
        self._desired = "stopped"
        self._poke(end_life=True)

    def disable(self) -> None:
        """Stop the server and withdraw its tools until `enable` (state ``disabled``)."""
        if self._desired == "run":
            self._desired = "disabled"
            self._poke(end_life=True)

    def enable(self) -> None:
        """Undo `disable`: start again with a fresh restart policy (circuit closed)."""
        if self._desired == "disabled":
            self._desired = "run"
            self.policy.reset()
            self._poke()

    def restart(self, reason: str = "restart requested") -> None:
        """Stop the current process (if any) and start again at once; not a failure.

        Skips a backoff delay or an open circuit (an operator or a reload asked for it;
        the circuit is closed again). The restart policy is rebuilt if the spec's
        numbers changed. No effect while disabled or stopped (`enable` first) or while
        a lazy server is not loaded.
        """
        if self._desired != "run" or not self._loaded:
            return
        config = PolicyConfig.from_spec(self.spec, jitter=self._jitter)
        if config != self.policy.config:
            self.policy = RestartPolicy(config, rng=self._rng)
        self._restart_reason = reason
        if self.state is State.READY:
            self._feed(Event.RESTART, reason)
        self._poke(end_life=True)

    async def wait_changed(self) -> None:
        """Wait for the next state transition (or reason change, or a start's handshake done)."""
        await self._changed.wait()

    # --- internals ----------------------------------------------------------------
    def _poke(self, *, end_life: bool = False) -> None:
        """Wake the lifecycle loop; with ``end_life`` also end the running connection."""
        self._poked = True
        self._wake.set()
        if end_life and self._life is not None:
            self._life.cancel()

    async def _enter(self, event: Event, reason: str | None, *, retry_at: float | None = None) -> None:
        """Feed ``event`` to the lifecycle table, first taking the tools away from clients
        when the transition does that (so whoever sees the state sees both)."""
        if event in WITHDRAWS:
            await self._withdraw(reason or event.value)
        self._feed(event, reason, retry_at=retry_at)

    def _feed(self, event: Event, reason: str | None, *, retry_at: float | None = None) -> None:
        """The one place the state changes: the table names the next state (an event it
        has no row for raises `IllegalTransition`), and the change is published."""
        previous = self.state
        state = transition(self.name, previous, event)
        self.retry_at = retry_at
        if state is previous and reason == self.reason:
            return
        self.state = state
        self.reason = reason
        self.since = trio.current_time()
        if state is State.READY:
            self.ready_since = self.since
        self._wake_waiters()
        link = self.link
        self.bus.publish(StateChanged(self.name, state.value, previous.value, reason, retry_at, self.restarts,
                                      getattr(link, "pid", None) if link is not None else None))
        if self.meter is not None:
            self.meter.state_changed(self.name, self.since, state.value, event.value, self.last_error)
        log = logger.warning if state in WARNS else logger.info
        arrow = f"{previous.value} -> " if previous is not state else ""
        log("%s: %s%s%s", self.name, arrow, state.value, f" ({reason})" if reason else "")

    async def _sleep_until(self, deadline: float) -> None:
        """Sleep until ``deadline``, or until poked (stop, disable, enable, load, restart)."""
        if self._poked:
            self._poked = False
            return
        self._wake = trio.Event()
        with trio.move_on_at(deadline):
            await self._wake.wait()
        self._poked = False

    def _interrupted(self) -> bool:
        """Something asked the loop to do other than wait for the next start."""
        return self._desired != "run" or self._restart_reason is not None or not self._loaded

    async def run(self, *, task_status: trio.TaskStatus[Upstream] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor: run the lifecycle until stopped. Never raises for upstream failures."""
        task_status.started(self)
        try:
            await self._lifecycle()
        finally:
            self.first_attempt_done.set()
            self.link = None
            if self.state is not State.STOPPED:
                self._feed(Event.SHUTDOWN, "proxy shutting down")

    async def _lifecycle(self) -> None:
        why, cause = self.start_reason, Event.START
        while True:
            if self._desired == "stopped":
                await self._enter(Event.STOP, "stopped")
                self.first_attempt_done.set()
                return
            if self._desired == "disabled":
                self._restart_reason = None
                await self._enter(Event.DISABLE, "disabled")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                why, cause = "enabled", Event.ENABLE
                continue
            problem = self._refused or self._preflight()
            if problem is not None:
                await self._stay_misconfigured(problem)
                why, cause = "restart requested", Event.RESTART
                continue
            if not self._loaded:
                self._feed(Event.UNLOAD, "lazy: starts on first use or load_mcp")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                why, cause = "loaded on first use", Event.LOAD
                continue
            if self._restart_reason is not None:
                why, cause = self._restart_reason, Event.RESTART
                self._restart_reason = None
                if self.policy.circuit is not CircuitState.CLOSED:
                    self.policy.reset()  # an explicit restart is the operator's trial
            decision = self.policy.before_start(trio.current_time())
            if isinstance(decision, WaitUntil):
                # Woken early while open (nothing relevant changed): keep waiting.
                self._feed(Event.HOLD_OPEN, self.reason if self.state is State.CIRCUIT_OPEN
                           else self.last_error, retry_at=decision.until)
                await self._sleep_until(decision.until)
                continue
            if decision.trial:
                self._feed(Event.TRIAL, f"trial start after the circuit was open; last error: "
                                        f"{self.last_error}")
            else:
                self._feed(cause, why)
            self.note_life_start()
            failure = await self._one_life()
            self.login_interactive = self._login_asked is not None  # asked during this life: next one
            if self._login_needed and self._outcome is None:
                await self._hold_for_login()
                why, cause = ("logging in" if self.login_interactive
                              else "tokens were stored by a login"), Event.LOGIN
                if self._restart_reason is not None or self._desired != "run":
                    why, cause = "restart requested", Event.RESTART
                continue
            if failure is not None and self._outcome is None and refused_as_self(failure):
                # A wrapper (sh -c, npx, uvx) hid that this server is mcpvisor; the child said so.
                self._refused = SELF_REASON.format(how=f"started through {self.spec.command}")
                self.policy.on_stopped(trio.current_time())  # not a failure to back off from
                continue
            self.first_attempt_done.set()
            if failure is None:
                # Stopped, disabled or restarted on request: not a failure (a trial that
                # was interrupted is granted again rather than left half open).
                self.policy.on_stopped(trio.current_time())
                why, cause = "restart requested", Event.RESTART
                continue
            if self._outcome is None:
                await self._record_failure(failure)
            self._outcome = None
            assert self.retry_at is not None
            until = self.retry_at
            while trio.current_time() < until and not self._interrupted():
                await self._sleep_until(until)
            why, cause = f"restart after: {failure}", Event.RETRY

    def _preflight(self) -> str | None:
        """Why this server cannot start as configured (None: try). The checks of what would
        be spawned apply to the production opener only; an injected one decides for itself."""
        if self._open_link is not open_real_link:
            return self.spec.misconfigured or None
        return preflight(self.spec)

    async def _stay_misconfigured(self, problem: str) -> None:
        """Withdraw the tools and wait, ``misconfigured``, until poked (restart, disable, stop)."""
        self._restart_reason = None
        self.last_error = problem
        await self._enter(Event.MISCONFIGURE, problem)
        self.first_attempt_done.set()
        await self._sleep_until(math.inf)
        self._refused = None  # a restart asked for tries again: the wrapper may have changed

    async def _record_failure(self, failure: str) -> Backoff | OpenCircuit:
        """Count a failure with the policy and move to backing_off or circuit_open now
        (an open circuit withdraws the tools first, so whoever sees the state sees both)."""
        now = trio.current_time()
        self.last_error = failure
        self.restarts += 1
        outcome = self.policy.on_failure(now, failure)
        self._outcome = outcome
        if telemetry.tracer is not None:  # a short span of its own: the actor's task has no call
            if isinstance(outcome, Backoff):
                telemetry.lifecycle("mcpvisor.upstream.restart", self.name, reason=failure,
                                    restarts=self.restarts, backoff_s=round(outcome.delay, 3))
            else:
                telemetry.lifecycle("mcpvisor.breaker.open", self.name, reason=outcome.reason,
                                    restarts=self.restarts)
        if isinstance(outcome, Backoff):
            if outcome.storm is not None:
                # OTP intensity: each life worked, but restarts come too fast; say why we wait.
                failure = f"{failure}; restart storm ({outcome.storm}): backing off {outcome.delay:.2f}s"
            await self._enter(Event.BACK_OFF, failure, retry_at=now + outcome.delay)
        else:
            await self._enter(Event.OPEN_CIRCUIT, outcome.reason, retry_at=outcome.until)
        return outcome

    async def _withdraw(self, reason: str) -> None:
        """Take this server's tools away from clients (once; `UpstreamUp` brings them back).
        Returns when the router has applied it (and announced the one list_changed)."""
        if not self._withdrawn:
            self._withdrawn = True
            await self.router.submit(UpstreamDown(self.name, withdraw=True, reason=reason))

    def _on_spawn(self, link: Link) -> None:
        self._attempt = link

    async def _one_life(self) -> str | None:
        """Start, serve until the connection ends, clean up. Returns the failure reason,
        or None when the life ended on request (stop, disable, restart).

        A server that dies after becoming ready has its failure recorded (state
        backing_off or circuit_open) as soon as the link closes, before its process
        is reaped, so callers never see "ready" with a dead connection for long.
        """
        spec = self.spec
        self._attempt = None
        self._outcome = None
        if self._interrupted():
            return None  # asked to stop or restart between the decision and now
        self.starts += 1
        started = trio.current_time()
        failure: str | None = None
        with trio.CancelScope() as life:
            self._life = life
            try:
                with trio.CancelScope(deadline=started + spec.startup_timeout) as startup:
                    self._startup = startup
                    async with self._open_link(self, events=UpstreamLinkEvents(self),
                                               protocol=self._protocol(), on_spawn=self._on_spawn) as link:
                        self._attempt = link
                        self._remember_era(link)
                        self.link = link
                        self._serving_early(link)
                        lists = await self.list_all(link)
                        startup.deadline = math.inf
                        self.lists = lists
                        self._dirty.clear()
                        self.policy.on_ready(trio.current_time())
                        self._withdrawn = False
                        await self.router.submit(UpstreamUp(self.name, lists))
                        self.hooks.lists_seen(self.spec, lists, era_of(link), dict(self.hints))
                        self._browser_tried = False
                        self.starting_link = None
                        self._feed(Event.READY, f"started in {trio.current_time() - started:.2f}s, "
                                                f"{len(lists.tools)} tools")
                        self.first_attempt_done.set()
                        failure = await self.serve(link)
                        await self._record_failure(failure)
                if startup.cancelled_caught and failure is None:
                    failure = with_stderr(f"did not start within {spec.startup_timeout:g}s", self._attempt)
            except BaseException as exc:  # split in _classify; cancellation is re-raised there
                if holds(exc, NeedsLogin):
                    self._login_needed = True
                failure = classify(exc, self._attempt, self.name)
            finally:
                self._life = None
                self._startup = None
                self.starting_link = None
                self._login_running = False
                self.link = None
        if self._login_needed and self._outcome is None:
            return failure or login_message(self.name)
        if life.cancelled_caught and self._outcome is None:
            return None
        return failure

    def _serving_early(self, link: Link) -> None:
        """The handshake is done: calls waiting for this server may go now (its lists follow;
        the server is ``ready`` once they are in). Wakes the waiters."""
        self.starting_link = link
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Whoever waits in `wait_link` or `wait_changed` looks again."""
        self._changed.set()
        self._changed = trio.Event()

    def _protocol(self) -> str:
        spec = self.spec
        if spec.protocol != "auto":
            return str(spec.protocol)
        return self._era_memory.get(spec.fingerprint(), "auto")

    def _remember_era(self, link: Link) -> None:
        if self.spec.protocol == "auto" and link.protocol_version:
            self._era_memory[self.spec.fingerprint()] = era_of(link)
