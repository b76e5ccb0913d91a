"""One call on the lean tool-call path (`mcpvisor.actors.fronts.fastpath`), as the upstream link sees it.

Owns, for one fast-path ``tools/call``:

* the answer: written by the upstream's reader task straight to the front
  connection's writer, with the client's id back in the envelope and the result
  fitted to the client's era; no task waits per call;
* the journal entry of the call (`FastCall.note`), the retry of a retry-safe tool
  whose server died (once, the slow way), and the cancel sent upstream;
* the mid-call traffic: progress, log messages and the upstream's requests to the
  client (`CallOrigin`);
* the bridge for a 2026-07-28 client on a handshake-era upstream: the upstream's
  questions answer the client's leg as ``input_required`` and the call waits, parked
  under its ``requestState``, for the client's retry (`mcpvisor.actors.bridge`); and the
  reverse, a 2026-07-28 upstream's ``input_required`` driven for a handshake-era client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec
import trio
from msgspec import UNSET, Raw

from mcpvisor.actors import wire
from mcpvisor.actors.bridge import INPUT_WAIT_S, ParkedCall, declared, missing_capability, new_state_token
from mcpvisor.actors.core.vocabulary import DEFAULT_MAX_CALL_TIME_S, DEFAULT_TIMEOUT_S
from mcpvisor.actors.eras import ENVELOPE_KEYS, adapt_raw_result, strip_upstream_stamps
from mcpvisor.actors.errors import CallTimeout, ProxyError, UpstreamDied, UpstreamError, error_data
from mcpvisor.actors.link.input_required import drive_input_required
from mcpvisor.actors.wire import LOG_LEVEL_META_KEY

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcpvisor.actors.core.catalog import ToolRoute
    from mcpvisor.actors.fastspans import FastTrace
    from mcpvisor.actors.fronts.sdk import Backend
    from mcpvisor.actors.harness import ClientSession
    from mcpvisor.actors.link.stdio import StdioLink
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

_INPUT_REQUIRED: Final = b'"input_required"'
_str = msgspec.json.Decoder(str)
_token = msgspec.json.Decoder(int | str)


class CallHost(Protocol):
    """What a fast-path call needs of its connection (`mcpvisor.actors.fronts.fastpath.FastPath`).

    The connection owns its tables of calls in flight and parked calls; a call asks it to
    hold, release, park and unpark itself rather than editing them, so the tables have one
    owner and the two modules need not import each other.
    """

    backend: Backend
    nursery: trio.Nursery
    session: ClientSession
    stamp: Raw
    """The proxy's serverInfo, as a 2026-07-28 result carries it."""
    calls: dict[int | str, FastCall]
    """The calls in flight by the client's id (read by `FastCall.answer`, which does what
    `release` does without the call; everything else goes through the methods below)."""

    def holds(self, front_id: int | str, call: FastCall) -> bool:
        """Whether ``call`` is the one in flight under the client's ``front_id``."""
        ...

    def hold(self, front_id: int | str, call: FastCall) -> None:
        """Put ``call`` in flight under ``front_id`` (a 2026-07-28 client's next leg)."""
        ...

    def release(self, front_id: int | str, call: FastCall) -> bool:
        """Take ``call`` out of flight if it is still there: True if this answers it."""
        ...

    def park(self, token: str, call: FastCall) -> None:
        """Keep ``call`` between a 2026-07-28 client's legs, under its ``requestState``."""
        ...

    def unpark(self, token: str) -> None: ...

    @property
    def client_capabilities(self) -> dict[str, Any]:
        """What the client declared in ``initialize`` (the handshake era's, for the connection)."""
        ...

    def repark(self, old: str, new: str, call: FastCall) -> None:
        """``call``, parked under ``old``, now resumes under ``new`` only."""
        ...

    async def send(self, frame: bytes) -> None: ...

    def try_send(self, frame: bytes) -> bytes | memoryview | None:
        """Write ``frame`` now if that needs no wait: None when done, else what ``send`` must write."""
        ...

    def client_capable(self, method: str) -> bool: ...

    async def ask_client(self, method: str, params: dict[str, Any] | None,
                         max_time: Callable[[], float]) -> dict[str, Any]: ...


