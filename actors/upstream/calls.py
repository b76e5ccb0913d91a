"""An upstream actor's calls: forwarded straight to the live link, waiting (bounded) through a restart.

`UpstreamCalls` is a part of `mcpvisor.actors.upstream.actor.Upstream` (a base class, as
`mcpvisor.actors.upstream.tasks.LinkTasks` is): a call goes to the live link with no
mailbox hop; one in flight when the server dies fails at once (retried once on the new
process when the tool is retry-safe); one to a restarting server waits, bounded by
``restartWait``; one to an open circuit fails at once with the time of the next try.
Each is counted for the availability figure and, with metrics on, timed (``meter``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from mcpvisor.actors import telemetry
from mcpvisor.actors.errors import CallTimeout, UpstreamDied, UpstreamError, UpstreamUnavailable
from mcpvisor.actors.upstream.status import USEFUL_METHODS, WAITABLE, State, UpstreamMeter

if TYPE_CHECKING:
    from mcpvisor.actors.core.policy import RestartPolicy
    from mcpvisor.actors.core.spec import ServerSpec
    from mcpvisor.actors.link import CallOrigin, Link

logger = logging.getLogger(__name__)


class UpstreamCalls:
    """The call path of an upstream actor (mixed into `Upstream`)."""

    name: str
    spec: ServerSpec
    policy: RestartPolicy
    state: State
    reason: str | None
    retry_at: float | None
    last_error: str | None
    link: Link | None
    starting_link: Link | None
    calls: int
    answered: int
    meter: UpstreamMeter | None
    _changed: trio.Event
    _login_running: bool

    if TYPE_CHECKING:  # defined by `Upstream`
        def load(self) -> None: ...

    def note_answer(self, ok: bool) -> None:
        """A client call was answered by the live server: ``ok`` for a result, False for
        a JSON-RPC error. A result marks the running life healthy (issue 18), so its
        crash will not count toward the circuit breaker."""
        self.answered += 1
        if ok and not self.policy.healthy:  # once per life: this runs on every answered call
            self.policy.on_healthy(trio.current_time())

    def note_call(self) -> None:
        """A client call is on its way to this server (for the availability figure)."""
        self.calls += 1

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
        meter = self.meter
        if meter is None:  # metrics off: one attribute check
            return await self._request(method, params, origin=origin, retry_safe=retry_safe)
        started = trio.current_time()
        tool = str(params.get("name", "")) if method == "tools/call" and params is not None else ""
        try:
            result = await self._request(method, params, origin=origin, retry_safe=retry_safe)
        except BaseException as exc:
            meter.request_done(self.name, method, tool, started, trio.current_time(), exc)
            raise
        meter.request_done(self.name, method, tool, started, trio.current_time(), None, result)
        return result

    async def _request(self, method: str, params: Mapping[str, Any] | None, *, origin: CallOrigin | None,
                       retry_safe: bool) -> dict[str, Any]:
        spec = self.spec
        useful = method in USEFUL_METHODS
        if useful:
            self.note_call()
        attempts = 2 if retry_safe else 1
        for attempt in range(attempts):
            link = await self.wait_link(early=True)
            try:
                result = await link.request(method, params, origin=origin, timeout=spec.timeout,
                                            max_time=spec.max_call_time,
                                            resend_safe=retry_safe or method != "tools/call")
            except UpstreamError:
                if useful:
                    self.note_answer(ok=False)
                raise
            except UpstreamDied:
                if attempt + 1 == attempts:
                    raise
                logger.info("%s: died during %s; retrying once on the new process (the tool is retry-safe)",
                            self.name, method)
                if telemetry.tracer is not None:
                    telemetry.lifecycle("mcpvisor.upstream.retry", self.name, method=method)
                continue
            except CallTimeout as exc:
                self.last_error = str(exc)
                raise
            if useful:
                self.note_answer(ok=True)
            return result
        raise AssertionError("unreachable")

    async def wait_link(self, *, early: bool = False) -> Link:
        """The live link, waiting up to ``restartWait`` while the server (re)starts.

        With ``early`` (a call to send), a starting server's link is returned as soon as
        its handshake is done, before its lists are in (`starting_link`); without, only a
        ready server's (what needs its tools listed waits for them).

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
            if early and (link := self.starting_link) is not None and link.close_reason is None:
                return link
            if state not in WAITABLE and not (state is State.NEEDS_LOGIN and self._login_running):
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
