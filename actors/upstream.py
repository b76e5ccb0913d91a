"""One upstream server as a supervised actor: its state machine, its connection, its calls.

Owns, for one configured server:

* the lifecycle loop: start (spawn or connect, handshake, list everything), serve,
  detect failure (crash, closed transport, missed pings, garbage on stdout, a start
  that takes too long), ask the restart policy what next (backoff, circuit open,
  half-open trial);
* the state machine of DESIGN.md::

      idle (lazy) -> starting -> ready -> backing_off -> starting ...
                                      \\-> circuit_open -> half_open -> ready | circuit_open
      disabled, stopped: until told otherwise

  every transition published as a `StateChanged` event with its reason (the exit
  status and last stderr lines, "did not start within 30s", "hung: 3 pings
  unanswered", "garbage on stdout: ...");
* calls from clients: they go straight to the live link (no mailbox hop); a call
  in flight when the server dies fails at once; a call to a restarting server waits,
  bounded by ``restartWait``; a call to an open circuit fails at once with the time
  of the next try;
* what clients see of the server's tools: kept through a brief restart (no
  list_changed churn while backing off), withdrawn once when the circuit opens or
  the server is disabled or stopped, back once it is ready again; re-listed after
  every start and after the server says a list changed.

Time comes only from trio (STYLE rule 15): under `trio.testing.MockClock` with an
in-memory link factory (``open_link=``) every backoff, circuit period, ping and
timeout runs in virtual time (tests/fakes).
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from actors import wire
from actors.core.catalog import UpstreamLists
from actors.core.policy import Backoff, CircuitState, OpenCircuit, PolicyConfig, RestartPolicy, WaitUntil
from actors.core.registration import UpstreamDown, UpstreamListed, UpstreamUp
from actors.errors import CallTimeout, ProxyError, UpstreamDied, UpstreamUnavailable
from actors.link import CallOrigin, Link, LinkEvents, open_sdk_link, open_stdio_link
from actors.messages import EventBus, StateChanged
from actors.process import Reaper, SpawnError, describe_exit

logger = logging.getLogger(__name__)

LIST_KINDS: Final = ("tools", "resources", "templates", "prompts")

RELIST_TIMEOUT_S: Final = 30.0
"""Bound on re-listing after a list_changed notification."""

OUR_STOP: Final = "stopped by mcpvisor"
"""The close reason a link gets when we end it ourselves (actors.link); never a failure text."""

WRITE_FAILED: Final = "cannot write to it"
"""How actors.link words a close after a failed write (EPIPE); the exit status is better."""

EXIT_STATUS_WAIT_S: Final = 1.0
"""After a failed write, how long to wait for the exit status to explain it."""

STDERR_TAIL_LINES: Final = 3
"""Last stderr lines quoted in a failure reason (the link keeps more, for the log)."""


class State(str, enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    READY = "ready"
    BACKING_OFF = "backing_off"
    CIRCUIT_OPEN = "circuit_open"
    HALF_OPEN = "half_open"
    DISABLED = "disabled"
    STOPPED = "stopped"


WAITABLE: Final = frozenset({State.STARTING, State.BACKING_OFF, State.HALF_OPEN, State.IDLE, State.READY})
"""States a call waits through (bounded by ``restartWait``) instead of failing at once.
READY is here for the instant between a link dying and the actor recording it."""


@dataclass(frozen=True, slots=True)
class UpstreamStatus:
    """What `mcpvisor status` and ``get-server-status`` show for one server.

    Times (``since``, ``retry_at``) are on the Trio clock; ``uptime`` is seconds.
    ``restarts`` counts failures that led to a restart (crashes, failed starts, hangs);
    ``starts`` counts every start, whatever the reason.
    """

    name: str
    transport: str
    state: str
    reason: str | None
    since: float
    uptime: float | None
    restarts: int
    circuit: str
    retry_at: float | None
    last_error: str | None
    tool_count: int
    pid: int | None
    protocol_version: str | None
    in_flight: int
    description: str | None
    starts: int = 0
    consecutive_failures: int = 0


class RouterPort(Protocol):
    """What an upstream actor needs from the router (`actors.router.Router` has it)."""

    async def send(self, message: object) -> None:
        """Queue a registration message."""

    async def submit(self, message: object) -> None:
        """Queue a registration message and wait until it is applied and announced."""


class Hooks:
    """Supervisor-level services an upstream uses (logs to clients, fallback origins)."""

    def log_message(self, server: str, params: dict[str, Any]) -> None:  # pragma: no cover - interface
        pass

    def resource_updated(self, server: str, uri: str) -> None:  # pragma: no cover - interface
        pass

    def fallback_origin(self, method: str) -> CallOrigin | None:  # pragma: no cover - interface
        return None

    def log_level(self) -> str | None:  # pragma: no cover - interface
        """The most verbose level any client asked for (``logging/setLevel``), if any."""
        return None


class OpenLink(Protocol):
    """How an actor gets a connection: spawn or connect, handshake, yield the live link.

    The link is closed and its process stopped when the context exits. ``on_spawn`` is
    called with the link as soon as it exists (before the handshake), so a failure
    during the handshake can be explained by the link's exit status and stderr.
    The default is `open_real_link`; tests pass in-memory fakes (tests/fakes).
    """

    def __call__(self, up: Upstream, *, events: LinkEvents, protocol: str,
                 on_spawn: Callable[[Link], None]) -> AbstractAsyncContextManager[Link]: ...


class _LinkEvents:
    """Adapter from a link's callbacks to its actor (runs on the link's reader task)."""

    def __init__(self, upstream: Upstream) -> None:
        self._up = upstream

    def list_changed(self, kind: str) -> None:
        self._up._mark_dirty(kind)

    def resource_updated(self, uri: str) -> None:
        self._up.hooks.resource_updated(self._up.name, uri)

    def log_message(self, params: dict[str, Any]) -> None:
        self._up.hooks.log_message(self._up.name, params)

    def fallback_origin(self, method: str) -> CallOrigin | None:
        return self._up.hooks.fallback_origin(method)

    @property
    def log_level(self) -> str | None:
        return self._up.hooks.log_level()


def docker_argv(spec: Any) -> list[str]:
    argv = ["docker", "run", "-i", "--rm", "--init"]
    for key in spec.env:
        argv += ["-e", key]
    argv += list(spec.docker_args)
    argv.append(spec.image)
    argv += list(spec.args)
    return argv


def sdk_transport(spec: Any, max_message: int) -> Any:
    """The SDK client transport for an http, sse or ws server."""
    if spec.transport == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(spec.headers))
        return streamable_http_client(spec.url, http_client=client)
    if spec.transport == "sse":
        from mcp.client.sse import sse_client

        return sse_client(spec.url, headers=dict(spec.headers))
    if spec.transport == "ws":
        from actors.ws import websocket_client

        return websocket_client(spec.url, headers=dict(spec.headers), max_message=max_message)
    raise ValueError(f"unknown transport {spec.transport!r}")


@asynccontextmanager
async def open_real_link(up: Upstream, *, events: LinkEvents, protocol: str,
                         on_spawn: Callable[[Link], None]) -> AsyncIterator[Link]:
    """The production `OpenLink`: a child process for stdio, the SDK's transports otherwise."""
    spec = up.spec
    if spec.transport in ("stdio", "stdio-docker"):
        argv = [spec.command, *spec.args] if spec.transport == "stdio" else docker_argv(spec)
        async with open_stdio_link(
            up.name, argv, env=spec.env, cwd=spec.cwd, events=events, reaper=up.reaper,
            protocol=protocol, max_message=up.max_message, shutdown_grace=spec.shutdown_grace,
            on_spawn=on_spawn,
        ) as link:
            yield link
        return
    async with open_sdk_link(up.name, sdk_transport(spec, up.max_message), events=events,
                             protocol=protocol) as sdk_link:
        on_spawn(sdk_link)
        yield sdk_link


