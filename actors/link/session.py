"""Who the proxy is to an upstream, and the handshake of a link that speaks our own bytes.

A stdio link opens its session itself, in `mcpvisor.actors.wire` frames under our own
request ids, saying exactly what the SDK's ``ClientSession`` says with the callbacks the
SDK links install (`mcpvisor.actors.link.sdk_session`): the same protocol version
offered, capabilities, clientInfo and era choice, the same checks of the answers and the
same timeouts (a unit test holds what the two send equal). Loading the SDK for that
costs every stdio upstream ~0.4 s of imports and ~60 MB; this module imports none of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor.actors import __version__, wire
from mcpvisor.actors.errors import CallTimeout, UpstreamError

if TYPE_CHECKING:
    from mcpvisor.actors.link.ports import HandshakingLink

CLIENT_NAME: Final = "mcpvisor"
"""The clientInfo name upstreams see."""

DISCOVER_TIMEOUT_S: Final = 10.0
"""Bound on one ``server/discover`` (the SDK's ``DISCOVER_TIMEOUT_SECONDS``). ``initialize``
has none of its own, as in the SDK: the start's own timeout bounds it."""

CLIENT_CAPABILITIES: Final[Mapping[str, Any]] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
}
"""What the proxy declares to every upstream, in either era: it answers sampling,
elicitation (form and url) and roots by asking its clients, and says when roots change
(what the SDK's session declares given a sampling, an elicitation and a roots callback)."""


def client_info() -> dict[str, Any]:
    """Who the proxy says it is to an upstream (an MCP ``Implementation``)."""
    return {"name": CLIENT_NAME, "version": __version__}


def client_capabilities() -> dict[str, Any]:
    """A fresh copy of `CLIENT_CAPABILITIES` (the frames' dicts must not share it)."""
    return {key: _copy(value) for key, value in CLIENT_CAPABILITIES.items()}


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def request_envelope(protocol_version: str) -> dict[str, Any]:
    """The ``_meta`` envelope every request to a 2026-07-28 upstream carries: the protocol
    version, our clientInfo and the capabilities we declare."""
    return {
        wire.PROTOCOL_VERSION_META_KEY: protocol_version,
        wire.CLIENT_INFO_META_KEY: client_info(),
        wire.CLIENT_CAPABILITIES_META_KEY: client_capabilities(),
    }


def initialize_params() -> dict[str, Any]:
    """The params of our ``initialize``: the newest handshake version, our capabilities, our clientInfo."""
    return {"protocolVersion": wire.LATEST_HANDSHAKE_VERSION, "capabilities": client_capabilities(),
            "clientInfo": client_info()}


def discover_params(version: str) -> dict[str, Any]:
    """The params of our ``server/discover`` at ``version``: the envelope alone."""
    return {"_meta": request_envelope(version)}


class Opened(msgspec.Struct, frozen=True):
    """What a handshake settled, as the server sent it (plain wire data)."""

    protocol_version: str
    server_info: Mapping[str, Any] | None
    """``name``, ``version`` and whatever else the server said of itself; None: it did not say."""
    capabilities: Mapping[str, Any] | None
    instructions: str | None


class HandshakeFailed(UpstreamError):
    """The server refused the handshake, or answered it with nothing we can use.

    `reads_as` is the failure a user reads (status, ``mcpvisor status``, the log):
    ``handshake failed: <the server's message>`` for a refusal, as it read when the
    SDK's session ran the handshake."""

    def __init__(self, code: int, message: str, data: Any = None, *, reads_as: str | None = None) -> None:
        super().__init__(code, message, data)
        self.reads_as = reads_as or f"handshake failed: {message}"


class MalformedAnswer(HandshakeFailed):
    """The server answered the handshake with a result that lacks what the protocol requires.
    Under ``auto`` it is no refusal: ``server/discover`` is not tried (as the SDK's session
    did not when its models rejected the result)."""

    def __init__(self, method: str, needs: str) -> None:
        super().__init__(wire.INTERNAL_ERROR, f"the server's {method} result is malformed (it needs {needs})")


class UnsupportedVersion(HandshakeFailed):
    """The server answered ``initialize`` with a version outside the handshake era, or
    ``server/discover`` with no version we speak."""

    def __init__(self, message: str) -> None:
        # The words (type name included) the SDK's RuntimeError read as.
        super().__init__(wire.INTERNAL_ERROR, message, reads_as=f"RuntimeError: {message}")


