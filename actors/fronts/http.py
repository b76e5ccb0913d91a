"""The streamable HTTP front: MCP at ``/mcp`` on the front's own HTTP/1.1 server
(`mcpvisor.actors.fronts.http_server`; hypercorn for TLS and websocket upgrades), the SDK's
session manager behind our guards.

Owns `serve_http_front`, which builds the SDK's streamable-HTTP app for the shared front
(Host/Origin rules, the token verifier, body and session limits), puts the frame checks
in front of its session manager, lets the caller add routes beside ``/mcp`` (the
dashboard), and serves it until cancelled or until the proxy's drain is done; and
`FrameGuard`, an ASGI wrapper of the SDK's ``StreamableHTTPSessionManager.asgi_app``
(so it runs after the token and Host/Origin checks, for POSTs to ``/mcp`` only). It reads
each POST body (bounded by the body limit the SDK enforces) and answers at once, with
HTTP 400 and a JSON-RPC error, what the SDK would mishandle:

* a body nested deeper than `MAX_JSON_DEPTH`, not JSON, not one object, or with an id
  that is not a string or an integer (the SDK took a float, boolean, object or array id
  for a notification and answered 202, leaving the client waiting forever);
* a request whose id is already in flight on the same session: the SDK keys its
  per-request streams by ``str(id)``, so a second request with that id (``1`` and
  ``"1"`` alike) silently replaced the first, whose POST was then never answered.

Everything else reaches the SDK unchanged, the body replayed as it was read.

SSE streams are resumable as the SDK's own server makes them: each opens with a priming
event (an id and ``retry:``), every event is numbered, and a client whose stream broke
mid-call comes back with ``Last-Event-ID`` and gets the rest; each session keeps its own
events (`mcpvisor.actors.fronts.replay`, bounded across the front).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import trio
from msgspec import UNSET

from mcpvisor.actors.core.vocabulary import HTTP_PATH
from mcpvisor.actors.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcpvisor.actors.fronts.asgi import Receive, Scope, Send, read_body
from mcpvisor.actors.fronts.fleet import FleetDoor, Ready
from mcpvisor.actors.fronts.frames import (
    MAX_JSON_DEPTH,
    Refusal,
    decode_client_frame,
    duplicate_id,
    request_refusal,
)
from mcpvisor.actors.fronts.http_own import SESSION_HEADER, VERSION_HEADER
from mcpvisor.actors.fronts.http_own_answers import answer_refusal

if TYPE_CHECKING:
    from mcp.server.auth.settings import AuthSettings

    from mcpvisor.actors.fronts.auth import HostRules, Verifier
    from mcpvisor.actors.fronts.front import Front
    from mcpvisor.actors.fronts.http_own import OwnSessions
    from mcpvisor.actors.fronts.http_sdk import SdkApp
    from mcpvisor.actors.fronts.replay import ReplayBudget
    from mcpvisor.actors.fronts.views import ToolsetViews

logger = logging.getLogger(__name__)

__all__ = ["HTTP_PATH", "MAX_JSON_DEPTH", "FrameGuard", "HttpLimits", "open_while_unguarded",
           "own_event_stores", "serve_http_front"]

ANONYMOUS: Final = "anonymous"
"""Who a request on an open front (no token configured now) is, to the SDK's session checks."""
GRACEFUL_CLOSE_S: Final = 2.0
"""After the drain, how long the server lets open responses finish (hypercorn's ``graceful_timeout``)."""


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of the HTTP front (``settings``)."""

    max_body: int
    """Largest request body (``maxMessageBytes``)."""
    max_sessions: int
    session_idle_timeout: float
    handshake_timeout: float
    """From accept until a request's headers are complete, and the TLS handshake."""


