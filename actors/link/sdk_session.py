"""The SDK `ClientSession` side of a link reached through an SDK transport (HTTP, SSE,
websocket): who we say we are, the handshake, the callbacks, what the handshake settled.

A stdio link opens its session in our own bytes (`mcpvisor.actors.link.session`) and says
exactly what a session built here says (a unit test holds the two equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.link.session import Opened, client_info

if TYPE_CHECKING:
    from mcpvisor.actors.link.ports import AnsweringLink


def sdk_client_info() -> types.Implementation:
    """`client_info` as the SDK's model, for a `ClientSession`."""
    return types.Implementation(**client_info())


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
    """Open the session in the era the config asks for, as
    `mcpvisor.actors.link.session.handshake` does in our own bytes (the same choice, and why).

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


def opened(session: ClientSession) -> Opened:
    """What ``session``'s handshake settled, as plain wire data (the models by alias, no nulls)."""
    info = session.server_info
    caps = session.server_capabilities
    return Opened(
        session.protocol_version or "",
        info.model_dump(by_alias=True, mode="json", exclude_none=True) if info is not None else None,
        caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps is not None else None,
        session.instructions,
    )
