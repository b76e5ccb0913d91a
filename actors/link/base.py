"""The common half of a live connection to one upstream: its pending table and its calls.

Owns, for one connected upstream:

* the pending table of requests the proxy forwards (ids minted here as strings
  ``mv-<n>``, which never collide with the integer ids the SDK session mints;
  python-sdk `CallOptions.request_id` gives the same advice);
* the per-request timeout (inactivity, reset by each progress notification, under
  a hard cap) and the courtesy ``notifications/cancelled`` when a request is
  abandoned (MCP: the sender SHOULD cancel what it stops waiting for);
* routing of what the upstream sends mid-call (`mcpvisor.actors.link.midcall`, a
  base class of `Link`): progress to the caller (its own token restored), sampling /
  elicitation / roots requests to the client whose call caused them, logs and list
  changes to the supervisor.

The transports are subclasses: `mcpvisor.actors.link.stdio.StdioLink` (our own pipes) and
`mcpvisor.actors.link.sdk.SdkLink` (the SDK's HTTP, SSE and websocket clients).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import msgspec
import trio
from msgspec import UNSET

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.eras import ENVELOPE_KEYS, fit_capabilities, is_modern_version, verbose_of
from mcpvisor.actors.errors import (
    CallTimeout,
    ProxyError,
    TooManyRequests,
    UpstreamDied,
    UpstreamError,
    unwrap_groups,
)
from mcpvisor.actors.framing import StreamBroken
from mcpvisor.actors.link.input_required import INPUT_REQUIRED_METHODS, drive_input_required
from mcpvisor.actors.link.listing import LIST_METHODS, ListPage, read_page
from mcpvisor.actors.link.midcall import MidCallRouting
from mcpvisor.actors.link.ports import CallOrigin
from mcpvisor.actors.link.session import Opened, request_envelope

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

logger = logging.getLogger(__name__)


PROXY_ID_PREFIX: Final = "mv-"
"""Prefix of request ids this proxy mints; never parses as an integer."""

MAX_PENDING: Final = 4096
"""Requests in flight to one upstream before new ones are refused (bounded memory)."""

LOG_LEVEL_TIMEOUT_S: Final = 10.0
"""Bound on re-sending ``logging/setLevel`` after a restart: a one-line answer; a server
that takes longer keeps its default level (logged at debug)."""

NO_BACK_CHANNEL: Final = "no back-channel for server-initiated requests"
"""The words of the SDK's refusal (`mcp.shared.exceptions.NoBackChannelError`, code -32600)
when a server's handler sends a request to the client during a 2026-07-28 request."""

CANCEL_WRITE_S: Final = 2.0
"""Bound on the courtesy cancel write when a request is abandoned (docs/style.md rule 16)."""


class LinkEvents(Protocol):
    """What a link reports to its actor. Called from the reader task: must not block."""

    def list_changed(self, kind: str) -> None:
        """``kind`` is "tools", "resources" or "prompts"."""

    def resource_updated(self, uri: str) -> None: ...

    def log_message(self, params: dict[str, Any]) -> None: ...

    def fallback_origin(self, method: str) -> CallOrigin | None:
        """A client to ask when a server request arrives outside any call."""


class FastSink(CallOrigin, Protocol):
    """A fast-path call's client side: the response is written from the reader task, no
    task waits for it (`mcpvisor.actors.fronts.fastcall.FastCall`)."""

    async def deliver(self, env: wire.Envelope, line: bytes) -> None:
        """The upstream answered: write the response to the client."""

    def answer(self, env: wire.Envelope, line: bytes) -> bytes | memoryview | None:
        """`deliver` without its wait: None when the response is written (or held), else
        what is left of it for ``await finish(rest)``."""

    async def finish(self, rest: bytes | memoryview) -> None:
        """Write what `answer` left."""

    def failed(self, error: ProxyError) -> None:
        """The call ended without an answer (died, timed out): must not block."""


class Pending(msgspec.Struct):
    proxy_id: str
    method: str
    origin: CallOrigin | None
    hard_deadline: float
    timeout: float
    done: trio.Event | None
    scope: trio.CancelScope | None = None
    envelope: wire.Envelope | None = None
    line: bytes | None = None
    failure: ProxyError | None = None
    sink: FastSink | None = None
    deadline: float = 0.0
    """Fast path: when the call times out unless progress arrives (checked lazily)."""
    started: float = 0.0
    """Fast path: when the call was sent; its hard cap (``hard_deadline``) counts from here."""


def refused_for_back_channel(exc: UpstreamError) -> bool:
    """Whether an upstream's error is the SDK's refusal of a server-to-client request
    during a 2026-07-28 request (a tool that asks through ``ctx.session``)."""
    return exc.code == wire.INVALID_REQUEST and NO_BACK_CHANNEL in str(exc.message)


