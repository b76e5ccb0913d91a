"""The lean tool-call path: ``tools/call`` as bytes from a stdio client to a stdio upstream.

Owns, for one front connection:

* the classifier's verdict for ``tools/call`` requests, their cancellations and the
  client's replies to requests the proxy minted (everything else goes to the SDK);
* the gate: a call takes this path only after the connection's handshake is done
  (``notifications/initialized``), or when it carries the 2026-07-28 envelope, so a
  pipelined call never overtakes the ``initialize`` reply (HOTPATH.md, "Init-gate bug");
* the rewrite: the tool's name replaced in ``params`` (decoded as ``dict[str, Raw]``,
  so arguments and unknown keys such as ``inputResponses`` travel as they came), the
  id and the progress token swapped for the upstream's, the era adapted where the
  client and the upstream speak different ones;
* the answer: written by the upstream's reader task straight to this connection's
  writer, with the client's id back in the envelope; no task waits per call.

A call this path cannot take (unknown tool, management tool, server not ready,
not a stdio upstream, malformed params) goes to the SDK, which answers it exactly
as it always does; so turning the path off (``settings.fastPath: false``) changes
cost, not behaviour.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from mcp_types import (
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from msgspec import UNSET, Raw

from actors import wire
from actors.eras import ENVELOPE_KEYS, adapt_raw_result, is_modern_version, strip_upstream_stamps
from actors.errors import BridgeUnsupported, ProxyError, UpstreamDied, UpstreamError, error_data
from actors.framing import FrameWriter, StreamBroken
from actors.harness import RUN_META_KEY, CancelledByClient, ClientSession
from actors.link.input_required import drive_input_required
from actors.link.stdio import StdioLink
from actors.messages import Reply

if TYPE_CHECKING:
    from actors.core.catalog import ToolRoute
    from actors.front import Backend

logger = logging.getLogger(__name__)

SERVER_REQUEST_PREFIX: Final = "mvs-"
"""Ids of requests the proxy sends the client on an upstream's behalf (sampling, elicitation, roots)."""

CLIENT_GONE_CANCEL_S: Final = 1.0
"""Bound on each courtesy cancel sent upstream when a client disconnects mid-call
(STYLE rule 16: every shielded wait is bounded)."""

FALLBACK_TIMEOUT_S: Final = 60.0
"""``timeout`` for a call whose server a reload removed mid-call (DESIGN.md's default)."""

FALLBACK_MAX_CALL_TIME_S: Final = 600.0
"""``maxCallTime`` for a call whose server a reload removed mid-call (DESIGN.md's default)."""

_INPUT_REQUIRED: Final = b'"input_required"'
_str = msgspec.json.Decoder(str)
_token = msgspec.json.Decoder(int | str)