async def serve_http_front(
    front: Front,
    host: str,
    port: int,
    *,
    limits: HttpLimits,
    rules: HostRules,
    verifier: Verifier | None,
    sdk_parts: Callable[[], tuple[AuthSettings | None, Sequence[Any]]],
    required_scopes: tuple[str, ...] = (),
    certfile: str | None = None,
    keyfile: str | None = None,
    views: ToolsetViews | None = None,
    fast_path: bool = True,
    ready: Ready | None = None,
    replica: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``front`` over streamable HTTP at ``http(s)://host:port/mcp`` until cancelled,
    or until its drain is done (`mcpvisor.actors.fronts.drain`). ``sdk_parts`` gives, once the
    SDK is loaded, the SDK's ``AuthSettings`` and the Starlette routes served beside ``/mcp``
    (the dashboard); with ``views`` each toolset's fixed view is served at
    ``/mcp/toolset/NAME`` (`mcpvisor.actors.fronts.views`). With ``fast_path``, sessions the
    front opens itself and ``tools/call`` requests are served by
    `mcpvisor.actors.fronts.http_own` and `mcpvisor.actors.fronts.http_fast` in front of the
    SDK's app, which is built the first time a request needs it
    (`mcpvisor.actors.fronts.http_sdk`). ``/healthz`` and ``/readyz`` (``ready``: the store's
    health) and the drain's 503 are answered before all of it
    (`mcpvisor.actors.fronts.fleet`). With ``replica``, every session id begins with
    ``replica.`` (a balancer routes on it). ``required_scopes``: what a token must carry.
    ``task_status.started`` receives the URL bound."""
    from mcpvisor.actors.fronts.http_sdk import SdkApp
    from mcpvisor.actors.fronts.http_server import serve
    from mcpvisor.actors.fronts.http_settings import ServerSettings
    from mcpvisor.actors.fronts.replay import RETRY_MS, ReplayBudget

    budget = ReplayBudget()
    guard = FrameGuard(_unbuilt, limits.max_body)  # in front of the session manager, once built

    def build() -> tuple[App, Any]:
        from mcp.server.transport_security import TransportSecuritySettings

        from mcpvisor.actors.fronts.limits import install

        auth, routes = sdk_parts()
        install(front.server)
        allowed_hosts, allowed_origins = rules.sdk_lists()
        app = front.server.streamable_http_app(
            streamable_http_path=HTTP_PATH,
            host=host,
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins
            ),
            max_request_body_size=limits.max_body,
            max_sessions=limits.max_sessions,
            session_idle_timeout=limits.session_idle_timeout,
            auth=auth,
            token_verifier=verifier,
            custom_starlette_routes=list(routes),
            event_store=budget.session(),  # type: ignore[arg-type]  # replaced by each session's own
            retry_interval=RETRY_MS,
        )
        manager = front.server.session_manager  # checks frames after the token and Host/Origin ones
        own_event_stores(manager, budget)
        if replica is not None:
            from mcpvisor.actors.sdk_compat import prefix_session_ids

            prefix_session_ids(manager, f"{replica}.")
        guard.app = manager.asgi_app
        manager.asgi_app = guard  # type: ignore[assignment]
        if verifier is not None:
            open_while_unguarded(app, verifier)
        if views is not None:
            from mcpvisor.actors.fronts.views import ViewGate, ViewPaths

            manager.asgi_app = ViewGate(manager.asgi_app, views)  # type: ignore[assignment]  # after the token check
            app = ViewPaths(app, HTTP_PATH)  # type: ignore[assignment]
        return app, manager

    # Bounds on a connection that has not sent a whole request: the keep-alive timer runs
    # from the accept until a request's headers are complete (slowloris), and TLS has its own
    # handshake timer (60 s by default). read_timeout stays unset: it bounds every read, so it
    # would also cut an SSE stream or a long call whose client rightly sends nothing.
    config = ServerSettings(bind=[f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
                            graceful_timeout=GRACEFUL_CLOSE_S, keep_alive_timeout=limits.handshake_timeout,
                            ssl_handshake_timeout=limits.handshake_timeout,
                            errorlog=logging.getLogger("hypercorn.error"),
                            certfile=certfile or None, keyfile=(keyfile or None) if certfile else None)

    async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        # Once the drain has answered every request (SIGTERM, SIGINT), the server stops
        # accepting, lets the open responses finish (graceful_timeout) and returns.
        await serve(app, config, lifespan=_no_lifespan, shutdown_trigger=front.drain.done.wait,
                    task_status=task_status)
        nursery.cancel_scope.cancel(reason="the HTTP front closed")

    fast = None
    own = None
    try:
        async with trio.open_nursery() as nursery:
            sdk = SdkApp(build, nursery)
            app: App = sdk
            if certfile or not fast_path or (verifier is not None and verifier.guarding()):
                sdk.start()  # every request will need it: build it while the port opens
            if fast_path:
                from mcpvisor.actors.fronts.http_fast import HttpFast
                from mcpvisor.actors.fronts.http_own import OwnSessions

                own = OwnSessions(sdk, front.clients, budget, max_sessions=limits.max_sessions,
                                  idle_timeout=limits.session_idle_timeout,
                                  prefix=f"{replica}." if replica is not None else "", busy=lambda sid: False)
                app = fast = HttpFast(app, front, sdk=sdk, own=own, rules=rules, verifier=verifier,
                                      required_scopes=required_scopes, views=views, guard=guard,
                                      nursery=nursery, max_body=limits.max_body, anonymous=ANONYMOUS)
                own.busy = fast.has_calls
                own.tables = fast.tables
                nursery.start_soon(own.expire)
                front.drain.add_fast_path(fast)  # its calls are answered when the proxy stops
            door = FleetDoor(app, front.drain, ready=ready, max_body=limits.max_body, mcp_path=HTTP_PATH)
            nursery.start_soon(_end_streams_when_drained, front, sdk, own, door)
            app = door
            binds: list[str] = await nursery.start(started)
            door.listening = True
            task_status.started(binds[0].rstrip("/") + HTTP_PATH)
    finally:
        if fast is not None:
            front.drain.discard_fast_path(fast)


async def _unbuilt(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("the SDK's session manager is not built yet")


@asynccontextmanager
async def _no_lifespan() -> AsyncIterator[None]:
    """The app's lifespan as the server runs it: nothing (the SDK's app, when it is built,
    holds its session manager's lifespan itself: `mcpvisor.actors.fronts.http_sdk`)."""
    yield


async def _end_streams_when_drained(front: Front, sdk: SdkApp, own: OwnSessions | None,
                                    door: FleetDoor) -> None:
    """Once the drain has answered what was in flight, end each session's notification
    stream (GET) rather than leave it to be cut when the front closes: it opened with a
    ``retry:`` hint, so the client comes back after it, through its balancer, to a
    replica that is alive (which answers 404: the client opens a new session there)."""
    await front.drain.done.wait()
    ended = 0
    for session in list(own.sessions.values()) if own is not None else ():
        if session.stream is not None:  # a session the front opened: its own stream
            session.stream.end()
            ended += 1
    transports: list[Any] = []
    if sdk.manager is not None:  # else every session is still the front's own: none has a stream
        from mcpvisor.actors.sdk_compat import http_transports

        transports = http_transports(sdk.manager)
    for transport in transports:
        transport.close_standalone_sse_stream()
    logger.info("drained: %d new request(s) answered 503 for the balancer to retry; %d session stream(s) "
                "ended", door.refused, ended + len(transports))


def own_event_stores(manager: Any, budget: ReplayBudget) -> None:
    """Give every session ``manager`` opens its own event store, drawn from ``budget``.

    The SDK hands one event store to every session, and keys a POST's SSE stream by its
    request id: one shared store would mix session A's stream "1" with session B's, and
    replay one client's results to another that names their event ids.

    Raises:
        RuntimeError: the manager was built without an event store (the SDK internals it
            needs are checked when `mcpvisor.actors.sdk_compat` is imported).
    """
    from mcpvisor.actors.sdk_compat import give_each_session

    if getattr(manager, "event_store", None) is None:
        raise RuntimeError("the SDK's session manager has no event store to give each session its own of")
    give_each_session(manager, budget.session)


def open_while_unguarded(app: Any, verifier: Verifier) -> None:
    """Make the SDK's bearer check of ``app`` admit everyone while ``verifier`` guards nothing.

    The SDK decides once, when it builds the app, whether ``/mcp`` needs a token; we give it
    a verifier always and swap its authentication backend for one that asks
    ``verifier.guarding()`` at every request: an open loopback front stays open, and a
    token a hot reload adds is required from the next request on.

    Raises:
        RuntimeError: the SDK no longer builds the app with a bearer backend to replace
            (a front that would silently ignore tokens must not start).
    """
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
    from mcp.server.auth.provider import AccessToken
    from starlette.authentication import AuthCredentials
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.requests import HTTPConnection

    class _Backend(BearerAuthBackend):
        async def authenticate(self, conn: HTTPConnection) -> Any:
            if not verifier.guarding():
                anonymous = AccessToken(token="", client_id=ANONYMOUS, scopes=[])
                return AuthCredentials([]), AuthenticatedUser(anonymous)
            return await super().authenticate(conn)

    for middleware in app.user_middleware:
        backend = middleware.kwargs.get("backend")
        if middleware.cls is AuthenticationMiddleware and isinstance(backend, BearerAuthBackend):
            middleware.kwargs["backend"] = _Backend(
                backend.token_verifier, resource_server_url=backend.resource_server_url
            )
            return
    raise RuntimeError("the SDK's streamable HTTP app has no bearer authentication to extend")

App = Callable[[Scope, Receive, Send], Awaitable[None]]



class FrameGuard:
    """Check each POSTed JSON-RPC message before the SDK's session manager serves it."""

    def __init__(self, app: App, max_body: int) -> None:
        self.app = app
        self.max_body = max_body
        self._in_flight: dict[str, set[str]] = {}
        """Request ids in flight by session id, as ``str(id)`` (the SDK's own key)."""

    def in_flight_ids(self, session_id: str) -> set[str]:
        """The ids in flight on ``session_id`` (the HTTP fast path adds its own calls' ids)."""
        return self._in_flight.setdefault(session_id, set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        body, replay = await read_body(receive, self.max_body)
        if body is None:
            await self.app(scope, replay, send)  # over the limit or disconnected: the SDK answers (413)
            return
        env = decode_client_frame(body)
        if isinstance(env, Refusal):
            await answer_refusal(send, env)
            return
        refusal = request_refusal(env)
        if refusal is not None:
            await answer_refusal(send, refusal)
            return
        rid = env.id
        session = headers.get(SESSION_HEADER)
        version = headers.get(VERSION_HEADER)
        stateless = version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
        if env.method is UNSET or rid is UNSET or rid is None or session is None or stateless:
            await self.app(scope, replay, send)
            return
        key = str(rid)
        ids = self._in_flight.setdefault(session.decode("latin-1"), set())
        if key in ids:
            await answer_refusal(send, duplicate_id(rid))
            return
        ids.add(key)
        try:
            await self.app(scope, replay, send)
        finally:
            ids.discard(key)
            if not ids:
                self._in_flight.pop(session.decode("latin-1"), None)
