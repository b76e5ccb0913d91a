"""The SDK's side of the HTTP front, imported and built the first time a request needs it.

``serve --transport http`` used to import the SDK's streamable-HTTP stack (its session
manager, Starlette, the bearer middleware, pydantic's models of every message: about 0.4 s
of a 0.5 s start) before it bound its port. The front now binds first and answers what it
serves itself (`mcpvisor.actors.fronts.http_own`: a handshake-era session's ``initialize``,
``ping``, the lists and its calls; `mcpvisor.actors.fronts.fleet`: ``/healthz``,
``/readyz``); `SdkApp` stands where the SDK's app stood and, for the first request that
needs it (another method, a GET stream, the dashboard, a 2026-07-28 request, a front that
requires a token), imports the SDK in a worker thread (`mcpvisor.actors.fronts.sdk_load`:
the loop keeps serving meanwhile), builds the app as the front always built it, enters its
lifespan (the session manager's task group) and serves the request; later ones go straight
to it. Requests that arrive meanwhile wait for the same build.

A front that requires a token from its start begins the build at once (every MCP request
needs the SDK's bearer check), without holding up the bind; so does a TLS front, which
hypercorn serves whole (its lifespan included) and which therefore builds before serving.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from mcpvisor.actors.fronts.asgi import Receive, Scope, Send
from mcpvisor.actors.fronts.sdk_load import load_sdk

logger = logging.getLogger(__name__)

__all__ = ["HTTP_SDK_MODULES", "SdkApp"]

App = Callable[[Scope, Receive, Send], Awaitable[None]]

HTTP_SDK_MODULES: Final = (
    "mcp.server.streamable_http_manager",
    "mcp.server.auth.middleware.bearer_auth",
    "mcp.server.auth.settings",
    "mcp.server.transport_security",
    "mcpvisor.dashboard._app",
)
"""What building the front's SDK app imports besides the SDK's server (the rest it loads
comes with these)."""


class SdkApp:
    """The SDK's streamable-HTTP app (with the dashboard's routes), built on first need.

    Args:
        build: makes the app and returns it with the session manager; runs on the loop,
            once the SDK is imported.
        nursery: where the session manager's lifespan runs, for as long as the front serves.
    """

    def __init__(self, build: Callable[[], tuple[App, Any]], nursery: trio.Nursery) -> None:
        self._build = build
        self._nursery = nursery
        self.app: App | None = None
        self.manager: Any = None
        """The SDK's session manager, once built (None before)."""
        self._done: trio.Event | None = None
        self._failure: BaseException | None = None

    @property
    def built(self) -> bool:
        return self.app is not None

    def start(self) -> None:
        """Begin importing and building now, without waiting for it (once)."""
        if self._done is None:
            self._done = trio.Event()
            self._nursery.start_soon(self._load)

    async def ready(self) -> App:
        """The app, imported and built first if it is not yet.

        Raises:
            RuntimeError: building it failed (logged once, with its cause).
        """
        if self.app is not None:
            return self.app
        self.start()
        assert self._done is not None
        await self._done.wait()
        if self.app is None:
            raise RuntimeError("the HTTP front could not load the MCP SDK") from self._failure
        return self.app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "lifespan":
            await _lifespan(receive, send)  # the session manager's is held by `_load`
            return
        app = self.app if self.app is not None else await self.ready()
        await app(scope, receive, send)

    async def _load(self) -> None:
        assert self._done is not None
        try:
            await load_sdk(*HTTP_SDK_MODULES)
            app, manager = self._build()
            await self._nursery.start(_run_lifespan, manager)
            self.manager = manager
            self.app = app
        except Exception as exc:
            logger.exception("the HTTP front could not load the MCP SDK")
            self._failure = exc
        finally:
            self._done.set()


async def _lifespan(receive: Receive, send: Send) -> None:
    """Answer a server's ASGI lifespan (hypercorn's, on a TLS front) with nothing to do."""
    while True:
        message = await receive()
        kind = message.get("type")
        if kind == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif kind == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _run_lifespan(manager: Any, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Hold the session manager's lifespan (its sessions' task group) open until cancelled."""
    async with manager.run():
        task_status.started()
        await trio.sleep_forever()
