"""One upstream server as a supervised actor: its state machine, its connection, its calls.

Owns, for one configured server:

* the lifecycle loop: start (spawn or connect, handshake, list everything), serve,
  detect failure (crash, closed transport, missed pings, a startup that takes too
  long), ask the restart policy what next (backoff, circuit open, half-open trial);
* the state machine of DESIGN.md (starting, ready, backing_off, circuit_open,
  half_open, disabled, stopped; plus idle for a lazy server not loaded yet), each
  transition published as an event with its reason;
* calls from clients: they go straight to the live link (no mailbox hop); a call
  to a restarting server waits, bounded, for it to come back; a call to an open
  circuit fails at once with the time of the next try;
* re-listing after the server says a list changed, and after every restart.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from actors.catalog import UpstreamLists
from actors.errors import CallTimeout, ProxyError, UpstreamDied, UpstreamUnavailable
from actors.link import CallOrigin, Link, open_sdk_link, open_stdio_link
from actors.messages import EventBus, StateChanged, UpstreamDown, UpstreamListed, UpstreamUp
from actors.process import Reaper, SpawnError
from supervisor.policy import Backoff, OpenCircuit, PolicyConfig, RestartPolicy, WaitUntil

logger = logging.getLogger(__name__)

LIST_KINDS: Final = ("tools", "resources", "templates", "prompts")

RELIST_TIMEOUT_S: Final = 30.0
"""Bound on re-listing after a list_changed notification."""


class State(str, enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    READY = "ready"
    BACKING_OFF = "backing_off"
    CIRCUIT_OPEN = "circuit_open"
    HALF_OPEN = "half_open"
    DISABLED = "disabled"
    STOPPED = "stopped"


WAITABLE: Final = frozenset({State.STARTING, State.BACKING_OFF, State.HALF_OPEN, State.IDLE})
"""States a call waits through (bounded by ``restartWait``) instead of failing at once."""


@dataclass(frozen=True, slots=True)
class UpstreamStatus:
    """What `mcpvisor status` and ``get-server-status`` show for one server."""

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


class RouterPort:
    """What an upstream actor needs from the router: a way to send it messages."""

    async def send(self, message: object) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    async def submit(self, message: object) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class Hooks:
    """Supervisor-level services an upstream uses (logs to clients, fallback origins)."""

    def log_message(self, server: str, params: dict[str, Any]) -> None:  # pragma: no cover - interface
        pass

    def resource_updated(self, server: str, uri: str) -> None:  # pragma: no cover - interface
        pass

    def fallback_origin(self, method: str) -> CallOrigin | None:  # pragma: no cover - interface
        return None


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


def docker_argv(spec: Any) -> list[str]:
    argv = ["docker", "run", "-i", "--rm", "--init"]
    for key in spec.env:
        argv += ["-e", key]
    argv += list(spec.docker_args)
    argv.append(spec.image)
    argv += list(spec.args)
    return argv


class Upstream:
    """Actor and handle for one server. Start with ``await nursery.start(up.run)``."""

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
    ) -> None:
        self.spec = spec
        self.name: str = spec.name
        self.router = router
        self.bus = events
        self.hooks = hooks
        self.reaper = reaper
        self.max_message = max_message
        self.policy = RestartPolicy(PolicyConfig.from_spec(spec), rng=rng)
        self.state = State.IDLE if spec.lazy else State.STARTING
        self.reason: str | None = None
        self.since = trio.current_time()
        self.ready_since: float | None = None
        self.retry_at: float | None = None
        self.restarts = 0
        self.starts = 0
        self.last_error: str | None = None
        self.link: Link | None = None
        self.lists = UpstreamLists()
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._dirty: set[str] = set()
        self._dirty_event = trio.Event()
        self._desired = "run"  # run | stopped | disabled
        self._loaded = not spec.lazy
        self._life: trio.CancelScope | None = None
        self._withdrawn = False
        self._era_memory = era_memory if era_memory is not None else {}
        self.first_attempt_done = trio.Event()

    # --- public -------------------------------------------------------------------
    def status(self) -> UpstreamStatus:
        now = trio.current_time()
        stats = self.policy.statistics(now)
        link = self.link
        return UpstreamStatus(
            name=self.name,
            transport=self.spec.transport,
            state=self.state.value,
            reason=self.reason,
            since=self.since,
            uptime=(now - self.ready_since) if self.state is State.READY and self.ready_since is not None else None,
            restarts=self.restarts,
            circuit=stats.circuit.value,
            retry_at=stats.retry_at,
            last_error=self.last_error,
            tool_count=len(self.lists.tools),
            pid=getattr(link, "pid", None) if link is not None else None,
            protocol_version=link.protocol_version if link is not None else None,
            in_flight=link.in_flight() if link is not None else 0,
            description=self.spec.description,
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

        A request in flight when the server dies fails at once; it is retried once on
        the new process only when ``retry_safe`` (the tool is read-only or idempotent).

        Raises:
            UpstreamUnavailable: down for longer than ``restartWait``, circuit open, disabled.
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
                logger.info("%s died under a %s call; retrying once (the tool is retry-safe)", self.name, method)
            except CallTimeout as exc:
                self._note_error(str(exc))
                raise
        raise AssertionError("unreachable")

    async def wait_link(self) -> Link:
        """The live link, waiting up to ``restartWait`` while the server (re)starts."""
        if self.state is State.READY and self.link is not None and self.link.close_reason is None:
            return self.link
        if self.state is State.IDLE and not self._loaded:
            self.load()
        deadline = trio.current_time() + self.spec.restart_wait
        while True:
            link = self.link
            if self.state is State.READY and link is not None and link.close_reason is None:
                return link
            if self.state not in WAITABLE or (self.state is State.READY and link is None):
                raise self.unavailable()
            changed = self._changed
            with trio.move_on_at(deadline):
                await changed.wait()
                continue
            raise self.unavailable(waited=self.spec.restart_wait)

    def unavailable(self, waited: float | None = None) -> UpstreamUnavailable:
        reason = self.reason or self.last_error
        if waited is not None and self.state in WAITABLE:
            reason = f"{reason}; not back after {waited:g}s" if reason else f"not ready after {waited:g}s"
        retry_at = self.retry_at if self.state is State.CIRCUIT_OPEN else None
        return UpstreamUnavailable(self.name, self.state.value, reason, retry_at)

    def load(self) -> None:
        """Start a lazy server (idempotent)."""
        if not self._loaded:
            self._loaded = True
            self._poke()

    def stop(self) -> None:
        """Stop for good (the actor's ``run`` returns)."""
        self._desired = "stopped"
        self._poke()

    def disable(self) -> None:
        self._desired = "disabled"
        self._poke()

    def enable(self) -> None:
        if self._desired == "disabled":
            self._desired = "run"
            self.policy.reset()
            self._poke()

    def restart(self, reason: str = "restart requested") -> None:
        """Stop the current process and start again at once (not counted as a failure)."""
        self._restart_reason = reason
        if self._life is not None:
            self._life.cancel()

    # --- internals ----------------------------------------------------------------
    def _poke(self) -> None:
        self._wake.set()
        if self._life is not None and self._desired != "run":
            self._life.cancel()

    def _mark_dirty(self, kind: str) -> None:
        self._dirty.add(kind)
        if kind == "resources":
            self._dirty.add("templates")
        self._dirty_event.set()

    def _note_error(self, text: str) -> None:
        self.last_error = text

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
        log("%s: %s -> %s%s", self.name, previous.value, state.value, f" ({reason})" if reason else "")

    async def _sleep_until(self, deadline: float) -> None:
        """Sleep, but wake early when told to stop/disable/load."""
        self._wake = trio.Event()
        with trio.move_on_at(deadline):
            await self._wake.wait()

    async def run(self, *, task_status: trio.TaskStatus[Upstream] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor: run the lifecycle until stopped. Never raises for upstream failures."""
        task_status.started(self)
        try:
            await self._lifecycle()
        finally:
            self.first_attempt_done.set()
            if self.state is not State.STOPPED:
                with trio.CancelScope(shield=True):
                    self._set_state(State.STOPPED, "proxy shutting down")

    async def _lifecycle(self) -> None:
        while True:
            if self._desired == "stopped":
                self._set_state(State.STOPPED, "stopped")
                await self._withdraw("stopped")
                return
            if self._desired == "disabled":
                self._set_state(State.DISABLED, "disabled")
                await self._withdraw("disabled")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                continue
            if not self._loaded:
                self._set_state(State.IDLE, "lazy: starts on first use")
                self.first_attempt_done.set()
                await self._sleep_until(math.inf)
                continue
            now = trio.current_time()
            decision = self.policy.before_start(now)
            if isinstance(decision, WaitUntil):
                self._set_state(State.CIRCUIT_OPEN, decision.reason, retry_at=decision.until)
                await self._sleep_until(decision.until)
                continue
            self._set_state(State.HALF_OPEN if decision.trial else State.STARTING,
                            "trial start" if decision.trial else None)
            failure = await self._one_life()
            self.first_attempt_done.set()
            if failure is None:
                # Stopped, disabled or restarted on request: not a failure (a trial that was
                # interrupted is granted again rather than left half open).
                self.policy.on_stopped(trio.current_time())
                continue
            self.last_error = failure
            self.restarts += 1
            outcome = self.policy.on_failure(trio.current_time(), failure)
            if isinstance(outcome, Backoff):
                self._set_state(State.BACKING_OFF, failure, retry_at=trio.current_time() + outcome.delay)
                await self._sleep_until(trio.current_time() + outcome.delay)
            elif isinstance(outcome, OpenCircuit):
                self._set_state(State.CIRCUIT_OPEN, failure, retry_at=outcome.until)
                await self._withdraw(failure)
                await self._sleep_until(outcome.until)

    async def _withdraw(self, reason: str) -> None:
        if not self._withdrawn:
            self._withdrawn = True
            await self.router.send(UpstreamDown(self.name, withdraw=True, reason=reason))

    async def _one_life(self) -> str | None:
        """Start, serve until the connection ends. Returns the failure reason, or None
        when the life ended on request (stop, disable, restart)."""
        self._restart_reason: str | None = None
        spec = self.spec
        self.starts += 1
        with trio.CancelScope() as life:
            self._life = life
            try:
                with trio.CancelScope(deadline=trio.current_time() + spec.startup_timeout) as startup:
                    async with self._open_link() as link:
                        self.link = link
                        lists = await self._list_all(link)
                        startup.deadline = math.inf
                        self.lists = lists
                        self._dirty.clear()
                        self.policy.on_ready(trio.current_time())
                        self._withdrawn = False
                        await self.router.submit(UpstreamUp(self.name, lists))
                        self._set_state(State.READY)
                        self.first_attempt_done.set()
                        reason = await self._serve(link)
                        return reason
                if startup.cancelled_caught:
                    return f"did not start within {spec.startup_timeout:g}s"
            except SpawnError as exc:
                return str(exc)
            except UpstreamDied as exc:
                return exc.reason
            except CallTimeout as exc:
                return str(exc)
            except MCPError as exc:
                return f"handshake failed: {exc.error.message}"
            except ProxyError as exc:
                return exc.message
            except (OSError, RuntimeError, ValueError) as exc:
                return f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a transport library's own error (httpx2, websocket)
                if not _is_cancel_group(exc):
                    logger.debug("%s: connection failed", self.name, exc_info=True)
                    return _describe_exception(exc)
                raise
            finally:
                self._life = None
                self.link = None
        if life.cancelled_caught:
            if self._desired == "run" and self._restart_reason is None and self._loaded:
                return None
            if self._restart_reason is not None:
                self._set_state(State.STARTING, self._restart_reason)
            return None
        return None

    @asynccontextmanager
    async def _open_link(self) -> AsyncIterator[Link]:
        spec = self.spec
        events = _LinkEvents(self)
        protocol = spec.protocol if spec.protocol != "auto" else self._era_memory.get(spec.fingerprint(), "auto")
        if spec.transport in ("stdio", "stdio-docker"):
            argv = [spec.command, *spec.args] if spec.transport == "stdio" else docker_argv(spec)
            async with open_stdio_link(
                self.name, argv, env=spec.env, cwd=spec.cwd, events=events, reaper=self.reaper,
                protocol=protocol, max_message=self.max_message, shutdown_grace=spec.shutdown_grace,
            ) as link:
                self._remember_era(link)
                yield link
            return
        transport = self._sdk_transport()
        async with open_sdk_link(self.name, transport, events=events, protocol=protocol) as sdk_link:
            self._remember_era(sdk_link)
            yield sdk_link

    def _remember_era(self, link: Link) -> None:
        if self.spec.protocol == "auto" and link.protocol_version:
            self._era_memory[self.spec.fingerprint()] = "legacy" if not link.modern else link.protocol_version

    def _sdk_transport(self) -> Any:
        spec = self.spec
        if spec.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            return streamable_http_client(spec.url, http_client=create_mcp_http_client(headers=dict(spec.headers)))
        if spec.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(spec.url, headers=dict(spec.headers))
        if spec.transport == "ws":
            from actors.ws import websocket_client

            return websocket_client(spec.url, headers=dict(spec.headers), max_message=self.max_message)
        raise ValueError(f"unknown transport {spec.transport!r}")

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
                if exc.error.code == -32601:
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
            if not link.modern and self.spec.health_check_interval > 0:
                nursery.start_soon(self._pinger, link)
            await link.closed.wait()
            nursery.cancel_scope.cancel()
        return link.close_reason or "connection closed"

    async def _pinger(self, link: Link) -> None:
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
                    link._close(f"hung: {missed} pings unanswered within {spec.health_check_timeout:g}s")
                    return
            except ProxyError:
                return  # the link is closing anyway

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


def _is_cancel_group(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancel_group(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _describe_exception(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        if inner:
            return _describe_exception(inner[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


RestartPolicyFactory = Callable[[Any], RestartPolicy]
