"""Every reach into the `mcp` SDK's private names, in one place, checked at import.

The SDK's public API cannot hear a connection rather than a request, send a request
under the proxy's own id, stamp the 2026-07-28 envelope on a raw request, feed its
server from our own streams, or end one streamable-HTTP session, so mcpvisor uses a
few private names. Each is a place a new SDK release can break, so none is spelled
anywhere but here: the rest of the package calls the accessors below.

Checked against mcp 2.3.x (`CHECKED_SDK`, the range ``pyproject.toml`` pins). Importing
this module checks that the installed SDK still has every name it reaches for and
raises ImportError naming each one missing, so a changed SDK fails at start-up rather
than in the middle of a client's call.

None of these is on the stdio fast path (it routes bytes and never meets an SDK object).
`connection_of` runs once or twice per request the SDK server serves; as a plain function
it costs about 15 ns more than the bare attribute read (CPython 3.11), against the tens
of microseconds the SDK spends on the request.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

import mcp.server.runner as _runner
from mcp.client.session import ClientSession
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.connection import Connection
    from mcp.shared.dispatcher import DispatchContext, Dispatcher

__all__ = [
    "CHECKED_SDK",
    "MCP_DEFAULT_SSE_READ_TIMEOUT",
    "MCP_DEFAULT_TIMEOUT",
    "adopt_http_session",
    "bus_listeners",
    "client_capabilities",
    "connection_of",
    "dispatcher_of",
    "event_store_of",
    "give_each_session",
    "http_session",
    "http_session_transport",
    "http_transports",
    "maybe_connection_of",
    "missing",
    "prefix_session_ids",
    "request_outbound_of",
    "resumed_stream",
    "serve_dual_era_loop",
    "stamp",
    "tool_output_schemas",
]

CHECKED_SDK: Final = "mcp>=2.3.0,<2.4"
"""The SDK versions every reach here was read against and tested with."""


def _set_in_init(cls: type, *names: str) -> list[str]:
    """Which of ``names`` ``cls.__init__`` never mentions.

    The SDK sets these attributes on the instance in ``__init__`` (there is no class
    attribute to look up), so the check reads the names the constructor's code uses.
    """
    code = getattr(cls.__dict__.get("__init__"), "__code__", None)
    used = set(code.co_names) if code is not None else set()
    return [f"{cls.__module__}.{cls.__qualname__}.{name}" for name in names if name not in used]


def missing() -> list[str]:
    """The private SDK names this module needs that the installed SDK lacks (empty: all there)."""
    gone = [
        *_set_in_init(ServerSession, "_connection", "_request_outbound"),
        *_set_in_init(Server, "_session_manager"),
        *_set_in_init(StreamableHTTPSessionManager, "_server_instances", "_session_owners"),
        *_set_in_init(StreamableHTTPServerTransport, "_event_store", "_request_streams"),
        *_set_in_init(InMemorySubscriptionBus, "_listeners"),
        *_set_in_init(ClientSession, "_stamp", "_dispatcher", "_tool_output_schemas"),
    ]
    for method in ("_admit_session", "_serve_opening_request"):
        if not callable(getattr(StreamableHTTPSessionManager, method, None)):
            gone.append(f"mcp.server.streamable_http_manager.StreamableHTTPSessionManager.{method}")
    if not callable(getattr(ClientSession, "_build_capabilities", None)):
        gone.append("mcp.client.session.ClientSession._build_capabilities")
    if not callable(getattr(_runner, "serve_dual_era_loop", None)):
        gone.append("mcp.server.runner.serve_dual_era_loop")
    try:
        from mcp.shared import _httpx_utils
    except ImportError:
        gone.append("mcp.shared._httpx_utils")
    else:
        for name in ("MCP_DEFAULT_TIMEOUT", "MCP_DEFAULT_SSE_READ_TIMEOUT"):
            if not isinstance(getattr(_httpx_utils, name, None), int | float):
                gone.append(f"mcp.shared._httpx_utils.{name}")
    return gone


def _installed() -> str:
    try:
        return version("mcp")
    except PackageNotFoundError:
        return "unknown"


_GONE = missing()
if _GONE:
    raise ImportError(
        f"mcpvisor needs SDK internals that the installed mcp {_installed()} lacks: {', '.join(_GONE)} "
        f"(mcpvisor was checked against {CHECKED_SDK}; install a version in that range)"
    )

from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT  # noqa: E402

serve_dual_era_loop = _runner.serve_dual_era_loop
"""The SDK's loop serving either protocol era on one connection fed by our own streams
(public in ``mcp.server.runner`` but not re-exported by the SDK, so it may move)."""

# --- the server side: the SDK front -------------------------------------------------
def connection_of(session: ServerSession) -> Connection:
    """The connection a request's session belongs to (``.state``, ``.session_id``, ``.exit_stack``)."""
    return session._connection


def request_outbound_of(session: ServerSession) -> DispatchContext[Any]:
    """The channel back to the client of the request that made ``session``
    (``.notify``, ``.send_raw_request``): progress and server-to-client requests."""
    return session._request_outbound


def maybe_connection_of(session: object) -> Connection | None:
    """`connection_of` for a session that may not be the SDK's (None then)."""
    return getattr(session, "_connection", None)