class FastPath:
    """The byte-level ``tools/call`` path of one stdio front connection."""

    def __init__(self, backend: Backend, writer: FrameWriter, nursery: trio.Nursery,
                 server_info: Mapping[str, Any], log_level: Callable[[], str | None] = lambda: None) -> None:
        self.backend = backend
        self.log_level = log_level
        self.writer = writer
        self.nursery = nursery
        self.calls: dict[int | str, FastCall] = {}
        self.requests: dict[str, Reply[Any]] = {}
        self.ready = False
        self.era: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self.stamp = Raw(wire.encode(dict(server_info)))
        self._envelopes: dict[int, Raw] = {}
        self.session = ClientSession()
        """This connection's session as the journal labels it (session-scoped servers take
        the SDK path, whose session is the SDK connection's)."""

    # --- what the connection tells us ---------------------------------------------------
    def observe(self, env: wire.Envelope) -> None:
        """See the handshake go by on its way to the SDK (it stays the SDK's to answer)."""
        method = env.method
        if method == "initialize" and env.id is not UNSET:
            self.era = "legacy"
            if env.params is not UNSET:
                try:
                    params = wire.decode_dict(env.params)
                except (wire.DecodeError, wire.ValidationError):
                    return
                caps = params.get("capabilities")
                self.client_capabilities = caps if isinstance(caps, dict) else {}
        elif method == "notifications/initialized":
            self.ready = True

    def owns(self, request_id: int | str) -> bool:
        return request_id in self.calls

    # --- requests -------------------------------------------------------------------------
    async def client_request(self, env: wire.Envelope, line: bytes) -> bool:
        """Take a ``tools/call`` if it can go the fast way; False hands it to the SDK."""
        if env.method != "tools/call" or env.params is UNSET:
            return False
        modern = wire.MODERN_MARKER in line
        if modern:
            if self.era == "legacy":
                return False  # the SDK refuses an enveloped request on a handshake connection
        elif not self.ready:
            return False  # the init gate: the SDK owns everything before notifications/initialized
        try:
            params = wire.decode_raw_map(env.params)
            name = _str.decode(params["name"])
        except (KeyError, wire.DecodeError, wire.ValidationError):
            return False
        route = self.backend.router.snapshot.tools.get(name)
        if route is None:
            return False
        up = self.backend.upstreams.get(route.server)
        link = up.link if up is not None else None
        if up is None or not isinstance(link, StdioLink) or up.state.value != "ready" or link.close_reason:
            return False
        if getattr(up.spec, "scope", "shared") == "session":
            return False  # its instance is the SDK connection's session's (supervisor/sessions.py)
        try:
            meta = wire.decode_raw_map(params["_meta"]) if "_meta" in params else {}
            token_raw = meta.get("progressToken")
            client_token = _token.decode(token_raw) if token_raw is not None else None
            if modern and not is_modern_version(_str.decode(meta[PROTOCOL_VERSION_META_KEY])):
                return False  # the SDK answers an unsupported version with -32022
        except (KeyError, wire.DecodeError, wire.ValidationError):
            return False
        call = FastCall(self, env.id, route, link, client_token, modern)  # type: ignore[arg-type]
        try:
            proxy_id = link.reserve_fast(call, timeout=up.spec.timeout, max_time=up.spec.max_call_time)
        except ProxyError:
            return False
        call.proxy_id = proxy_id
        if modern:
            self.era = "modern"
        params["name"] = Raw(wire.encode(route.original))
        if modern or link.modern:
            for key in ENVELOPE_KEYS:
                meta.pop(key, None)
            if link.modern:
                meta.update(self._envelope_of(link))
                level = self.log_level()
                if level:
                    meta[LOG_LEVEL_META_KEY] = Raw(wire.encode(level))
        if client_token is not None:
            meta["progressToken"] = Raw(wire.encode(proxy_id))
        if meta:
            params["_meta"] = Raw(wire.encode(meta))
        else:
            params.pop("_meta", None)
        call.params = params
        call.run = meta.get(RUN_META_KEY) if meta else None
        self.calls[env.id] = call  # type: ignore[index]
        await link.send_fast(wire.encode_line({"jsonrpc": "2.0", "id": proxy_id, "method": "tools/call",
                                               "params": params}))
        return True

    def _envelope_of(self, link: StdioLink) -> dict[str, Raw]:
        key = id(link)
        raw = self._envelopes.get(key)
        if raw is None:
            raw = Raw(wire.encode(link.envelope_meta))
            self._envelopes = {key: raw}  # one upstream era per link; keep only the latest
        return wire.decode_raw_map(raw)

    async def client_cancel(self, env: wire.Envelope) -> bool:
        """A client's ``notifications/cancelled`` for a fast-path call: forward it upstream."""
        if env.params is UNSET:
            return False
        try:
            cancel = wire.decode_cancel(env.params)
        except (wire.DecodeError, wire.ValidationError):
            return False
        call = self.calls.pop(cancel.requestId, None) if cancel.requestId is not None else None
        if call is None:
            return False
        call._note(CancelledByClient("cancelled by the client"))
        # MCP cancellation: the receiver does not answer a cancelled request.
        await call.link.cancel_fast(call.proxy_id, cancel.reason if isinstance(cancel.reason, str) else "cancelled")
        return True

    def client_response(self, env: wire.Envelope, line: bytes) -> bool:
        """The client answered a request we sent on an upstream's behalf."""
        rid = env.id
        if type(rid) is not str or not rid.startswith(SERVER_REQUEST_PREFIX):
            return False
        reply = self.requests.pop(rid, None)
        if reply is None:
            return True  # late answer to a request nobody waits for any more
        if env.error is not UNSET:
            try:
                err = wire.decode_error(env.error)
                reply.fail(UpstreamError(err.code, err.message, err.data))
            except (wire.DecodeError, wire.ValidationError):
                reply.fail(UpstreamError(wire.INTERNAL_ERROR, "the client sent a malformed error"))
        else:
            try:
                reply.set(wire.decode_dict(env.result) if env.result is not UNSET else {})
            except (wire.DecodeError, wire.ValidationError):
                reply.fail(UpstreamError(wire.INTERNAL_ERROR, "the client sent a malformed result"))
        return True

    def client_capable(self, method: str) -> bool:
        caps = self.client_capabilities
        if method == "sampling/createMessage":
            return "sampling" in caps
        if method == "elicitation/create":
            return "elicitation" in caps
        if method == "roots/list":
            return "roots" in caps
        return True

    async def send(self, frame: bytes) -> None:
        try:
            await self.writer.send(frame)
        except StreamBroken:
            pass

    async def close(self) -> None:
        """The client went away: cancel what it left in flight."""
        for call in list(self.calls.values()):
            with trio.move_on_after(CLIENT_GONE_CANCEL_S, shield=True):
                await call.link.cancel_fast(call.proxy_id, "client disconnected")
        self.calls.clear()
        for reply in self.requests.values():
            reply.fail(UpstreamError(wire.CONNECTION_CLOSED, "the client disconnected"))