class Upstream:
    """Actor and handle for one server. Start with ``await nursery.start(up.run)``.

    The public methods (`request`, `wait_link`, `status`, `load`, `stop`, `disable`,
    `enable`, `restart`) may be called from any task; the state machine itself runs
    only in `run`.
    """

    def __init__(
        self,
        spec: Any,
        *,
        router: RouterPort,
        events: EventBus,
        hooks: Hooks,
        reaper: Reaper | None,
        max_message: int,
        rng: random.Random | None = None,
        era_memory: dict[str, str] | None = None,
        open_link: OpenLink | None = None,
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
        self.policy = RestartPolicy(PolicyConfig.from_spec(spec), rng=rng)
        self.state = State.IDLE if spec.lazy else State.STARTING
        self.reason: str | None = None
        self.since = trio.current_time()
        self.ready_since: float | None = None
        self.retry_at: float | None = None
        """When the next start is due: while backing off, and while the circuit is open."""
        self.restarts = 0
        self.starts = 0
        self.last_error: str | None = None
        self.link: Link | None = None
        self.lists = UpstreamLists()
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._poked = False
        self._dirty: set[str] = set()
        self._dirty_event = trio.Event()
        self._listen_uris: set[str] = set()
        self._listen_changed = trio.Event()
        self._desired = "run"  # run | stopped | disabled
        self._loaded = not spec.lazy
        self._restart_reason: str | None = None
        self._life: trio.CancelScope | None = None
        self._attempt: Link | None = None
        self._outcome: Backoff | OpenCircuit | None = None
        self._withdrawn = False
        self._era_memory = era_memory if era_memory is not None else {}
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
            state=self.state.value,
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
            in_flight=link.in_flight() if link is not None else 0,
            description=self.spec.description,
            starts=self.starts,
            consecutive_failures=stats.consecutive_failures,
        )

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        origin: CallOrigin | None = None,
        retry_safe: bool = False,
    ) -> dict[str, Any]:
        """Forward a request to this server, waiting (bounded) through a restart.

        A request in flight when the server dies fails at once (never at the timeout);
        it is retried once on the new process only when ``retry_safe`` (the tool is
        annotated readOnlyHint or idempotentHint).

        Raises:
            UpstreamUnavailable: down for longer than ``restartWait``, circuit open,
                disabled or stopped (the message names the server, why, and when the
                next try is).
            UpstreamDied, CallTimeout, UpstreamError: see `Link.request`.
        """
        spec = self.spec
        attempts = 2 if retry_safe else 1
        for attempt in range(attempts):
            link = await self.wait_link()
            try:
                return await link.request(method, params, origin=origin, timeout=spec.timeout,
                                          max_time=spec.max_call_time)
            except UpstreamDied:
                if attempt + 1 == attempts:
                    raise
                logger.info("%s died under a %s call; retrying once (the tool is retry-safe)",
                            self.name, method)
            except CallTimeout as exc:
                self.last_error = str(exc)
                raise
        raise AssertionError("unreachable")

    async def wait_link(self) -> Link:
        """The live link, waiting up to ``restartWait`` while the server (re)starts.

        Fails at once (`UpstreamUnavailable`) when the circuit is open, the server is
        disabled or stopped, or it is backing off until after the wait would end.
        """
        link = self.link
        if self.state is State.READY and link is not None and link.close_reason is None:
            return link
        if self.state is State.IDLE:
            self.load()
        deadline = trio.current_time() + self.spec.restart_wait
        while True:
            link = self.link
            state = self.state
            if state is State.READY and link is not None and link.close_reason is None:
                return link
            if state not in WAITABLE:
                raise self.unavailable()
            if state is State.BACKING_OFF and self.retry_at is not None and self.retry_at > deadline:
                raise self.unavailable()  # it cannot be back in time: say when it will try
            changed = self._changed
            with trio.move_on_at(deadline):
                await changed.wait()
                continue
            raise self.unavailable(waited=self.spec.restart_wait)

    def unavailable(self, waited: float | None = None) -> UpstreamUnavailable:
        """The error a call gets while this server cannot serve it."""
        state = self.state
        reason = self.reason or self.last_error
        if waited is not None:
            reason = f"{reason}; not back after {waited:g}s" if reason else f"not ready after {waited:g}s"
        retry_at = self.retry_at if state in (State.CIRCUIT_OPEN, State.BACKING_OFF) else None
        return UpstreamUnavailable(self.name, state.value, reason, retry_at)

    def load(self) -> None:
        """Start a lazy server (idempotent)."""
        if not self._loaded:
            self._loaded = True
            self._poke()

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
        config = PolicyConfig.from_spec(self.spec)
        if config != _policy_config(self.policy):
            self.policy = RestartPolicy(config, rng=self._rng)
        self._restart_reason = reason
        if self.state is State.READY:
            self._set_state(State.STARTING, reason)
        self._poke(end_life=True)

    async def wait_changed(self) -> None:
        """Wait for the next state transition (or reason change)."""
        await self._changed.wait()

    # --- internals ----------------------------------------------------------------
    def _poke(self, *, end_life: bool = False) -> None:
        """Wake the lifecycle loop; with ``end_life`` also end the running connection."""
        self._poked = True
        self._wake.set()
        if end_life and self._life is not None:
            self._life.cancel()

    def _mark_dirty(self, kind: str) -> None:
        self._dirty.add(kind)
        if kind == "resources":
            self._dirty.add("templates")
        self._dirty_event.set()

    def _set_state(self, state: State, reason: str | None = None, *, retry_at: float | None = None) -> None:
        previous = self.state
        self.retry_at = retry_at
        if state is previous and reason == self.reason:
            return
        self.state = state
        self.reason = reason
        self.since = trio.current_time()
        if state is State.READY:
            self.ready_since = self.since
        self._changed.set()
        self._changed = trio.Event()
        link = self.link
        self.bus.publish(StateChanged(self.name, state.value, previous.value, reason, retry_at, self.restarts,
                                      getattr(link, "pid", None) if link is not None else None))
        log = logger.warning if state in (State.BACKING_OFF, State.CIRCUIT_OPEN) else logger.info
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
        return self._desired != "run" or self._restart_reason is not None

    async def run(self, *, task_status: trio.TaskStatus[Upstream] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor: run the lifecycle until stopped. Never raises for upstream failures."""
        task_status.started(self)
        try:
            await self._lifecycle()
        finally:
            self.first_attempt_done.set()
            self.link = None
            if self.state is not State.STOPPED:
                self._set_state(State.STOPPED, "proxy shutting down")

    async def _lifecycle(self) -> None:
        why = "first start"
        while True:
            if self._desired == "stopped":
                await self._withdraw("stopped")
                self._set_state(State.STOPPED, "stopped")
                self.first_attempt_done.set()
                return
            if self._desired == "disabled":
                self._restart_reason = None
                await self._withdraw("disabled")
                self._set_state(State.DISABLED, "disabled")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                why = "enabled"
                continue
            if not self._loaded:
                self._set_state(State.IDLE, "lazy: starts on first use")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                why = "loaded on first use"
                continue
            if self._restart_reason is not None:
                why, self._restart_reason = self._restart_reason, None
                if self.policy.circuit is not CircuitState.CLOSED:
                    self.policy.reset()  # an explicit restart is the operator's trial
            decision = self.policy.before_start(trio.current_time())
            if isinstance(decision, WaitUntil):
                # Woken early while open (nothing relevant changed): keep waiting.
                self._set_state(State.CIRCUIT_OPEN, self.reason if self.state is State.CIRCUIT_OPEN
                                else self.last_error, retry_at=decision.until)
                await self._sleep_until(decision.until)
                continue
            if decision.trial:
                self._set_state(State.HALF_OPEN, f"trial start after the circuit was open; last error: "
                                                 f"{self.last_error}")
            else:
                self._set_state(State.STARTING, why)
            failure = await self._one_life()
            self.first_attempt_done.set()
            if failure is None:
                # Stopped, disabled or restarted on request: not a failure (a trial that
                # was interrupted is granted again rather than left half open).
                self.policy.on_stopped(trio.current_time())
                why = "restart requested"
                continue
            if self._outcome is None:
                await self._record_failure(failure)
            self._outcome = None
            assert self.retry_at is not None
            until = self.retry_at
            while trio.current_time() < until and not self._interrupted():
                await self._sleep_until(until)
            why = f"restart after: {failure}"

    async def _record_failure(self, failure: str) -> Backoff | OpenCircuit:
        """Count a failure with the policy and move to backing_off or circuit_open now
        (an open circuit withdraws the tools first, so whoever sees the state sees both)."""
        now = trio.current_time()
        self.last_error = failure
        self.restarts += 1
        outcome = self.policy.on_failure(now, failure)
        self._outcome = outcome
        if isinstance(outcome, Backoff):
            self._set_state(State.BACKING_OFF, failure, retry_at=now + outcome.delay)
        else:
            await self._withdraw(outcome.reason)
            self._set_state(State.CIRCUIT_OPEN, outcome.reason, retry_at=outcome.until)
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
                    async with self._open_link(self, events=_LinkEvents(self), protocol=self._protocol(),
                                               on_spawn=self._on_spawn) as link:
                        self._attempt = link
                        self._remember_era(link)
                        self.link = link
                        lists = await self._list_all(link)
                        startup.deadline = math.inf
                        self.lists = lists
                        self._dirty.clear()
                        self.policy.on_ready(trio.current_time())
                        self._withdrawn = False
                        await self.router.submit(UpstreamUp(self.name, lists))
                        self._set_state(State.READY, f"started in {trio.current_time() - started:.2f}s, "
                                                     f"{len(lists.tools)} tools")
                        self.first_attempt_done.set()
                        failure = await self._serve(link)
                        await self._record_failure(failure)
                if startup.cancelled_caught and failure is None:
                    failure = self._with_stderr(f"did not start within {spec.startup_timeout:g}s")
            except BaseException as exc:  # split in _classify; cancellation is re-raised there
                failure = self._classify(exc)
            finally:
                self._life = None
                self.link = None
        if life.cancelled_caught and self._outcome is None:
            return None
        return failure

    def _classify(self, exc: BaseException) -> str:
        """The failure text for an exception out of a start or a life; re-raises
        cancellation and anything that is not an `Exception` (STYLE rule 14)."""
        if isinstance(exc, BaseExceptionGroup):
            cancelled, rest = exc.split(trio.Cancelled)
            if rest is None:
                raise exc
            if rest.split(Exception)[1] is not None:
                raise exc  # KeyboardInterrupt, SystemExit: not ours to swallow
            if cancelled is not None:
                # Being cancelled wins (the text is logged, not counted).
                logger.debug("%s: failure during cancellation: %s", self.name, _describe_exception(rest))
                raise cancelled from None
            leaf = _first_leaf(rest)
        elif isinstance(exc, Exception):
            leaf = exc
        else:
            raise exc
        text = self._failure_text(leaf)
        logger.debug("%s: start or connection failed: %s", self.name, text, exc_info=exc)
        return text

    def _failure_text(self, leaf: BaseException) -> str:
        """Why a start or a connection failed, as precisely as the link can tell."""
        link = self._attempt
        closed = link.close_reason if link is not None else None
        if closed and closed.startswith(WRITE_FAILED):
            return self._exit_text() or closed  # EPIPE: the exit status says why
        if closed and closed != OUR_STOP:
            return closed
        if isinstance(leaf, SpawnError):
            return str(leaf)
        connection_lost = isinstance(leaf, UpstreamDied | anyio.EndOfStream | anyio.BrokenResourceError
                                     | anyio.ClosedResourceError | trio.BrokenResourceError) or (
            isinstance(leaf, MCPError) and leaf.error.code == wire.CONNECTION_CLOSED)
        if connection_lost:
            exit_text = self._exit_text()
            if exit_text is not None:
                return exit_text
        if isinstance(leaf, UpstreamDied):
            return leaf.reason
        if isinstance(leaf, MCPError):
            return self._with_stderr(f"handshake failed: {leaf.error.message}")
        if isinstance(leaf, ProxyError):
            return leaf.message
        return self._with_stderr(_describe_exception(leaf))

    def _exit_text(self) -> str | None:
        """"exited with status 2: <last stderr lines>" once the attempt's process is reaped."""
        link = self._attempt
        proc = getattr(link, "proc", None)
        status = getattr(proc, "returncode", None)
        if status is None:
            return None
        return self._with_stderr(describe_exit(status))

    def _with_stderr(self, text: str) -> str:
        stderr = getattr(self._attempt, "stderr", None)
        tail = stderr.tail(STDERR_TAIL_LINES) if stderr is not None else ""
        return f"{text}: {tail}" if tail else text

    def _protocol(self) -> str:
        spec = self.spec
        if spec.protocol != "auto":
            return str(spec.protocol)
        return self._era_memory.get(spec.fingerprint(), "auto")

    def _remember_era(self, link: Link) -> None:
        if self.spec.protocol == "auto" and link.protocol_version:
            self._era_memory[self.spec.fingerprint()] = "legacy" if not link.modern else link.protocol_version

    async def _list_all(self, link: Link) -> UpstreamLists:
        lists = UpstreamLists()
        for kind in LIST_KINDS:
            lists = lists.replace(kind, await self._list(link, kind))
        return lists

    async def _list(self, link: Link, kind: str) -> tuple[dict[str, Any], ...]:
        session = link.session
        caps = link.capabilities
        assert session is not None
        if caps is None:
            return ()
        if kind == "tools" and caps.tools is None:
            return ()
        if kind in ("resources", "templates") and caps.resources is None:
            return ()
        if kind == "prompts" and caps.prompts is None:
            return ()
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _page in range(1000):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                if kind == "tools":
                    result: Any = await session.list_tools(params=params)
                    page = result.tools
                elif kind == "resources":
                    result = await session.list_resources(params=params)
                    page = result.resources
                elif kind == "templates":
                    result = await session.list_resource_templates(params=params)
                    page = result.resource_templates
                else:
                    result = await session.list_prompts(params=params)
                    page = result.prompts
            except MCPError as exc:
                if exc.error.code == wire.METHOD_NOT_FOUND:
                    return ()
                raise
            items.extend(x.model_dump(by_alias=True, mode="json", exclude_none=True) for x in page)
            cursor = result.next_cursor
            if not cursor:
                break
        return tuple(items)

    async def _serve(self, link: Link) -> str:
        """Run health pings and re-listing until the link ends; return why it ended."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._relister, link)
            if link.modern:
                nursery.start_soon(self._listen, link)
            if not link.modern and self.spec.health_check_interval > 0:
                nursery.start_soon(self._pinger, link)
            await link.closed.wait()
            nursery.cancel_scope.cancel()
        reason = link.close_reason or "connection closed"
        proc = getattr(link, "proc", None)
        if reason.startswith(WRITE_FAILED) and proc is not None:
            # A write hit a closed pipe: the process is exiting; its status is the reason.
            with trio.move_on_after(EXIT_STATUS_WAIT_S):
                await proc.wait()
            reason = self._exit_text() or reason
        return reason

    async def _pinger(self, link: Link) -> None:
        """Handshake-era liveness: ``maxMissedPings`` unanswered pings in a row = hung.

        MCP ping: "with no answer in time, the sender MAY treat the connection as stale";
        the link is closed, which fails its pending calls at once and restarts the server.
        """
        spec = self.spec
        missed = 0
        while True:
            await trio.sleep(spec.health_check_interval)
            try:
                await link.request("ping", None, timeout=spec.health_check_timeout,
                                   max_time=spec.health_check_timeout)
                missed = 0
            except CallTimeout:
                missed += 1
                logger.warning("%s: ping %d/%d unanswered", self.name, missed, spec.max_missed_pings)
                if missed >= spec.max_missed_pings:
                    link.close(f"hung: {missed} pings unanswered within {spec.health_check_timeout:g}s")
                    return
            except ProxyError:
                return  # the link is closing anyway, or the server does not do ping

    def listen_to(self, uri: str, wanted: bool) -> None:
        """Follow (or stop following) updates of ``uri`` on a 2026-07-28 upstream, where
        ``resources/subscribe`` is gone and updates ride the ``subscriptions/listen`` stream."""
        if wanted == (uri in self._listen_uris):
            return
        if wanted:
            self._listen_uris.add(uri)
        else:
            self._listen_uris.discard(uri)
        self._listen_changed.set()

    async def _listen(self, link: Link) -> None:
        """2026-07-28 upstreams send list changes only on a ``subscriptions/listen`` stream
        (SEP-2575): hold one open for the life of the link, reopened when the set of
        followed resources changes. Its notifications arrive through the link's reader."""
        while True:
            changed = self._listen_changed = trio.Event()
            wanted: dict[str, Any] = {"toolsListChanged": True, "promptsListChanged": True,
                                      "resourcesListChanged": True}
            if self._listen_uris:
                wanted["resourceSubscriptions"] = sorted(self._listen_uris)
            async with trio.open_nursery() as nursery:
                async def reopen_on_change() -> None:
                    await changed.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(reopen_on_change)
                try:
                    await link.request("subscriptions/listen", {"notifications": wanted},
                                       timeout=math.inf, max_time=math.inf)
                except ProxyError as exc:
                    if isinstance(exc, UpstreamDied):
                        return
                    logger.info("%s: no subscriptions/listen stream (%s); list changes will not be seen",
                                self.name, exc)
                    return
                nursery.cancel_scope.cancel()
            if not changed.is_set():
                await changed.wait()  # the server ended the stream on purpose: wait for a reason to reopen

    async def _relister(self, link: Link) -> None:
        while True:
            await self._dirty_event.wait()
            self._dirty_event = trio.Event()
            kinds = [k for k in LIST_KINDS if k in self._dirty]
            self._dirty.clear()
            for kind in kinds:
                try:
                    with trio.fail_after(RELIST_TIMEOUT_S):
                        items = await self._list(link, kind)
                except (MCPError, ProxyError, trio.TooSlowError) as exc:
                    logger.warning("%s: could not re-list %s: %s", self.name, kind, exc)
                    continue
                self.lists = self.lists.replace(kind, items)
                await self.router.send(UpstreamListed(self.name, kind, items))


def _policy_config(policy: RestartPolicy) -> PolicyConfig:
    return policy._config


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception in a (nested) group that is not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if not isinstance(inner, trio.Cancelled):
                return _first_leaf(inner)
    return exc


def _describe_exception(exc: BaseException) -> str:
    leaf = _first_leaf(exc)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__