def decode_result(env: wire.Envelope) -> dict[str, Any]:
    if env.result is not UNSET:
        result = wire.decode_dict(env.result)
        return result
    if env.error is not UNSET:
        try:
            err = wire.decode_error(env.error)
        except (wire.DecodeError, wire.ValidationError):
            raise UpstreamError(wire.INTERNAL_ERROR, "upstream sent a malformed error") from None
        raise UpstreamError(err.code, err.message, err.data)
    raise UpstreamError(wire.INTERNAL_ERROR, "upstream sent a response with neither result nor error")


class Link(MidCallRouting):
    """Common half of a connected upstream: pending table, timeouts, mid-call routing."""

    def __init__(self, server: str, events: LinkEvents) -> None:
        self.server = server
        self.events = events
        self.session: ClientSession | None = None
        """The SDK session of a link reached through an SDK transport; None for a stdio
        link, which speaks only our own bytes."""
        self._protocol_version = ""
        self.modern = False
        """The server speaks 2026-07-28 (kept with `protocol_version`): a plain attribute, since
        both fast-path lanes read it on every call."""
        self.server_info: Mapping[str, Any] | None = None
        """What the server said of itself (``name``, ``version``, ...), as it sent it; None: nothing."""
        self.capabilities: Mapping[str, Any] | None = None
        """The server's capabilities as it sent them (``{"tools": {"listChanged": true}}``); None before."""
        self.instructions: str | None = None
        self._envelope: dict[str, Any] | None = None
        self._pending: dict[str, Pending] = {}
        self._ids = itertools.count(1)
        self._server_requests = 0
        self.closed = trio.Event()
        self.close_reason: str | None = None
        self.nursery: trio.Nursery | None = None
        self.modern_side: Link | None = None
        """A dual-era HTTP upstream opened in the handshake era: its session-less 2026-07-28
        link, where 2026-07-28 clients' requests go (`mcpvisor.actors.link.sdk`)."""
        self.side_probed: trio.Event | None = None
        """Set once the server has said whether it has a `modern_side` (None: no probe): a
        2026-07-28 client's request waits for that answer, bounded by the probe's own bound,
        so where it goes does not depend on how soon after the start it came."""
        self.back_channel_needed = False
        """The upstream refused a 2026-07-28 request for want of a back-channel (it asks its
        questions as a server written the usual way does): its 2026-07-28 clients' requests
        stay on the handshake-era session, where the proxy bridges its questions."""

    # --- state -----------------------------------------------------------------
    @property
    def protocol_version(self) -> str:
        """The version the handshake (or ``server/discover``) settled on; "" before."""
        return self._protocol_version

    @protocol_version.setter
    def protocol_version(self, version: str) -> None:
        self._protocol_version = version
        self.modern = is_modern_version(version)

    @property
    def envelope_meta(self) -> Mapping[str, Any]:
        """The ``_meta`` every request to a 2026-07-28 upstream carries (protocol version,
        clientInfo, capabilities); empty for a handshake-era one."""
        return self._envelope or {}

    def in_flight(self) -> int:
        """Requests waiting for this server's answer, its `modern_side`'s calls included
        (not that side's own listen stream, which is always open)."""
        side = self.modern_side
        if side is None:
            return len(self._pending)
        return len(self._pending) + sum(p.method != "subscriptions/listen" for p in side._pending.values())

    def has_pending(self, proxy_id: str) -> bool:
        """Whether the request ``proxy_id`` still waits for the upstream's answer."""
        return proxy_id in self._pending

    def adopt(self, opened: Opened) -> None:
        """Take what the handshake settled (the version, and what the server said of itself)."""
        self.protocol_version = opened.protocol_version
        self.server_info = opened.server_info
        self.capabilities = opened.capabilities
        self.instructions = opened.instructions
        if self.modern:
            self._envelope = request_envelope(self.protocol_version)

    async def apply_log_level(self) -> None:
        """A handshake-era server forgets its log level when it restarts: tell it again."""
        level = getattr(self.events, "log_level", None)
        caps = self.capabilities
        if level and not self.modern and caps is not None and caps.get("logging") is not None:
            try:
                await self.request("logging/setLevel", {"level": level}, timeout=LOG_LEVEL_TIMEOUT_S,
                                   max_time=LOG_LEVEL_TIMEOUT_S)
            except ProxyError as exc:
                logger.debug("%s: logging/setLevel: %s", self.server, exc)

    def close(self, reason: str) -> None:
        """Mark the connection dead and fail every pending request at once."""
        if self.close_reason is None:
            self.close_reason = reason
        for p in list(self._pending.values()):
            if p.sink is not None:
                del self._pending[p.proxy_id]
                p.sink.failed(UpstreamDied(self.server, self.close_reason))
            elif p.done is not None and not p.done.is_set():
                p.failure = UpstreamDied(self.server, self.close_reason)
                p.done.set()
        self.closed.set()

    # --- requests ----------------------------------------------------------------
    def _prepare(self, method: str, params: Mapping[str, Any] | None, origin: CallOrigin | None,
                 timeout: float, max_time: float) -> tuple[Pending, dict[str, Any]]:
        proxy_id = self._mint_id()
        out = dict(params) if params else {}
        meta = out.get("_meta")
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        for key in ENVELOPE_KEYS:
            meta.pop(key, None)
        meta.pop("progressToken", None)
        if self._envelope is not None:
            meta.update(self._envelope)
            declared = origin.client_capabilities if origin is not None else None
            if declared is not None:  # what the upstream may ask is what this client can answer
                meta[wire.CLIENT_CAPABILITIES_META_KEY] = fit_capabilities(
                    self._envelope.get(wire.CLIENT_CAPABILITIES_META_KEY) or {}, declared)
            level = verbose_of(getattr(self.events, "log_level", None),
                               origin.log_level if origin is not None else None)
            if level:
                meta.setdefault(wire.LOG_LEVEL_META_KEY, level)  # 2026-07-28 logging is a per-request opt-in
        if origin is not None and origin.progress_token is not None:
            # The request id doubles as the upstream-side token: unique per upstream even
            # when two clients chose the same token (docs/reliability.md P15).
            meta["progressToken"] = proxy_id
        if meta:
            out["_meta"] = meta
        else:
            out.pop("_meta", None)
        now = trio.current_time()
        pending = Pending(proxy_id, method, origin, now + max_time, timeout, trio.Event())
        self._pending[proxy_id] = pending
        return pending, out

    def _mint_id(self) -> str:
        """A fresh request id, or why this link takes no more requests.

        Raises:
            UpstreamDied: the connection is closing.
            TooManyRequests: the pending table is full.
        """
        if self.close_reason is not None:
            raise UpstreamDied(self.server, self.close_reason)
        if len(self._pending) >= MAX_PENDING:
            raise TooManyRequests(f"server {self.server} has {MAX_PENDING} requests in flight")
        return f"{PROXY_ID_PREFIX}{next(self._ids)}"

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        origin: CallOrigin | None = None,
        timeout: float,  # noqa: ASYNC109 - an idle timeout that progress resets, not a deadline
        max_time: float,
        resend_safe: bool = True,
    ) -> dict[str, Any]:
        """Forward one request and return the upstream's result.

        The wait ends after ``timeout`` seconds without an answer or a progress
        notification, and after ``max_time`` in any case. Cancelling the caller
        abandons the request: the upstream gets ``notifications/cancelled``.

        A 2026-07-28 client's request that may need its input goes to `modern_side` when
        there is one (`modern_route`): the server asks in its own era and keys, and the
        client answers it directly. The one exception is a server whose tool asks through
        the back-channel there: the SDK ends the tool at that question with its refusal
        (`NO_BACK_CHANNEL`), so the server's later requests go on the session, where the
        question can be bridged (`back_channel_needed`), and so does this one when running
        it again is safe (``resend_safe``: a read, or a tool annotated readOnlyHint or
        idempotentHint; it runs again up to its question). A tool that is not is never run
        twice behind the client's back: the client gets the server's refusal, as it would
        directly, with a word that a new call will be bridged.

        Raises:
            UpstreamError: the upstream answered with a JSON-RPC error.
            UpstreamDied: the connection ended before the answer (at once, not at the timeout).
            CallTimeout: no answer in time (the upstream was told to cancel).
        """
        probed = self.side_probed
        if probed is not None and origin is not None and origin.modern and method in INPUT_REQUIRED_METHODS:
            await probed.wait()
        side = self.modern_route(method, origin)
        if side is not None:
            try:
                return await side.request(method, params, origin=origin, timeout=timeout, max_time=max_time)
            except UpstreamError as exc:
                if not refused_for_back_channel(exc):
                    raise
                refusal = exc
            self.back_channel_needed = True
            logger.info("%s: a tool asked through the back-channel, which 2026-07-28 does not have: its "
                        "2026-07-28 clients' requests now go in the handshake era, bridged", self.server)
            if not resend_safe:
                raise UpstreamError(
                    refusal.code, f"{refusal.message} (server {self.server} asks its questions through the "
                    "handshake era's back-channel: mcpvisor bridges them from the next call on; this "
                    "tool is not marked idempotent, so it was not run again)", refusal.data) from refusal
        result = await self.request_once(method, params, origin=origin, timeout=timeout, max_time=max_time)
        if result.get("resultType") != "input_required" or method not in INPUT_REQUIRED_METHODS:
            return result
        if origin is not None and origin.modern:
            return result  # a 2026-07-28 client answers and retries itself; we forward both legs
        return await drive_input_required(self, method, params, result, origin, timeout, max_time)

    def modern_route(self, method: str, origin: CallOrigin | None) -> Link | None:
        """Where a request goes instead of this link: `modern_side`, for a 2026-07-28
        client's request whose answer may be ``input_required``, unless the server needs
        its back-channel or the side is gone."""
        side = self.modern_side
        if (side is None or origin is None or not origin.modern or method not in INPUT_REQUIRED_METHODS
                or self.back_channel_needed or side.close_reason is not None):
            return None
        return side

    async def request_once(self, method: str, params: Mapping[str, Any] | None, *, origin: CallOrigin | None,
                            timeout: float,  # noqa: ASYNC109 - an idle timeout that progress resets, not a deadline
                            max_time: float) -> dict[str, Any]:
        if telemetry.tracer is not None:  # a CLIENT span, its context in the request's _meta
            return await telemetry.traced_request(self.server, method, params, self._request_once,
                                                  origin=origin, timeout=timeout, max_time=max_time)
        return await self._request_once(method, params, origin=origin, timeout=timeout, max_time=max_time)

    async def _request_once(self, method: str, params: Mapping[str, Any] | None, *, origin: CallOrigin | None,
                            timeout: float,  # noqa: ASYNC109 - an idle timeout that progress resets, not a deadline
                            max_time: float) -> dict[str, Any]:
        pending, out = self._prepare(method, params, origin, timeout, max_time)
        answered = False
        try:
            with unwrap_groups():
                env = await self._send_and_wait(pending, out)
            answered = True
            return decode_result(env)
        finally:
            self._pending.pop(pending.proxy_id, None)
            if not answered and pending.failure is None and self.close_reason is None:
                await self._abandon(pending)

    async def handshake_request(self, method: str, params: dict[str, Any], *,
                                timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - the request's own bound
        """One request of the handshake (`mcpvisor.actors.link.session`): never cancelled
        upstream when it times out, since MCP forbids cancelling ``initialize`` and
        ``server/discover``.

        Raises:
            UpstreamError: the server answered with an error.
            CallTimeout: no answer within ``timeout``.
            UpstreamDied: the connection ended first.
        """
        pending = Pending(self._mint_id(), method, None, trio.current_time() + timeout, timeout, trio.Event())
        self._pending[pending.proxy_id] = pending
        try:
            with unwrap_groups():
                env = await self._send_and_wait(pending, params)
            return decode_result(env)
        finally:
            self._pending.pop(pending.proxy_id, None)

    async def list_page(self, kind: str, cursor: str | None) -> ListPage:
        """One page of the server's ``kind`` list ("tools", "resources", "templates",
        "prompts"), its items as the SDK's session would hand them on. No bound of its own
        (as the SDK session's lists had none): the caller's (a start, a re-list) bounds it.

        Raises:
            UpstreamError: the server refused, or sent a malformed list.
            ProxyError: the connection ended or timed out.
        """
        method = LIST_METHODS[kind]
        result = await self.request(method, {"cursor": cursor} if cursor else None, timeout=math.inf,
                                    max_time=math.inf)
        return read_page(self.server, kind, result, modern=self.modern)

    async def _wait(self, pending: Pending) -> wire.Envelope:
        done = pending.done
        assert done is not None, "only fast-path calls have no event, and no task waits for them"
        now = trio.current_time()
        with trio.CancelScope(deadline=min(now + pending.timeout, pending.hard_deadline)) as scope:
            pending.scope = scope
            await done.wait()
        pending.scope = None
        if pending.failure is not None:
            raise pending.failure
        if pending.envelope is None:
            hard = trio.current_time() >= pending.hard_deadline
            limit = pending.hard_deadline - now if hard else pending.timeout
            raise CallTimeout(self.server, limit if not hard else round(limit), hard_cap=hard)
        return pending.envelope

    async def _send_and_wait(self, pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        raise NotImplementedError

    async def _abandon(self, pending: Pending) -> None:
        """Tell the upstream to stop work we no longer wait for (bounded, shielded)."""
        with trio.move_on_after(CANCEL_WRITE_S, shield=True):
            try:
                await self.notify("notifications/cancelled",
                                  {"requestId": pending.proxy_id, "reason": "cancelled by mcpvisor"})
            except (StreamBroken, ProxyError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        raise NotImplementedError