class FastCall:
    """One fast-path call: the client's side as the upstream link sees it."""

    __slots__ = ("client_token", "fast", "front_id", "link", "modern", "params", "proxy_id", "retried", "route",
                 "run", "started")

    def __init__(self, fast: FastPath, front_id: int | str, route: ToolRoute, link: StdioLink,
                 client_token: int | str | None, modern: bool) -> None:
        self.fast = fast
        self.front_id = front_id
        self.route = route
        self.link = link
        self.client_token = client_token
        self.modern = modern
        self.proxy_id = ""
        self.params: dict[str, Raw] = {}
        self.retried = False
        self.started = trio.current_time()
        self.run: Raw | None = None

    @property
    def progress_token(self) -> int | str | None:
        return self.client_token

    # --- the answer ------------------------------------------------------------------------
    async def deliver(self, env: wire.Envelope, line: bytes) -> None:
        fast = self.fast
        if fast.calls.get(self.front_id) is self:
            del fast.calls[self.front_id]
        else:
            return  # cancelled by the client meanwhile: MCP says no answer
        if env.error is not UNSET:
            frame = wire.encode_line({"jsonrpc": "2.0", "id": self.front_id, "error": env.error})
            self._note(UpstreamError(0, "error"))
        else:
            result: Any = env.result if env.result is not UNSET else Raw(b"{}")
            if self.link.modern or self.modern:
                result = self._adapt(result, line)
                if result is None:
                    return
            frame = wire.encode_line({"jsonrpc": "2.0", "id": self.front_id, "result": result})
            self._note(None, result)
        await fast.send(frame)

    def _note(self, error: BaseException | None, result: Any = None) -> None:
        """Tell the backend the call finished (the journal encodes and hashes off this path)."""
        self.fast.backend.note_call(self.route.server, self.route.original, self.started, error,
                                    session=self.fast.session.label, run=self.run,
                                    arguments=self.params.get("arguments"), result=result,
                                    retries=int(self.retried))

    def _adapt(self, result: Raw, line: bytes) -> Raw | None:
        """Fit a result to the client's era in one pass over its top-level keys."""
        upstream_modern, front_modern = self.link.modern, self.modern
        if upstream_modern and not front_modern and _INPUT_REQUIRED in line:
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
        return up.spec.timeout if up is not None else FALLBACK_TIMEOUT_S

    def route_max_time(self) -> float:
        up = self.fast.backend.upstreams.get(self.route.server)
        return up.spec.max_call_time if up is not None else FALLBACK_MAX_CALL_TIME_S

    def failed(self, error: ProxyError) -> None:
        fast = self.fast
        if fast.calls.get(self.front_id) is not self:
            return
        del fast.calls[self.front_id]
        if isinstance(error, UpstreamDied) and self.route.retry_safe and not self.retried:
            self.retried = True
            fast.nursery.start_soon(self._retry_slow, error)
            return
        self._note(error)
        fast.nursery.start_soon(fast.send, wire.error_frame(self.front_id, **_error_args(error)))

    async def _retry_slow(self, first: UpstreamDied) -> None:
        """Died under a retry-safe tool: once more on the new process (DESIGN.md), the slow way."""
        logger.info("%s died under %s; retrying once (the tool is retry-safe)", self.route.server, self.route.original)
        up = self.fast.backend.upstreams.get(self.route.server)
        params = {k: msgspec.json.decode(v) for k, v in self.params.items()}
        meta = params.get("_meta")
        if isinstance(meta, dict):
            meta.pop("progressToken", None)
            for key in ENVELOPE_KEYS:
                meta.pop(key, None)
        try:
            if up is None:
                raise first
            result = await up.request("tools/call", params, origin=self)
            frame = wire.result_frame(self.front_id, strip_upstream_stamps(result, modern_front=self.modern))
            self._note(None, result)
        except ProxyError as exc:
            frame = wire.error_frame(self.front_id, **_error_args(exc))
            self._note(exc)
        await self.fast.send(frame)

    # --- mid-call traffic --------------------------------------------------------------------
    async def progress(self, params: dict[str, Any]) -> None:
        if self.fast.calls.get(self.front_id) is self:
            await self.fast.send(wire.notification_frame("notifications/progress", params))

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        fast = self.fast
        if self.modern:
            raise BridgeUnsupported(
                f"the client speaks MCP 2026-07-28, which has no server-to-client requests; {method} from "
                f"the handshake-era server {self.route.server} cannot be forwarded to it"
            )
        if not fast.client_capable(method):
            raise UpstreamError(wire.METHOD_NOT_FOUND, f"the client did not declare support for {method}")
        rid = f"{SERVER_REQUEST_PREFIX}{next(fast._ids)}"
        reply: Reply[dict[str, Any]] = Reply()
        fast.requests[rid] = reply
        try:
            await fast.send(wire.request_frame(rid, method, params))
            with trio.fail_after(self.route_max_time()):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT, f"the client did not answer {method}") from None
        finally:
            fast.requests.pop(rid, None)


def _error_args(error: ProxyError) -> dict[str, Any]:
    body = error_data(error)
    return {"code": body["code"], "message": body["message"], "data": body.get("data")}
