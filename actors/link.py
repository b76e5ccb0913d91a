"""A live connection to one upstream server: its transport, its SDK session, its calls.

Owns, for one connected upstream:

* the pending table of requests the proxy forwards (ids minted here as strings
  ``mv-<n>``, which never collide with the integer ids the SDK session mints;
  python-sdk `CallOptions.request_id` gives the same advice);
* the per-request timeout (inactivity, reset by each progress notification, under
  a hard cap) and the courtesy ``notifications/cancelled`` when a request is
  abandoned (MCP: the sender SHOULD cancel what it stops waiting for);
* routing of what the upstream sends mid-call: progress to the caller (its own
  token restored), sampling / elicitation / roots requests to the client whose call
  caused them, logs and list changes to the supervisor;
* the SDK `ClientSession` that keeps the handshake (both protocol eras) and the
  listings the catalog is built from.

`StdioLink` owns the bytes (our pipes to our own child process; the SDK session is
fed over in-memory streams and sees only handshake and list traffic). `SdkLink`
wraps the SDK's own HTTP, SSE and websocket client transports.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import mcp_types as types
import trio
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from msgspec import UNSET

from actors import __version__, wire
from actors.errors import CallTimeout, ProxyError, TooManyRequests, UpstreamDied, UpstreamError
from actors.framing import FrameWriter, LineReader, OversizedLine, StreamBroken
from actors.process import Reaper, StderrLog, describe_exit, spawn, stop_process

logger = logging.getLogger(__name__)

PROXY_ID_PREFIX: Final = "mv-"
"""Prefix of request ids this proxy mints; never parses as an integer."""

MAX_PENDING: Final = 4096
"""Requests in flight to one upstream before new ones are refused (bounded memory)."""

SESSION_BUFFER: Final = 256
"""Frames queued towards the SDK session before the stdout pump waits."""

GARBAGE_LOG_LINES: Final = 5
"""Non-JSON stdout lines logged verbatim per connection; later ones are only counted."""

GARBAGE_FLOOD: Final = 1000
"""Non-JSON stdout lines within `GARBAGE_WINDOW_S` that make a connection unusable."""

GARBAGE_WINDOW_S: Final = 10.0

CANCEL_WRITE_S: Final = 2.0
"""Bound on the courtesy cancel write when a request is abandoned (STYLE rule 16)."""

EXIT_STATUS_WAIT_S: Final = 1.0
"""After stdout closes, how long to wait for the exit status for the error message."""

CLIENT_NAME: Final = "mcpvisor"

INPUT_REQUIRED_ROUNDS: Final = 10
"""Rounds of ``input_required`` the proxy drives for a handshake-era client before giving up
(the SDK's DEFAULT_INPUT_REQUIRED_MAX_ROUNDS; TypeScript, C# and Go SDKs use the same)."""

INPUT_REQUIRED_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})

STATE_ONLY_BACKOFF_S: Final = (0.05, 0.1, 0.2, 0.25)
"""Sleeps between rounds that carry only ``requestState`` (the SDK driver's 50 ms doubling to 250 ms)."""


def client_info() -> types.Implementation:
    return types.Implementation(name=CLIENT_NAME, version=__version__)


class CallOrigin(Protocol):
    """The client side of one forwarded request: who gets its mid-call traffic."""

    progress_token: int | str | None
    """The client's own progress token for this request, if it asked for progress."""

    modern: bool
    """The client speaks 2026-07-28: it drives ``input_required`` rounds itself."""

    async def progress(self, params: dict[str, Any]) -> None:
        """Deliver a progress notification (``params`` already carries the client's token)."""

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Ask the client (sampling, elicitation, roots); raises `ProxyError` if it cannot."""


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
    task waits for it (actors/fastpath.py)."""

    async def deliver(self, env: wire.Envelope, line: bytes) -> None:
        """The upstream answered: write the response to the client."""

    def failed(self, error: ProxyError) -> None:
        """The call ended without an answer (died, timed out): must not block."""


@dataclass(slots=True)
class _Pending:
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


def _decode_result(env: wire.Envelope) -> dict[str, Any]:
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