def http_session_transport(server: Server[Any], session_id: str) -> StreamableHTTPServerTransport | None:
    """The streamable-HTTP transport serving session ``session_id`` of ``server``, if the
    server serves HTTP and that session is open (to terminate a stalled client)."""
    manager = server._session_manager
    if manager is None:
        return None
    return manager._server_instances.get(session_id)


def http_session(manager: StreamableHTTPSessionManager,
                 session_id: str) -> tuple[StreamableHTTPServerTransport, Any] | None:
    """The transport of open session ``session_id`` and the principal that opened it
    (None: no owner recorded), or None when the manager has no such session."""
    transport = manager._server_instances.get(session_id)
    if transport is None:
        return None
    return transport, manager._session_owners.get(session_id)


def http_transports(manager: StreamableHTTPSessionManager) -> list[StreamableHTTPServerTransport]:
    """The transport of every session ``manager`` holds open now."""
    return list(manager._server_instances.values())


def event_store_of(transport: StreamableHTTPServerTransport) -> Any:
    """The event store the session's transport numbers its SSE events with (or None)."""
    return transport._event_store


def resumed_stream(transport: StreamableHTTPServerTransport, stream_id: str) -> Any:
    """Where the session's transport takes the later events of ``stream_id`` for a client
    that came back with ``Last-Event-ID`` (an anyio send stream of ``EventMessage``), or None
    while no such client waits."""
    pair = transport._request_streams.get(stream_id)
    return pair[0] if pair is not None else None


def bus_listeners(bus: InMemorySubscriptionBus) -> list[Callable[[Any], None]]:
    """The listen streams subscribed to ``bus`` now, to call without awaiting
    (``publish`` adds a checkpoint the router must not wait on)."""
    return list(bus._listeners.values())


# --- the client side: links to upstreams ---------------------------------------------
def stamp(session: ClientSession, data: dict[str, Any], opts: dict[str, Any]) -> None:
    """Stamp a raw request or notification (``data``) and its send options as the
    session stamps its own: the negotiated era's ``_meta`` envelope."""
    session._stamp(data, opts)  # type: ignore[arg-type]


def dispatcher_of(session: ClientSession) -> Dispatcher[Any]:
    """The session's JSON-RPC dispatcher, to send a request under our own id."""
    return session._dispatcher


def client_capabilities(session: ClientSession, protocol_version: str) -> types.ClientCapabilities:
    """The client capabilities ``session`` declares at ``protocol_version``."""
    return session._build_capabilities(protocol_version)


def tool_output_schemas(session: ClientSession) -> dict[str, Any]:
    """The session's cache of tool output schemas by tool name (None: the tool has none)."""
    return session._tool_output_schemas


def give_each_session(manager: StreamableHTTPSessionManager,
                      store: Callable[[], Any]) -> None:
    """Make ``manager`` give every session it admits its own event store, ``store()``.

    The SDK hands one event store to every session (``_admit_session`` builds the
    session's transport; the transport keeps the store in ``_event_store``)."""
    admit = manager._admit_session

    def admit_with_own_store(requestor: Any) -> Any:
        transport = admit(requestor)
        if transport is not None:
            transport._event_store = store()
        return transport

    manager._admit_session = admit_with_own_store  # type: ignore[method-assign]


async def adopt_http_session(manager: StreamableHTTPSessionManager, session_id: str, owner: Any, store: Any,
                             scope: Any, receive: Any, send: Any) -> StreamableHTTPServerTransport:
    """Make ``session_id``, a session the front opened itself, one of ``manager``'s: a
    transport under that id (with ``store``, the session's event store) owned by ``owner``
    (the principal that opened it; None: none), its server task started in the manager's
    task group and its opening request (``scope``/``receive``/``send``: the client's
    ``initialize``, replayed) served through the manager's own ``_serve_opening_request``,
    which discards the session, as the SDK discards any, when that request fails. The
    manager's session limit is not applied: the front admitted the session when it opened.
    Returns the transport."""
    transport = StreamableHTTPServerTransport(
        mcp_session_id=session_id,
        is_json_response_enabled=manager.json_response,
        event_store=store,
        security_settings=manager.security_settings,
        retry_interval=manager.retry_interval,
        idle_timeout=manager.session_idle_timeout,
    )
    if owner is not None:
        manager._session_owners[session_id] = owner
    manager._server_instances[session_id] = transport
    await manager._serve_opening_request(transport, scope, receive, send)
    return transport


def prefix_session_ids(manager: StreamableHTTPSessionManager, prefix: str) -> None:
    """Make every session id ``manager`` mints begin with ``prefix``.

    The SDK mints the id in ``_admit_session`` (a random hex string on the session's
    transport, the key of ``_server_instances`` and ``_session_owners``), before the
    opening request is served: renaming the session there is what every later lookup,
    the ``Mcp-Session-Id`` header of each answer and the HTTP fast path see."""
    admit = manager._admit_session

    def admit_prefixed(requestor: Any) -> Any:
        transport = admit(requestor)
        minted = transport.mcp_session_id if transport is not None else None
        if transport is None or minted is None:
            return transport
        named = f"{prefix}{minted}"
        transport.mcp_session_id = named
        manager._server_instances[named] = manager._server_instances.pop(minted)
        if minted in manager._session_owners:
            manager._session_owners[named] = manager._session_owners.pop(minted)
        return transport

    manager._admit_session = admit_prefixed  # type: ignore[method-assign]
