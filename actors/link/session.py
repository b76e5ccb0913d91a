"""The SDK `ClientSession` side of a link: who we say we are, the handshake, the callbacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpvisor.actors import __version__
from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.sdk_compat import client_capabilities

if TYPE_CHECKING:
    from mcpvisor.actors.link.ports import AnsweringLink

CLIENT_NAME: Final = "mcpvisor"
"""The clientInfo name upstreams see."""


def client_info() -> types.Implementation:
    """Who the proxy says it is to an upstream."""
    return types.Implementation(name=CLIENT_NAME, version=__version__)


def request_envelope(session: ClientSession, protocol_version: str) -> dict[str, Any]:
    """The ``_meta`` envelope every request to a 2026-07-28 upstream carries: the protocol
    version, our clientInfo and the capabilities the session advertises."""
    return {
        PROTOCOL_VERSION_META_KEY: protocol_version,
        CLIENT_INFO_META_KEY: client_info().model_dump(by_alias=True, mode="json", exclude_none=True),
        CLIENT_CAPABILITIES_META_KEY: client_capabilities(session, protocol_version).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
    }


def session_callbacks(link: AnsweringLink) -> dict[str, Any]:
    """SDK client callbacks: they advertise sampling/elicitation/roots and route them."""

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        try:
            raw = await link.answer_server_request("sampling/createMessage",
                                             params.model_dump(by_alias=True, mode="json", exclude_none=True))
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        if "toolUse" in str(raw.get("content")) or isinstance(raw.get("content"), list):
            return types.CreateMessageResultWithTools.model_validate(raw)
        return types.CreateMessageResult.model_validate(raw)

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> Any:
        try:
            raw = await link.answer_server_request("elicitation/create",
                                             params.model_dump(by_alias=True, mode="json", exclude_none=True))
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        return types.ElicitResult.model_validate(raw)

    async def roots(ctx: Any) -> Any:
        try:
            raw = await link.answer_server_request("roots/list", None)
        except ProxyError as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        return types.ListRootsResult.model_validate(raw)

    return {"sampling_callback": sampling, "elicitation_callback": elicitation, "list_roots_callback": roots}


async def handshake(session: ClientSession, protocol: str) -> None:
    """Open the session in the era the config asks for.

    ``legacy``: ``initialize``. A 2026-07-28 version: ``server/discover``. ``auto``:
    ``initialize`` first, and ``server/discover`` only when the server refuses the
    handshake. A server that speaks both eras is thus opened in the handshake era,
    where a server written the usual way (``ctx.session.create_message``, ``elicit``,
    ``send_tool_list_changed``) has its back-channel; 2026-07-28 forbids server-to-client
    requests (docs/sdk.md 1.5), so opening such a server there would take sampling,
    elicitation and list changes away from it (issue 14, conformance). Trying the
    handshake first also costs a handshake-only server nothing, where the SDK's
    ``negotiate_auto`` probes ``server/discover`` first (up to its 10 s timeout for a
    server that never answers an unknown method).

    Raises:
        MCPError: ``auto`` and the server refused both the handshake and discover
            (the discover error, which says what the server speaks).
        Exception: transport errors propagate as they are: an outage is no era verdict.
    """
    if protocol == "legacy":
        await session.initialize()
    elif protocol in MODERN_PROTOCOL_VERSIONS:
        await session.discover()
    else:
        try:
            await session.initialize()
        except (MCPError, RuntimeError):
            # MCPError: the server refused ``initialize`` (-32601, or -32022 naming only
            # 2026-07-28 versions). RuntimeError: the SDK's "Unsupported protocol version
            # from the server" - it answered with a version outside the handshake era.
            await session.discover()
