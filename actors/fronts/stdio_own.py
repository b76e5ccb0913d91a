"""What the stdio front answers itself, without the SDK's server.

A handshake-era client's ``initialize``, ``ping``, and its ``tools/list``,
``resources/list``, ``resources/templates/list`` and ``prompts/list`` are answered here
from the proxy's own data (the front's initialization options, the router's snapshot),
the way the SDK's server answers them; so are a 2026-07-28 client's ``server/discover``
and the four lists, stamped as the SDK stamps that era's results (``resultType``, the
lists' freshness hints, the proxy's serverInfo), when the request passes the SDK's envelope
checks plainly; ``tools/call`` already goes the fast way (`mcpvisor.actors.fronts.fastpath`).
A connection that only does these never starts the SDK's server for itself. The first
message that needs the SDK (any other method, params this module does not recognise, a
request the envelope checks refuse, a request while the proxy drains or traces) starts it,
and the front replays what decided the connection's era into it first
(`OwnAnswers.replay`): the client's own ``initialize``, so the SDK's session is initialized
as if it had answered it, or a ``server/discover`` with the client's envelope, so the SDK
serves a 2026-07-28 connection (and refuses a handshake on it); its answer to the replayed
request is dropped.

Decided: the lists go out as the servers listed them. The SDK's server passes every
result through its schema for the client's version, which drops keys it does not know
(and nulls); a direct connection to the server shows them, so here they are kept.

`StdioClient` is the connection as the client registry sees it (list_changed, log
messages, a server's request outside any call): notifications are written here, and a
request to the client goes out as the fast path sends one during a call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Final

import msgspec
from msgspec import UNSET

from mcpvisor.actors import telemetry, wire
from mcpvisor.actors.eras import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from mcpvisor.actors.framing import FrameWriter, StreamBroken
from mcpvisor.actors.wire import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.front import Front

logger = logging.getLogger(__name__)

REPLAY_ID: Final = "mcpvisor-replayed-initialize"
"""The id the client's ``initialize`` is replayed under into the SDK's server; its answer
is not the client's and is dropped."""

LISTS: Final[Mapping[str, tuple[str, str, str]]] = {
    "tools/list": ("tools", "tools_list", "tools"),
    "resources/list": ("resources", "resources_list", "resources"),
    "resources/templates/list": ("resourceTemplates", "templates_list", "templates"),
    "prompts/list": ("prompts", "prompts_list", "prompts"),
}
"""List method -> (the result's key, the snapshot's attribute holding the wire dicts, the
kind its servers' caching hints are kept under)."""

DISCOVER: Final = "server/discover"
DEFAULT_HINT: Final[Mapping[str, Any]] = {"ttlMs": 0, "cacheScope": "private"}
"""What a 2026-07-28 result says of its freshness when its servers said nothing: cache
nothing (list_changed on a listen stream tells of changes), as the SDK's server is told."""


class ClientCapabilities(msgspec.Struct, frozen=True):
    """What the client declared in ``initialize``, as the client registry reads it."""

    sampling: Mapping[str, Any] | None
    elicitation: Mapping[str, Any] | None
    roots: Mapping[str, Any] | None


def _params_of(env: wire.Envelope) -> dict[str, Any] | None:
    """A message's params as a dict (empty when it has none); None when they are not an object."""
    if env.params is UNSET:
        return {}
    try:
        return wire.decode_dict(env.params)
    except (wire.DecodeError, wire.ValidationError):
        return None