class FastCall(msgspec.Struct, eq=False):
    """One fast-path call: the client's side as the upstream link sees it.

    A struct, not a class with ``__init__``: one is made per call, and the struct's
    constructor fills the fields a call rarely changes in C (a sixth of a call's lane)."""

    fast: CallHost
    front_id: int | str
    route: ToolRoute
    up: Upstream
    """The actor the call went to: the server's, or the connection's own instance of a
    session-scoped server."""
    link: StdioLink
    client_token: int | str | None
    modern: bool
    started: float
    params: dict[str, Raw]
    """The request's params as sent upstream (the same dict the fast path rewrites)."""
    proxy_id: str = ""
    retried: bool = False
    retry_scope: trio.CancelScope | None = None
    """Set while the call is retried the slow way: cancelling it abandons the retry."""
    parked: ParkedCall | None = None
    gathering: bool = False
    """A task is gathering the upstream's questions into the client's next round."""
    log_level: str | None = None
    capabilities: Raw | None = None
    """A 2026-07-28 client's declared capabilities (its ``_meta``), as they came."""
    run: Raw | None = None
    trace: FastTrace | None = None
    """The call's spans while tracing is on (`mcpvisor.actors.fastspans`)."""

    @property
    def progress_token(self) -> int | str | None:
        return self.client_token

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        """What the client declared: a 2026-07-28 call's own ``_meta``, else ``initialize``'s."""
        if not self.modern:
            return self.fast.client_capabilities
        try:
            caps = msgspec.json.decode(self.capabilities) if self.capabilities is not None else {}
        except msgspec.DecodeError:
            caps = {}
        return caps if isinstance(caps, Mapping) else {}

    # --- the answer ------------------------------------------------------------------------
    async def deliver(self, env: wire.Envelope, line: bytes) -> None:
        rest = self.answer(env, line)
        if rest is not None:
            await self.finish(rest)

    async def finish(self, rest: bytes | memoryview) -> None:
        await self.fast.send(rest)  # type: ignore[arg-type]

    def answer(self, env: wire.Envelope, line: bytes) -> bytes | memoryview | None:
        """`deliver` up to its one wait: the response written (or held by the reader's batch),
        None; else what is left of it for ``await finish(rest)``. The upstream's reader calls
        this for every answer, one coroutine fewer a call than ``await deliver``."""
        fast = self.fast
        calls, front_id = fast.calls, self.front_id
        if calls.get(front_id) is self:  # `CallHost.release`, spelled out on the busiest path
            del calls[front_id]
            if self.parked is not None:
                self._unpark()
        elif self.parked is not None and self.parked.outcome is None:
            # Between a 2026-07-28 client's legs: the client's retry takes the outcome.
            self.parked.finish(self._outcome(env, line))
            fast.nursery.start_soon(self._expire_parked)
            return None
        else:
            return None  # cancelled by the client meanwhile: MCP says no answer
        up = self.up
        up.answered += 1  # `Upstream.note_answer`, spelled out likewise
        if env.error is not UNSET:
            frame = wire.encode_line({"jsonrpc": "2.0", "id": front_id, "error": env.error})
            self.note(UpstreamError(0, "error"))
            return fast.try_send(frame)
        if not up.policy.healthy:
            up.policy.on_healthy(trio.current_time())
        result = env.result
        if result is UNSET:
            result = Raw(b"{}")
        if self.modern or self.link.modern:
            adapted = self._adapt(result, line)
            if adapted is None:
                return None
            result = adapted
        if self.trace is not None or fast.backend.hears_calls:  # a plain `serve` has nobody
            self.note(None, result)
        # `wire.result_frame`, spelled out: the raw result copied once, into the line.
        return fast.try_send(b"".join((wire.RESULT_HEAD, wire.encode(front_id), wire.RESULT_KEY, result,
                                       wire.FRAME_END)))

    def note(self, error: BaseException | None, result: Any = None) -> None:
        """Tell the backend the call finished (the journal encodes and hashes off this path)."""
        trace = self.trace
        if trace is not None:
            trace.end(error, result)
        self.fast.backend.note_call(self.route.server, self.route.original, self.started, error,
                                    session=self.fast.session.label, run=self.run,
                                    arguments=self.params.get("arguments"), result=result,
                                    retries=int(self.retried), upstream=self.up,
                                    trace_id=trace.trace_id if trace is not None else None,
                                    direct=not self.retried)

    def _adapt(self, result: Raw, line: bytes) -> Raw | None:
        """Fit a result to the client's era in one pass over its top-level keys."""
        upstream_modern, front_modern = self.link.modern, self.modern
        if upstream_modern and not front_modern and line.find(_INPUT_REQUIRED) >= 0:
            fields = wire.decode_raw_map(result)
            if bytes(fields.get("resultType", b"")) == _INPUT_REQUIRED:
                self.fast.nursery.start_soon(self._drive_input_required, wire.decode_dict(result))
                return None
        return adapt_raw_result(result, line, upstream_modern=upstream_modern, front_modern=front_modern,
                                stamp=self.fast.stamp)

    async def _drive_input_required(self, first: dict[str, Any]) -> None:
        params = {k: msgspec.json.decode(v) for k, v in self.params.items()}
        try:
            result = await drive_input_required(self.link, "tools/call", params, first, self,
                                                self.route_timeout(), self.route_max_time())
        except ProxyError as exc:
            await self.fast.send(wire.error_frame(self.front_id, **_error_args(exc)))
            return
        await self.fast.send(wire.result_frame(self.front_id, strip_upstream_stamps(result)))

    def route_timeout(self) -> float:
        up = self.fast.backend.upstreams.get(self.route.server)
        # No actor: a reload removed the server mid-call; the default applies.
        return up.spec.timeout if up is not None else DEFAULT_TIMEOUT_S

    def route_max_time(self) -> float:
        up = self.fast.backend.upstreams.get(self.route.server)
        return up.spec.max_call_time if up is not None else DEFAULT_MAX_CALL_TIME_S

    def failed(self, error: ProxyError) -> None:
        fast = self.fast
        if not fast.holds(self.front_id, self):
            return
        if self.trace is not None and isinstance(error, UpstreamDied):
            self.trace.event("mcpvisor.upstream.died", {"mcpvisor.server": self.route.server,
                                                        "reason": error.message})
        if isinstance(error, UpstreamDied) and self.route.retry_safe and not self.retried:
            # The connection keeps holding the call while it is retried: its id is still in flight,
            # the retry's progress reaches the client and a client cancel reaches the retry.
            self.retried = True
            self.retry_scope = trio.CancelScope()
            fast.nursery.start_soon(self._retry_slow, error, self.retry_scope)
            return
        fast.release(self.front_id, self)
        self.note(error)
        fast.nursery.start_soon(fast.send, wire.error_frame(self.front_id, **_error_args(error)))

    async def cancel(self, reason: str) -> None:
        """The client cancelled the call or went away: stop it upstream (the caller
        has already released it, so nothing answers the client)."""
        if self.retry_scope is not None:
            self.retry_scope.cancel(reason=reason)  # the slow request tells the upstream
        else:
            await self.link.cancel_fast(self.proxy_id, reason)

    async def _retry_slow(self, first: UpstreamDied, scope: trio.CancelScope) -> None:
        """Died under a retry-safe tool: once more on the new process (docs/design.md), the slow way.

        Answers the client unless it cancelled meanwhile (``scope`` cancelled, the call
        no longer held by the connection): MCP cancellation, no response to a cancelled request.
        """
        logger.info("%s: died during %s; retrying once on the new process (the tool is retry-safe)",
                    self.route.server, self.route.original)
        # The same actor the call was routed to, as it is now: a reload may have replaced the
        # server's; a session-scoped server's is this connection's instance (None once it ended).
        fast = self.fast
        session = None if self.modern else fast.session
        up = fast.backend.upstream_for(self.route.server, session)
        params = {k: msgspec.json.decode(v) for k, v in self.params.items()}
        meta = params.get("_meta")
        if isinstance(meta, dict):
            meta.pop("progressToken", None)
            for key in ENVELOPE_KEYS:
                meta.pop(key, None)
        frame = b""
        trace = self.trace
        with scope, trace.current() if trace is not None else nullcontext():
            try:
                if up is None:
                    raise first
                result = await up.request("tools/call", params, origin=self)
                answer = strip_upstream_stamps(result, modern_front=self.modern)
                frame = wire.result_frame(self.front_id, answer)
                self.note(None, result)
            except ProxyError as exc:
                frame = wire.error_frame(self.front_id, **_error_args(exc))
                self.note(exc)
        if scope.cancelled_caught or not self.fast.release(self.front_id, self):
            return  # cancelled by the client meanwhile
        await self.fast.send(frame)

    # --- the bridge: a 2026-07-28 client, a handshake-era upstream ------------------------------
    def _outcome(self, env: wire.Envelope, line: bytes) -> dict[str, Any] | ProxyError:
        """The upstream's answer, kept for the client's next leg."""
        if env.error is not UNSET:
            try:
                err = wire.decode_error(env.error)
            except (wire.DecodeError, wire.ValidationError):
                return UpstreamError(wire.INTERNAL_ERROR, "upstream sent a malformed error")
            return UpstreamError(err.code, err.message, err.data)
        result = env.result if env.result is not UNSET else Raw(b"{}")
        adapted = adapt_raw_result(result, line, upstream_modern=self.link.modern, front_modern=True,
                                   stamp=self.fast.stamp)
        return wire.decode_dict(adapted)

    async def _ask_client(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Put the upstream's question to the 2026-07-28 client as an ``input_required`` leg."""
        if not declared(self.client_capabilities, method):
            raise await self._refuse(missing_capability(method))
        parked = self.parked
        if parked is None:
            parked = self.parked = ParkedCall(new_state_token(), self._offered())
            parked.rekeyed = self._rekey
            self.fast.park(parked.token, self)
        try:
            return await parked.ask(method, params, self._flush_gathered)
        finally:
            if parked.outcome is None and not self.link.has_pending(self.proxy_id):
                # The call ended (timed out, or its server died) while the client was away:
                # its retry, if it comes within INPUT_WAIT_S, is told; then it is forgotten.
                parked.finish(self._ended_while_away())
                self.fast.nursery.start_soon(self._expire_parked)

    def _offered(self) -> Mapping[str, Any] | None:
        """The ``inputResponses`` the client sent with its first request (answers it
        supplied before any round), if it sent any."""
        raw = self.params.get("inputResponses")
        if raw is None:
            return None
        try:
            offered = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None
        return offered if isinstance(offered, Mapping) else None

    def _rekey(self, old: str, new: str) -> None:
        """Each leg carries a fresh ``requestState``; the previous one no longer resumes the call."""
        self.fast.repark(old, new, self)

    async def _refuse(self, error: ProxyError) -> ProxyError:
        """The upstream asked what the client did not declare it can answer: the client's
        call ends with ``error`` (as the server would answer that client directly) and the
        upstream is told to cancel the call."""
        fast, parked = self.fast, self.parked
        if parked is not None:
            if parked.outcome is None:
                parked.finish(error)
                fast.nursery.start_soon(self._expire_parked)
            await self._flush_leg()
        elif fast.release(self.front_id, self):
            self.note(error)
            await fast.send(wire.error_frame(self.front_id, **_error_args(error)))
        fast.nursery.start_soon(self.link.cancel_fast, self.proxy_id, error.message)
        return error

    async def _flush_gathered(self) -> None:
        """A question was queued: answer the client's open leg once the round has gathered
        the questions the upstream sends with it (`ParkedCall.gathered`)."""
        if not self.gathering:
            self.gathering = True
            self.fast.nursery.start_soon(self._gather_then_flush)

    async def _gather_then_flush(self) -> None:
        parked = self.parked
        try:
            if parked is not None:
                await parked.gathered()
        finally:
            self.gathering = False
        await self._flush_leg()

    async def _flush_leg(self) -> None:
        """Answer the client's open leg if there is something to answer it with."""
        fast, parked = self.fast, self.parked
        if parked is None or not fast.holds(self.front_id, self):
            return
        leg = parked.take_leg()
        if leg is None:
            return
        fast.release(self.front_id, self)
        if isinstance(leg, ProxyError):
            self._unpark()
            self.note(leg)
            await fast.send(wire.error_frame(self.front_id, **_error_args(leg)))
            return
        if parked.done:
            self._unpark()
            self.note(None, leg)
        await fast.send(wire.result_frame(self.front_id, leg))

    async def resume(self, front_id: int | str, params: dict[str, Raw]) -> None:
        """The client retried with its answers (a new request id): hand them to the
        waiting upstream and answer this leg when there is something to answer."""
        parked = self.parked
        assert parked is not None
        self.front_id = front_id
        try:
            meta = wire.decode_raw_map(params["_meta"]) if "_meta" in params else {}
            token = meta.get("progressToken")
            if token is not None:
                self.client_token = _token.decode(token)
            self.log_level = _str.decode(meta[LOG_LEVEL_META_KEY]) if LOG_LEVEL_META_KEY in meta else None
            responses = msgspec.json.decode(params["inputResponses"]) if "inputResponses" in params else None
        except (wire.DecodeError, wire.ValidationError, msgspec.DecodeError):
            responses = None
        self.fast.hold(front_id, self)
        parked.answer(responses if isinstance(responses, Mapping) else None)
        if parked.outcome is None and not self.link.has_pending(self.proxy_id):
            parked.finish(self._ended_while_away())
        await self._flush_leg()

    def _ended_while_away(self) -> ProxyError:
        """Why a parked call has no result: its server died, or the call timed out."""
        reason = self.link.close_reason
        if reason is not None:
            return UpstreamDied(self.route.server, reason)
        return CallTimeout(self.route.server, self.route_timeout())

    async def _expire_parked(self) -> None:
        """An outcome no leg takes within `INPUT_WAIT_S` (the client left) is dropped."""
        parked = self.parked
        if parked is None:
            return
        with trio.move_on_after(INPUT_WAIT_S):
            await parked.delivered.wait()
        self._unpark()

    def _unpark(self) -> None:
        parked = self.parked
        if parked is not None:
            self.fast.unpark(parked.token)

    # --- mid-call traffic --------------------------------------------------------------------
    async def progress(self, params: dict[str, Any]) -> None:
        if self.fast.holds(self.front_id, self):
            await self.fast.send(wire.notification_frame("notifications/progress", params))

    async def log(self, params: dict[str, Any]) -> None:
        if self.fast.holds(self.front_id, self):
            await self.fast.send(wire.notification_frame("notifications/message", params))

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        fast = self.fast
        if self.modern:
            return await self._ask_client(method, params)
        if not fast.client_capable(method):
            raise await self._refuse(missing_capability(method))
        return await fast.ask_client(method, params, self.route_max_time)


def _error_args(error: ProxyError) -> dict[str, Any]:
    """``code``, ``message`` and ``data`` of ``error`` as `wire.error_frame` takes them."""
    body = error_data(error)
    return {"code": body["code"], "message": body["message"], "data": body.get("data")}