async def handshake(link: HandshakingLink, protocol: str) -> Opened:
    """Open the session in the era the config asks for.

    ``legacy``: ``initialize``. A 2026-07-28 version: ``server/discover``. ``auto``:
    ``initialize`` first, and ``server/discover`` only when the server refuses the
    handshake. A server that speaks both eras is thus opened in the handshake era,
    where a server written the usual way (``ctx.session.create_message``, ``elicit``,
    ``send_tool_list_changed``) has its back-channel; 2026-07-28 forbids server-to-client
    requests, so opening such a server there would take sampling, elicitation and list
    changes away from it. Trying the handshake first also costs a handshake-only server
    nothing, where the SDK's ``negotiate_auto`` probes ``server/discover`` first (up to
    its 10 s timeout for a server that never answers an unknown method).

    Raises:
        HandshakeFailed: the server refused (under ``auto``: both the handshake and
            discover; the discover error, which says what the server speaks), or its
            answer settles on no version we speak.
        ProxyError: transport errors (`UpstreamDied`) propagate as they are: an outage is
            no era verdict.
    """
    if protocol == "legacy":
        return await initialize(link)
    if protocol in wire.MODERN_PROTOCOL_VERSIONS:
        return await discover(link)
    try:
        return await initialize(link)
    except MalformedAnswer:
        raise
    except HandshakeFailed:
        # The server refused ``initialize`` (-32601, or -32022 naming only 2026-07-28
        # versions) or answered with a version outside the handshake era.
        return await discover(link)


async def initialize(link: HandshakingLink) -> Opened:
    """``initialize``, the version check, then ``notifications/initialized``."""
    result = await _ask(link, "initialize", initialize_params(), math.inf)
    version = result.get("protocolVersion")
    capabilities = result.get("capabilities")
    info = result.get("serverInfo")
    instructions = result.get("instructions")
    if not isinstance(version, str) or not isinstance(capabilities, Mapping) or not _is_implementation(info) \
            or not isinstance(instructions, str | None):
        raise MalformedAnswer("initialize",
                              "protocolVersion, capabilities and serverInfo with name and version")
    if version not in wire.HANDSHAKE_PROTOCOL_VERSIONS:
        raise UnsupportedVersion(f"Unsupported protocol version from the server: {version}")
    await link.notify("notifications/initialized", None)
    return Opened(version, info, capabilities, instructions)


async def discover(link: HandshakingLink) -> Opened:
    """``server/discover`` at the newest 2026-07-28 version; once more at the newest one we
    share when the server refuses that version and lists its own (-32022)."""
    try:
        result = await _ask(link, "server/discover", discover_params(wire.LATEST_MODERN_VERSION),
                            DISCOVER_TIMEOUT_S)
    except HandshakeFailed as exc:
        if exc.code != wire.UNSUPPORTED_PROTOCOL_VERSION:
            raise
        data = exc.data if isinstance(exc.data, Mapping) else {}
        supported = data.get("supported")
        if (not isinstance(supported, list) or not all(isinstance(v, str) for v in supported)
                or not isinstance(data.get("requested"), str)):
            raise
        mutual = [v for v in wire.MODERN_PROTOCOL_VERSIONS if v in supported]
        if not mutual:
            raise
        result = await _ask(link, "server/discover", discover_params(mutual[-1]), DISCOVER_TIMEOUT_S)
    ttl = result.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        result["ttlMs"] = 0
    versions = result.get("supportedVersions")
    capabilities = result.get("capabilities")
    instructions = result.get("instructions")
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions) \
            or not isinstance(capabilities, Mapping) or not isinstance(instructions, str | None):
        raise MalformedAnswer("server/discover", "supportedVersions and capabilities")
    mutual = [v for v in wire.MODERN_PROTOCOL_VERSIONS if v in versions]
    if not mutual:
        raise UnsupportedVersion(f"No mutually supported modern protocol version (server: {versions}, "
                                 f"client: {list(wire.MODERN_PROTOCOL_VERSIONS)})")
    meta = result.get("_meta")
    info = meta.get(wire.SERVER_INFO_META_KEY) if isinstance(meta, Mapping) else None
    # The serverInfo stamp is display-only: a malformed one reads as absent.
    return Opened(mutual[-1], info if _is_implementation(info) else None, capabilities, instructions)


def _is_implementation(info: Any) -> bool:
    return (isinstance(info, Mapping) and isinstance(info.get("name"), str)
            and isinstance(info.get("version"), str))


async def _ask(link: HandshakingLink, method: str, params: dict[str, Any],
               timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - the request's own bound, as the SDK's
    """One handshake request: the server's error as `HandshakeFailed`, a timeout as the
    SDK's own (-32001, "Request 'server/discover' timed out"). Never cancelled upstream:
    MCP forbids cancelling ``initialize`` and ``server/discover``."""
    try:
        return await link.handshake_request(method, params, timeout=timeout)
    except UpstreamError as exc:
        raise HandshakeFailed(exc.code, exc.message, exc.data) from None
    except CallTimeout:
        raise HandshakeFailed(wire.REQUEST_TIMEOUT, f"Request {method!r} timed out") from None