def _modern_meta(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request's ``_meta`` if it is a 2026-07-28 envelope the SDK's checks pass plainly
    (an object with a served protocol version and the client's capabilities), else None."""
    meta = params.get("_meta") if params else None
    if (not isinstance(meta, dict) or CLIENT_CAPABILITIES_META_KEY not in meta
            or meta.get(PROTOCOL_VERSION_META_KEY) not in MODERN_PROTOCOL_VERSIONS):
        return None
    return meta


def _mapping_or_none(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


class StdioClient:
    """The stdio connection in the client registry (`mcpvisor.actors.fronts.clients`)."""

    def __init__(self, label: str, writer: FrameWriter,
                 ask: Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]) -> None:
        self.session_id = label
        self.exit_stack = ExitStack()
        """Closed when the connection ends: the registry forgets the client then."""
        self.client_capabilities: ClientCapabilities | None = None
        self._writer = writer
        self._ask = ask

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        try:
            await self._writer.send(wire.notification_frame(method, params))
        except StreamBroken:
            pass

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """A request to the client outside any call (an upstream's ``roots/list`` as it
        starts): asked as the fast path asks during a call, its answer read by the front."""
        return await self._ask(method, dict(params) if params is not None else None)


class OwnAnswers:
    """One stdio connection's own answers, and the handshake it keeps for the SDK."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.initialize: dict[str, Any] | None = None
        """The client's ``initialize`` params, once this module answered it."""
        self.initialized = False
        """The client sent ``notifications/initialized`` (after that ``initialize``)."""
        self.declined = False
        """The SDK owns the handshake of this connection (a request came before an
        ``initialize`` this module could answer): nothing is answered here any more."""
        self.modern_meta: dict[str, Any] | None = None
        """The envelope of the first 2026-07-28 request: the connection is of that era from
        then on (answered here or by the SDK), and a handshake is the SDK's to refuse."""
        self._result: dict[str, Any] | None = None

    def _open(self) -> bool:
        """Whether this module may answer now: not while the proxy drains (the SDK's
        middleware refuses new requests) or traces (its middleware makes the spans)."""
        return not self.declined and telemetry.tracer is None and not self.front.drain.draining

    def answer(self, method: str, env: wire.Envelope, line: bytes) -> bytes | None:
        """The answer frame to the request ``env`` (read from ``line``), or None: the SDK's."""
        modern = wire.MODERN_MARKER in line
        if not self._open():
            self.declined = self.declined or (self.initialize is None and not modern)
            return None
        rid = env.id
        assert rid is not UNSET
        assert rid is not None
        if modern or self.modern_meta is not None:
            return self._answer_modern(method, env, rid) if modern else None
        if method == "ping":
            return wire.result_frame(rid, {}) if self._no_params(env) else None
        if self.initialize is None:
            if method != "initialize":
                self.declined = True
                return None
            result = self._initialize(env)
            if result is None:
                self.declined = True
                return None
            return wire.result_frame(rid, result)
        kind = LISTS.get(method)
        if kind is None or not self._no_params(env, cursor=True):
            return None
        key, attribute, _ = kind
        snapshot: Snapshot = self.front.backend.router.snapshot
        return wire.result_frame(rid, {key: list(getattr(snapshot, attribute))})

    def _answer_modern(self, method: str, env: wire.Envelope, rid: int | str) -> bytes | None:
        """A 2026-07-28 request's answer: ``server/discover`` and the four lists, as the SDK's
        server answers them on that era, when the request passes the SDK's envelope checks
        plainly (``_meta`` an object with a served protocol version and the client's
        capabilities); anything else, and any request on a connection that did the
        handshake, is the SDK's (its error, or its refusal of the other era's request)."""
        if self.initialize is not None or self.declined:
            return None
        params = _params_of(env)
        meta = _modern_meta(params)
        if meta is None:
            return None
        if self.modern_meta is None:
            self.modern_meta = meta
        if method == DISCOVER:
            if not self._plain(params):
                return None
            result = self._discover()
        else:
            kind = LISTS.get(method)
            if kind is None or not self._plain(params, cursor=True):
                return None
            key, attribute, hints = kind
            snapshot: Snapshot = self.front.backend.router.snapshot
            result = self.front.hinted({key: list(getattr(snapshot, attribute))}, hints)
        return wire.result_frame(rid, {**DEFAULT_HINT, **result, "resultType": "complete",
                                       "_meta": {SERVER_INFO_META_KEY: self.front.server_info_stamp}})

    def note_call(self, env: wire.Envelope, line: bytes) -> None:
        """``env`` (read from ``line``), a ``tools/call`` the fast path takes, is this
        connection's first request of the 2026-07-28 era: the connection is of that era
        from now on, as if a list had come first (a handshake after it is the SDK's to
        refuse, told the era by `replay`)."""
        if (self.modern_meta is None and self.initialize is None and not self.declined
                and wire.MODERN_MARKER in line):
            self.modern_meta = _modern_meta(_params_of(env))

    def _discover(self) -> dict[str, Any]:
        """What the SDK's server answers ``server/discover`` with (its stamps added by the caller)."""
        if self._result is None:
            self._result = self.front.initialize_result()
        result: dict[str, Any] = {"supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
                                  "capabilities": self._result["capabilities"]}
        if "instructions" in self._result:
            result["instructions"] = self._result["instructions"]
        return result

    def _initialize(self, env: wire.Envelope) -> dict[str, Any] | None:
        """The result the SDK's server gives this ``initialize``, or None if its params are
        not plainly valid (the SDK then answers, with its own error)."""
        params = _params_of(env)
        if not params:
            return None
        version = params.get("protocolVersion")
        caps = params.get("capabilities")
        info = params.get("clientInfo")
        if (not isinstance(version, str) or not isinstance(caps, dict) or not isinstance(info, dict)
                or not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str)):
            return None
        if self._result is None:
            self._result = self.front.initialize_result()
        self.initialize = params
        agreed = version if version in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        return {**self._result, "protocolVersion": agreed}

    @staticmethod
    def _no_params(env: wire.Envelope, *, cursor: bool = False) -> bool:
        """The request has no params, or only what this module honours (``_meta``, and
        for a list a string ``cursor``: the lists are never paged, so any cursor reads
        the whole list, as the SDK's handlers do)."""
        return OwnAnswers._plain(_params_of(env), cursor=cursor)

    @staticmethod
    def _plain(params: dict[str, Any] | None, *, cursor: bool = False) -> bool:
        """`_no_params` of params already decoded (None: they were not an object)."""
        if params is None:
            return False
        for key, value in params.items():
            if key == "_meta":
                if not isinstance(value, dict):
                    return False
            elif not (cursor and key == "cursor" and isinstance(value, str)):
                return False
        return True

    def note_initialized(self, env: wire.Envelope) -> None:
        """``env``, a ``notifications/initialized``, completes the handshake this module answered
        (one with malformed params changes nothing, as the SDK drops it)."""
        if self.initialize is not None and _params_of(env) is not None:
            self.initialized = True

    def capabilities(self) -> ClientCapabilities:
        caps = (self.initialize or {}).get("capabilities") or {}
        return ClientCapabilities(_mapping_or_none(caps.get("sampling")),
                                  _mapping_or_none(caps.get("elicitation")),
                                  _mapping_or_none(caps.get("roots")))

    def replay(self) -> list[bytes]:
        """The frames the SDK's server must read before anything else: the client's
        ``initialize`` (under `REPLAY_ID`) and, if it came, ``notifications/initialized``;
        on a 2026-07-28 connection, a ``server/discover`` with its first request's envelope."""
        if self.modern_meta is not None:
            # The connection is of the 2026-07-28 era: a request of that era first, so the
            # SDK's server serves it as one (and refuses a handshake as it would have).
            return [wire.request_frame(REPLAY_ID, DISCOVER, {"_meta": self.modern_meta})]
        if self.initialize is None:
            return []
        frames = [wire.request_frame(REPLAY_ID, "initialize", self.initialize)]
        if self.initialized:
            frames.append(wire.notification_frame("notifications/initialized"))
        return frames