class Link:
    """Common half of a connected upstream: pending table, timeouts, mid-call routing."""

    def __init__(self, server: str, events: LinkEvents) -> None:
        self.server = server
        self.events = events
        self.session: ClientSession | None = None
        self.protocol_version: str = ""
        self.server_info: types.Implementation | None = None
        self.capabilities: types.ServerCapabilities | None = None
        self.instructions: str | None = None
        self._envelope: dict[str, Any] | None = None
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self.closed = trio.Event()
        self.close_reason: str | None = None
        self._nursery: trio.Nursery | None = None

    # --- state -----------------------------------------------------------------
    @property
    def modern(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    def in_flight(self) -> int:
        return len(self._pending)

    def _adopt(self, session: ClientSession) -> None:
        self.session = session
        self.protocol_version = session.protocol_version or ""
        self.server_info = session.server_info
        self.capabilities = session.server_capabilities
        self.instructions = session.instructions
        if self.modern:
            self._envelope = {
                PROTOCOL_VERSION_META_KEY: self.protocol_version,
                CLIENT_INFO_META_KEY: client_info().model_dump(by_alias=True, mode="json", exclude_none=True),
                CLIENT_CAPABILITIES_META_KEY: session._build_capabilities(self.protocol_version).model_dump(
                    by_alias=True, mode="json", exclude_none=True
                ),
            }

    async def apply_log_level(self) -> None:
        """A handshake-era server forgets its log level when it restarts: tell it again."""
        level = getattr(self.events, "log_level", None)
        caps = self.capabilities
        if level and not self.modern and caps is not None and caps.logging is not None:
            try:
                await self.request("logging/setLevel", {"level": level}, timeout=10, max_time=10)
            except ProxyError as exc:
                logger.debug("%s: logging/setLevel: %s", self.server, exc)

    def _close(self, reason: str) -> None:
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

    def pick_origin(self, method: str) -> CallOrigin | None:
        """The client a mid-call server request goes to: the latest call with an origin."""
        for p in reversed(self._pending.values()):
            if p.origin is not None:
                return p.origin
        return self.events.fallback_origin(method)

    # --- requests ----------------------------------------------------------------
    def _prepare(self, method: str, params: Mapping[str, Any] | None, origin: CallOrigin | None,
                 timeout: float, max_time: float) -> tuple[_Pending, dict[str, Any]]:
        if self.close_reason is not None:
            raise UpstreamDied(self.server, self.close_reason)
        if len(self._pending) >= MAX_PENDING:
            raise TooManyRequests(f"server {self.server} has {MAX_PENDING} requests in flight")
        proxy_id = f"{PROXY_ID_PREFIX}{next(self._ids)}"
        out = dict(params) if params else {}
        meta = out.get("_meta")
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        for key in (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY):
            meta.pop(key, None)
        meta.pop("progressToken", None)
        meta.pop(LOG_LEVEL_META_KEY, None)
        if self._envelope is not None:
            meta.update(self._envelope)
            level = getattr(self.events, "log_level", None)
            if level:
                meta.setdefault(LOG_LEVEL_META_KEY, level)  # 2026-07-28 logging is a per-request opt-in
        if origin is not None and origin.progress_token is not None:
            # The request id doubles as the upstream-side token: unique per upstream even
            # when two clients chose the same token (RELIABILITY P15).
            meta["progressToken"] = proxy_id
        if meta:
            out["_meta"] = meta
        else:
            out.pop("_meta", None)
        now = trio.current_time()
        pending = _Pending(proxy_id, method, origin, now + max_time, timeout, trio.Event())
        self._pending[proxy_id] = pending
        return pending, out

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        origin: CallOrigin | None = None,
        timeout: float,
        max_time: float,
    ) -> dict[str, Any]:
        """Forward one request and return the upstream's result.

        The wait ends after ``timeout`` seconds without an answer or a progress
        notification, and after ``max_time`` in any case. Cancelling the caller
        abandons the request: the upstream gets ``notifications/cancelled``.

        Raises:
            UpstreamError: the upstream answered with a JSON-RPC error.
            UpstreamDied: the connection ended before the answer (at once, not at the timeout).
            CallTimeout: no answer in time (the upstream was told to cancel).
        """
        result = await self._request_once(method, params, origin=origin, timeout=timeout, max_time=max_time)
        if result.get("resultType") != "input_required" or method not in INPUT_REQUIRED_METHODS:
            return result
        if origin is not None and origin.modern:
            return result  # a 2026-07-28 client answers and retries itself; we forward both legs
        return await self._drive_input_required(method, params, result, origin, timeout, max_time)

    async def _drive_input_required(self, method: str, params: Mapping[str, Any] | None, result: dict[str, Any],
                                    origin: CallOrigin | None, timeout: float, max_time: float) -> dict[str, Any]:
        """A 2026-07-28 upstream asked for input (sampling, elicitation, roots) and the client
        speaks the handshake era: ask the client with server-to-client requests, retry with the
        answers (SEP-2322), as the SDK's own client driver does."""
        if origin is None:
            raise UpstreamError(wire.METHOD_NOT_FOUND,
                                f"server {self.server} needs input from a client, and no client is attached")
        current = dict(params or {})
        state_only = 0
        for _round in range(INPUT_REQUIRED_ROUNDS):
            requests = result.get("inputRequests") or {}
            responses: dict[str, Any] = {}
            if isinstance(requests, Mapping):
                for key, request in requests.items():
                    if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
                        raise UpstreamError(wire.INTERNAL_ERROR, f"server {self.server} sent a malformed input request")
                    responses[str(key)] = await origin.server_request(request["method"], request.get("params"))
            if responses:
                current["inputResponses"] = responses
                state_only = 0
            else:
                current.pop("inputResponses", None)
                await trio.sleep(STATE_ONLY_BACKOFF_S[min(state_only, len(STATE_ONLY_BACKOFF_S) - 1)])
                state_only += 1
            if "requestState" in result:
                current["requestState"] = result["requestState"]
            else:
                current.pop("requestState", None)
            result = await self._request_once(method, current, origin=origin, timeout=timeout, max_time=max_time)
            if result.get("resultType") != "input_required":
                return result
        raise UpstreamError(wire.INTERNAL_ERROR,
                            f"server {self.server} kept asking for input for more than {INPUT_REQUIRED_ROUNDS} rounds")

    async def _request_once(self, method: str, params: Mapping[str, Any] | None, *, origin: CallOrigin | None,
                            timeout: float, max_time: float) -> dict[str, Any]:
        pending, out = self._prepare(method, params, origin, timeout, max_time)
        answered = False
        try:
            env = await self._send_and_wait(pending, out)
            answered = True
            return _decode_result(env)
        finally:
            self._pending.pop(pending.proxy_id, None)
            if not answered and pending.failure is None and self.close_reason is None:
                await self._abandon(pending)

    async def _wait(self, pending: _Pending) -> wire.Envelope:
        now = trio.current_time()
        with trio.CancelScope(deadline=min(now + pending.timeout, pending.hard_deadline)) as scope:
            pending.scope = scope
            await pending.done.wait()
        pending.scope = None
        if pending.failure is not None:
            raise pending.failure
        if pending.envelope is None:
            hard = trio.current_time() >= pending.hard_deadline
            limit = pending.hard_deadline - now if hard else pending.timeout
            raise CallTimeout(self.server, limit if not hard else round(limit), hard_cap=hard)
        return pending.envelope

    def _touch(self, pending: _Pending) -> None:
        """Activity on a call (progress, a mid-call request): restart its inactivity timeout."""
        deadline = min(trio.current_time() + pending.timeout, pending.hard_deadline)
        if pending.scope is not None:
            pending.scope.deadline = deadline
        elif pending.sink is not None:
            pending.deadline = deadline

    async def _send_and_wait(self, pending: _Pending, params: dict[str, Any]) -> wire.Envelope:
        raise NotImplementedError

    async def _abandon(self, pending: _Pending) -> None:
        """Tell the upstream to stop work we no longer wait for (bounded, shielded)."""
        with trio.move_on_after(CANCEL_WRITE_S, shield=True):
            try:
                await self.notify("notifications/cancelled",
                                  {"requestId": pending.proxy_id, "reason": "cancelled by mcpvisor"})
            except (StreamBroken, ProxyError, MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        raise NotImplementedError

    async def _progress(self, token: int | str, params: dict[str, Any]) -> None:
        pending = self._pending.get(token) if isinstance(token, str) else None
        if pending is None or (pending.done is not None and pending.done.is_set()):
            return  # MCP progress: MUST stop after completion; a late one is dropped
        self._touch(pending)
        origin = pending.origin
        if origin is not None and origin.progress_token is not None:
            params["progressToken"] = origin.progress_token
            try:
                await origin.progress(params)
            except Exception:
                logger.debug("dropped progress for %s: client gone", pending.proxy_id, exc_info=True)

    async def _server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Answer a request the upstream sends us by asking the right client."""
        if method == "ping":
            return {}
        origin = self.pick_origin(method)
        if origin is None:
            raise UpstreamError(wire.METHOD_NOT_FOUND, f"no connected client can answer {method}")
        for p in self._pending.values():
            if p.origin is origin:
                self._touch(p)  # a call waiting on the user is not idle
        result = await origin.server_request(method, params)
        for p in self._pending.values():
            if p.origin is origin:
                self._touch(p)
        return result


# --------------------------------------------------------------------------------------
# stdio: our own pipes
# --------------------------------------------------------------------------------------


class StdioLink(Link):
    """An upstream child process spoken to over our own pipes."""

    def __init__(self, server: str, events: LinkEvents, proc: trio.Process, *, max_message: int,
                 stderr: StderrLog) -> None:
        super().__init__(server, events)
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        self.writer = FrameWriter(proc.stdin)
        self.max_message = max_message
        self.stderr = stderr
        self._to_session, self._session_in = anyio.create_memory_object_stream[SessionMessage | Exception](
            SESSION_BUFFER
        )
        self._session_out, self._from_session = anyio.create_memory_object_stream[SessionMessage](SESSION_BUFFER)
        self._garbage = 0
        self._garbage_window: list[float] = []
        self._wheel_scope: trio.CancelScope | None = None

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        out = dict(params) if params else None
        if self._envelope is not None and self.modern:
            out = dict(out or {})
            meta = dict(out.get("_meta") or {})
            meta.update(self._envelope)
            out["_meta"] = meta
        await self.writer.send(wire.notification_frame(method, out))

    async def _send_and_wait(self, pending: _Pending, params: dict[str, Any]) -> wire.Envelope:
        try:
            await self.writer.send(wire.request_frame(pending.proxy_id, pending.method, params))
        except StreamBroken as exc:
            self._close(f"cannot write to it: {exc}")
            raise UpstreamDied(self.server, self.close_reason or str(exc)) from None
        return await self._wait(pending)

    # --- the fast path -------------------------------------------------------------
    def reserve_fast(self, sink: FastSink, *, timeout: float, max_time: float) -> str:
        """Register a fast-path call and return the id to send it under.

        Raises:
            UpstreamDied: the connection is closing.
            TooManyRequests: the pending table is full.
        """
        if self.close_reason is not None:
            raise UpstreamDied(self.server, self.close_reason)
        if len(self._pending) >= MAX_PENDING:
            raise TooManyRequests(f"server {self.server} has {MAX_PENDING} requests in flight")
        proxy_id = f"{PROXY_ID_PREFIX}{next(self._ids)}"
        now = trio.current_time()
        hard = now + max_time
        self._pending[proxy_id] = _Pending(proxy_id, "tools/call", sink, hard, timeout, None, sink=sink,
                                           deadline=min(now + timeout, hard))
        if self._wheel_scope is not None and self._wheel_scope.deadline > now + timeout:
            self._wheel_scope.deadline = now + timeout
        return proxy_id

    async def send_fast(self, frame: bytes) -> None:
        """Write a fast-path request; a broken pipe closes the link (failing the call)."""
        try:
            await self.writer.send(frame)
        except StreamBroken as exc:
            self._close(f"cannot write to it: {exc}")

    async def cancel_fast(self, proxy_id: str, reason: str) -> bool:
        """The client cancelled a fast-path call: forget it and tell the upstream."""
        pending = self._pending.pop(proxy_id, None)
        if pending is None:
            return False
        await self._abandon(pending)
        return True

    async def run_deadlines(self) -> None:
        """One timer for every fast-path call of this link (no task per call): a call with no
        answer or progress within its timeout, or past its hard cap, fails and is cancelled upstream."""
        while True:
            with trio.CancelScope(deadline=math.inf) as scope:
                self._wheel_scope = scope
                fast = [p for p in self._pending.values() if p.sink is not None]
                if fast:
                    scope.deadline = min(p.deadline for p in fast)
                await trio.sleep_forever()
            self._wheel_scope = None
            now = trio.current_time()
            for p in [p for p in self._pending.values() if p.sink is not None and p.deadline <= now]:
                del self._pending[p.proxy_id]
                hard = now >= p.hard_deadline
                limit = p.hard_deadline - (p.deadline - p.timeout) if hard else p.timeout
                assert p.sink is not None
                p.sink.failed(CallTimeout(self.server, round(limit) if hard else limit, hard_cap=hard))
                await self._abandon(p)

    # --- pumps -----------------------------------------------------------------
    async def pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        reason = "closed its stdout"
        batches = LineReader(self.proc.stdout, self.max_message).__aiter__()
        try:
            async for batch in batches:
                for line in batch:
                    if isinstance(line, OversizedLine):
                        reason = f"sent a message larger than {self.max_message} bytes ({line.size}+ bytes)"
                        return
                    await self._dispatch(line)
                    if self.close_reason is not None:
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                # Left mid-stream (garbage flood, oversized line): close the reader here, not in GC.
                await batches.aclose()  # type: ignore[attr-defined]
                if self.close_reason is None:
                    with trio.move_on_after(EXIT_STATUS_WAIT_S):
                        await self.proc.wait()
                    if self.proc.returncode is not None:
                        reason = describe_exit(self.proc.returncode)
                    tail = self.stderr.tail()
                    self._close(f"{reason}: {tail}" if tail else reason)
                await self._to_session.aclose()

    async def _dispatch(self, line: bytes) -> None:
        try:
            env = wire.decode_envelope(line)
        except (wire.DecodeError, wire.ValidationError):
            self._on_garbage(line)
            return
        method = env.method
        if method is UNSET:
            rid = env.id
            if type(rid) is str and rid.startswith(PROXY_ID_PREFIX):
                pending = self._pending.get(rid)
                if pending is None:
                    logger.debug("%s: dropped a late response to %s", self.server, rid)
                elif pending.sink is not None:
                    del self._pending[rid]
                    await pending.sink.deliver(env, line)
                elif pending.done is not None and not pending.done.is_set():
                    pending.envelope = env
                    pending.line = line
                    pending.done.set()
                return
            await self._to_sdk(line)
            return
        if env.id is UNSET:
            await self._notification(method, env, line)
            return
        self._serve_request_soon(env)

    async def _notification(self, method: str, env: wire.Envelope, line: bytes) -> None:
        if method == "notifications/progress":
            if env.params is UNSET:
                return
            try:
                params = wire.decode_dict(env.params)
            except (wire.DecodeError, wire.ValidationError):
                return
            token = params.get("progressToken")
            if isinstance(token, str):
                await self._progress(token, params)
            return
        if method == "notifications/message":
            try:
                params = wire.decode_dict(env.params) if env.params is not UNSET else {}
            except (wire.DecodeError, wire.ValidationError):
                return
            self.events.log_message(params)
            return
        if method == "notifications/tools/list_changed":
            self.events.list_changed("tools")
        elif method == "notifications/resources/list_changed":
            self.events.list_changed("resources")
        elif method == "notifications/prompts/list_changed":
            self.events.list_changed("prompts")
        elif method == "notifications/resources/updated":
            try:
                params = wire.decode_dict(env.params) if env.params is not UNSET else {}
            except (wire.DecodeError, wire.ValidationError):
                return
            uri = params.get("uri")
            if isinstance(uri, str):
                self.events.resource_updated(uri)
        elif method == "notifications/cancelled" or method.startswith("notifications/subscriptions/"):
            return
        else:
            await self._to_sdk(line)

    def _serve_request_soon(self, env: wire.Envelope) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._serve_request, env)

    async def _serve_request(self, env: wire.Envelope) -> None:
        assert isinstance(env.method, str) and env.id is not UNSET and env.id is not None
        request_id = env.id
        try:
            params = wire.decode_dict(env.params) if env.params is not UNSET else None
            result = await self._server_request(env.method, params)
            frame = wire.result_frame(request_id, result)
        except ProxyError as exc:
            frame = wire.error_frame(request_id, exc.code, exc.message, exc.data)
        except (wire.DecodeError, wire.ValidationError):
            frame = wire.error_frame(request_id, wire.INVALID_PARAMS, "malformed params")
        except MCPError as exc:
            frame = wire.error_frame(request_id, exc.error.code, exc.error.message, exc.error.data)
        try:
            await self.writer.send(frame)
        except StreamBroken:
            pass

    async def _to_sdk(self, line: bytes) -> None:
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as exc:
            logger.debug("%s: message the SDK cannot parse: %s", self.server, exc)
            return
        try:
            await self._to_session.send(SessionMessage(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def _on_garbage(self, line: bytes) -> None:
        self._garbage += 1
        if self._garbage <= GARBAGE_LOG_LINES:
            logger.warning("%s wrote non-JSON to stdout (ignored): %r", self.server, line[:200])
        elif self._garbage == GARBAGE_LOG_LINES + 1:
            logger.warning("%s keeps writing non-JSON to stdout; further lines are only counted", self.server)
        now = trio.current_time()
        window = self._garbage_window
        window.append(now)
        if len(window) > GARBAGE_FLOOD:
            del window[: len(window) - GARBAGE_FLOOD]
            if now - window[0] < GARBAGE_WINDOW_S:
                self._close(f"garbage on stdout: {GARBAGE_FLOOD} non-JSON lines in under {GARBAGE_WINDOW_S:g}s")

    @property
    def garbage_lines(self) -> int:
        return self._garbage

    async def pump_session_out(self) -> None:
        """Frames the SDK session writes (handshake, lists) go to the child's stdin."""
        async with self._from_session:
            async for message in self._from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                try:
                    await self.writer.send(data)
                except StreamBroken as exc:
                    self._close(f"cannot write to it: {exc}")
                    return


def _make_callbacks(link: Link) -> dict[str, Any]:
    """SDK client callbacks: they advertise sampling/elicitation/roots and route them."""

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        try:
            raw = await link._server_request("sampling/createMessage",
                                             params.model_dump(by_alias=True, mode="json", exclude_none=True))
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        if "toolUse" in str(raw.get("content")) or isinstance(raw.get("content"), list):
            return types.CreateMessageResultWithTools.model_validate(raw)
        return types.CreateMessageResult.model_validate(raw)

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> Any:
        try:
            raw = await link._server_request("elicitation/create",
                                             params.model_dump(by_alias=True, mode="json", exclude_none=True))
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        return types.ElicitResult.model_validate(raw)

    async def roots(ctx: Any) -> Any:
        try:
            raw = await link._server_request("roots/list", None)
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        return types.ListRootsResult.model_validate(raw)

    return {"sampling_callback": sampling, "elicitation_callback": elicitation, "list_roots_callback": roots}


async def handshake(session: ClientSession, protocol: str) -> None:
    """Open the session in the era the config asks for ("auto" probes, then falls back)."""
    if protocol == "legacy":
        await session.initialize()
    elif protocol in MODERN_PROTOCOL_VERSIONS:
        await session.discover()
    else:
        await negotiate_auto(session)


@asynccontextmanager
async def open_stdio_link(
    server: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    events: LinkEvents,
    reaper: Reaper | None,
    protocol: str,
    max_message: int,
    shutdown_grace: float,
    on_spawn: Callable[[StdioLink], None] | None = None,
) -> AsyncIterator[StdioLink]:
    """Spawn the server, run its pumps, open the SDK session; stop everything on exit.

    Raises:
        SpawnError: the command could not be started.
        UpstreamDied / MCPError / TimeoutError: the handshake failed (the process is stopped).
    """
    stderr = StderrLog(server)
    proc = await spawn(argv, env=env, cwd=cwd, reaper=reaper)
    link = StdioLink(server, events, proc, max_message=max_message, stderr=stderr)
    if on_spawn is not None:
        on_spawn(link)
    try:
        async with trio.open_nursery() as nursery:
            link._nursery = nursery
            assert proc.stderr is not None
            nursery.start_soon(stderr.drain, proc.stderr)
            nursery.start_soon(link.pump_stdout)
            nursery.start_soon(link.pump_session_out)
            nursery.start_soon(link.run_deadlines)
            session = ClientSession(link._session_in, link._session_out, client_info=client_info(),
                                    **_make_callbacks(link))
            try:
                async with session:
                    with trio.CancelScope() as handshake_scope:
                        nursery.start_soon(_cancel_when_closed, link, handshake_scope)
                        await handshake(session, protocol)
                    if handshake_scope.cancelled_caught or link.close_reason is not None:
                        raise UpstreamDied(server, link.close_reason or "closed during the handshake")
                    link._adopt(session)
                    await link.apply_log_level()
                    yield link
            finally:
                link._close(link.close_reason or "stopped by mcpvisor")
                nursery.cancel_scope.cancel()
    finally:
        await stop_process(proc, grace=shutdown_grace, reaper=reaper)
        link._session_in.close()
        link._from_session.close()


async def _cancel_when_closed(link: Link, scope: trio.CancelScope) -> None:
    await link.closed.wait()
    scope.cancel()


# --------------------------------------------------------------------------------------
# HTTP, SSE, websocket: the SDK's client transports
# --------------------------------------------------------------------------------------


class SdkLink(Link):
    """An upstream reached through an SDK client transport (streamable HTTP, SSE, ws)."""

    async def _abandon(self, pending: _Pending) -> None:
        """The SDK dispatcher already sends the courtesy cancel when its request is abandoned."""

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        assert self.session is not None
        data: dict[str, Any] = {"method": method, "params": dict(params) if params else {}}
        opts: dict[str, Any] = {}
        self.session._stamp(data, opts)  # type: ignore[arg-type]
        await self.session._dispatcher.notify(method, data.get("params") or None, opts)  # type: ignore[arg-type]

    async def _send_and_wait(self, pending: _Pending, params: dict[str, Any]) -> wire.Envelope:
        assert self.session is not None
        session = self.session
        data: dict[str, Any] = {"method": pending.method, "params": params}
        opts: dict[str, Any] = {"request_id": pending.proxy_id, "cancel_on_abandon": True}
        session._stamp(data, opts)  # type: ignore[arg-type]
        progress_wanted = pending.origin is not None and pending.origin.progress_token is not None
        if progress_wanted:
            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                p: dict[str, Any] = {"progress": progress}
                if total is not None:
                    p["total"] = total
                if message is not None:
                    p["message"] = message
                await self._progress(pending.proxy_id, p)
            opts["on_progress"] = on_progress
            data["params"].get("_meta", {}).pop("progressToken", None)

        async def run() -> None:
            try:
                result = await session._dispatcher.send_raw_request(
                    pending.method, data.get("params") or None, opts  # type: ignore[arg-type]
                )
                pending.envelope = wire.Envelope(result=wire.encode(result))  # type: ignore[arg-type]
            except MCPError as exc:
                if exc.error.code == wire.CONNECTION_CLOSED:
                    pending.failure = UpstreamDied(self.server, exc.error.message)
                else:
                    pending.envelope = wire.Envelope(error=wire.encode(
                        {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}))  # type: ignore[arg-type]
            except Exception as exc:  # a transport error (httpx2, ws) ends this connection
                self._close(f"{type(exc).__name__}: {exc}")
            pending.done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            try:
                return await self._wait(pending)
            finally:
                nursery.cancel_scope.cancel()


def _message_handler(link: SdkLink) -> Callable[[Any], Any]:
    async def handle(message: Any) -> None:
        if isinstance(message, Exception):
            logger.warning("%s: transport error: %s", link.server, message)
            return
        root = getattr(message, "root", message)
        match root:
            case types.ToolListChangedNotification():
                link.events.list_changed("tools")
            case types.ResourceListChangedNotification():
                link.events.list_changed("resources")
            case types.PromptListChangedNotification():
                link.events.list_changed("prompts")
            case types.ResourceUpdatedNotification():
                link.events.resource_updated(str(root.params.uri))
            case _:
                pass

    return handle


def _logging_callback(link: SdkLink) -> Callable[[Any], Any]:
    async def handle(params: types.LoggingMessageNotificationParams) -> None:
        link.events.log_message(params.model_dump(by_alias=True, mode="json", exclude_none=True))

    return handle


@asynccontextmanager
async def open_sdk_link(
    server: str,
    transport: Any,
    *,
    events: LinkEvents,
    protocol: str,
) -> AsyncIterator[SdkLink]:
    """Connect through an SDK client transport (an async context manager of streams)."""
    link = SdkLink(server, events)
    async with transport as streams, trio.open_nursery() as nursery:
        read, write = streams[0], streams[1]
        link._nursery = nursery
        session = ClientSession(read, write, client_info=client_info(), message_handler=_message_handler(link),
                                logging_callback=_logging_callback(link), **_make_callbacks(link))
        try:
            async with session:
                await handshake(session, protocol)
                link._adopt(session)
                await link.apply_log_level()
                yield link
        finally:
            link._close(link.close_reason or "stopped by mcpvisor")
            nursery.cancel_scope.cancel()

