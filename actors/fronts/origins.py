"""How an upstream's mid-call traffic reaches the client of the shared (SDK) front.

Owns the `CallOrigin` implementations of `mcpvisor.actors.fronts.sdk`:

* `ConnectionOrigin`: a handshake-era connection asked outside any call (e.g. an
  upstream's roots/list at start-up);
* `SdkOrigin`: the client whose request caused an upstream call; its progress, log
  messages and the upstream's requests (sampling, elicitation, roots) go to it;
* `BridgedOrigin`: a 2026-07-28 client's call to a handshake-era upstream, whose
  questions become ``input_required`` legs (`mcpvisor.actors.bridge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY

from mcpvisor.actors.bridge import ParkedCall, declared, missing_capability
from mcpvisor.actors.eras import is_modern_version
from mcpvisor.actors.errors import BridgeUnsupported, ProxyError, UpstreamError
from mcpvisor.actors.fronts.clients import ClientRegistry, ClientState
from mcpvisor.actors.sdk_compat import connection_of, request_outbound_of


def is_modern(ctx: ServerRequestContext[Any, Any] | None) -> bool:
    """The request came from a 2026-07-28 client (its protocol version says so)."""
    return ctx is not None and is_modern_version(ctx.protocol_version)


def _declared_capabilities(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any] | None:
    """The capabilities the client of ``ctx`` declared: a 2026-07-28 request's own ``_meta``
    (none declared when it carries none), a handshake-era connection's ``initialize``."""
    if is_modern(ctx):
        meta = (ctx.params or {}).get("_meta")
        caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
        return caps if isinstance(caps, Mapping) else {}
    declared_caps = connection_of(ctx.session).client_capabilities
    if declared_caps is None:
        return None
    dumped: dict[str, Any] = declared_caps.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _leg_meta(ctx: ServerRequestContext[Any, Any]) -> tuple[int | str | None, str | None]:
    """(progress token, log level) a request's ``_meta`` carries, each None when absent
    or malformed (a boolean is no progress token)."""
    meta = (ctx.params or {}).get("_meta")
    if not isinstance(meta, Mapping):
        return None, None
    token = meta.get("progressToken")
    level = meta.get(LOG_LEVEL_META_KEY)
    return (token if isinstance(token, int | str) and not isinstance(token, bool) else None,
            level if isinstance(level, str) else None)


class ConnectionOrigin:
    """A connection asked outside any call (e.g. an upstream's roots/list at start-up)."""

    progress_token: int | str | None = None
    modern = False
    log_level: str | None = None
    client_capabilities: Mapping[str, Any] | None = None

    def __init__(self, state: ClientState) -> None:
        self._state = state

    async def progress(self, params: dict[str, Any]) -> None:
        return None

    async def log(self, params: dict[str, Any]) -> None:
        return None

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        try:
            return await self._state.connection.send_raw_request(method, params)
        except MCPError as exc:
            raise UpstreamError(exc.error.code, exc.error.message, exc.error.data) from None
        except NoBackChannelError:
            raise BridgeUnsupported(f"the client cannot receive {method}") from None


class SdkOrigin:
    """The client whose request (served through the SDK) caused an upstream call."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], registry: ClientRegistry) -> None:
        self.ctx = ctx
        self.progress_token, level = _leg_meta(ctx)
        self.modern = is_modern(ctx)
        self.log_level = level if self.modern else None  # a per-request level is 2026-07-28's
        self._registry = registry
        self.last_queued = 0
        """Sequence number of this call's latest message in the client's outbox."""
        self.refusal: ProxyError | None = None
        """Why the call was refused mid-way (the upstream asked what the client cannot answer)."""
        self.scope: trio.CancelScope | None = None
        """The upstream request's scope: `refuse` cancels it (the upstream is told to cancel)."""

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        return _declared_capabilities(self.ctx)

    def refuse(self, error: ProxyError) -> ProxyError:
        """Stop the call: the client gets ``error`` instead of the upstream's answer."""
        self.refusal = error
        if self.scope is not None:
            self.scope.cancel()
        return error

    async def progress(self, params: dict[str, Any]) -> None:
        await self._notify("notifications/progress", params)

    async def log(self, params: dict[str, Any]) -> None:
        await self._notify("notifications/message", params)

    async def _notify(self, method: str, params: dict[str, Any]) -> None:
        """Hand the message to the client's outbox: called from an upstream's reader, it
        must not wait for the client to read (`mcpvisor.actors.fronts.outbox`)."""
        session = self.ctx.session
        outbound = request_outbound_of(session)
        box = self._registry.outbox(connection_of(session))
        if box is None:
            await outbound.notify(method, params)
            return
        seq = box.put_nowait(outbound, method, params)
        if seq:
            self.last_queued = seq

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        ctx = self.ctx
        if is_modern_version(ctx.protocol_version):
            raise BridgeUnsupported(
                f"the client speaks MCP {ctx.protocol_version}, which has no server-to-client requests; "
                f"{method} from a handshake-era server can reach it only during tools/call, prompts/get "
                f"or resources/read (as input_required)"
            )
        state = self._registry.get(connection_of(ctx.session))
        if state is not None and not state.capable(method):
            raise self.refuse(missing_capability(method))
        try:
            return await request_outbound_of(ctx.session).send_raw_request(method, params, None)
        except MCPError as exc:
            raise UpstreamError(exc.error.code, exc.error.message, exc.error.data) from None
        except NoBackChannelError:
            raise BridgeUnsupported(f"this client connection cannot receive {method}") from None


class BridgedOrigin(SdkOrigin):
    """A 2026-07-28 client's call to a handshake-era upstream: the upstream's questions
    are put to the client as ``input_required`` legs; progress goes to the current leg."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], registry: ClientRegistry,
                 parked: ParkedCall) -> None:
        super().__init__(ctx, registry)
        self.parked = parked

    def next_leg(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """The client retried: its progress token and response stream are the new leg's."""
        self.ctx = ctx
        self.last_queued = 0  # the new leg's outbox counts afresh
        token, self.log_level = _leg_meta(ctx)
        if token is not None:
            self.progress_token = token

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        if not declared(self.client_capabilities, method):
            # As the server would refuse this client directly: the call ends with -32021.
            error = missing_capability(method)
            self.parked.refuse(error)
            raise error
        return await self.parked.ask(method, params)

