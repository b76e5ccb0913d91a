"""The dashboard page, the JSON management API and the live feed, as Starlette routes.

Mounted into the streamable HTTP app next to ``/mcp`` (`mcpvisor._serve.serve_http`)
or served alone by ``mcpvisor dashboard``. Every route but ``/healthz`` passes
`DashboardGuard.check` first. The live feed is a Starlette websocket route in the same
hypercorn app: hypercorn's trio worker speaks the websocket protocol itself (wsproto) and
Starlette runs on trio through anyio, so the feed shares the port, the Host/Origin
rules and the cookie with the page; a trio-websocket server would need a second port.

API (JSON in and out; errors are ``{"error": ..., "fields": {...}?}``):

=========================================  ===================================================
``GET /api/status``                        the proxy, every server (with metrics), recent events
``GET /api/servers``                       every configured server: entry (secrets ``***``) + status
``POST /api/servers``                      ``{"name", "entry"}``: add (201)
``GET|PUT|DELETE /api/servers/{name}``     one server; PUT replaces its entry (``***`` keeps a value)
``POST /api/servers/{name}/test``          the ``mcpvisor mcp test`` probe: steps, timings, failure
``POST /api/servers/{name}/enable|disable``
``GET /api/events`` (websocket)            ``snapshot``, then ``event`` and ``status`` messages
``GET /healthz``                           200 while the proxy serves
=========================================  ===================================================

Status codes: 400 not JSON, 401 no token, 403 foreign Origin, 404 no such server, 409 a
server of that name exists or there is no config file to edit, 421 bad Host, 422 a value
the config refuses (``fields`` names the field), 503 the config file is locked.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any, Final

import trio
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from mcpvisor.dashboard._entries import Entries, FieldErrors, masked
from mcpvisor.dashboard._guard import DashboardGuard, set_cookie
from mcpvisor.dashboard._hub import Hub

logger = logging.getLogger(__name__)

STATIC: Final = ("index.html", "app.js", "app.css")
TYPES: Final = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                "css": "text/css; charset=utf-8"}
PAGE_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""The page loads nothing from elsewhere and cannot be framed (clickjacking)."""

FEED_TICK_S: Final = 1.0
"""With no change, the feed sends a fresh status every second (uptimes, metrics)."""

MAX_BODY_BYTES: Final = 256 * 1024
"""A server entry is a few hundred bytes; a larger body is refused."""

TEST_TIMEOUT_S: Final = 15.0
"""`mcpvisor.probe.DEFAULT_PROBE_TIMEOUT_S`, as ``mcpvisor mcp test``."""


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _asset(name: str) -> bytes:
    return resources.files("mcpvisor.dashboard").joinpath("static", name).read_bytes()



DEMO_READ_ONLY: Final = ("the bundled demo config (serve --demo) is part of the package and is not edited: "
                         "to change servers, run `mcpvisor serve --transport http` with your own config "
                         "(`mcpvisor mcp add NAME -- COMMAND ARGS...` creates ./mcpvisor.json)")
"""Why a change is refused under ``serve --demo``: the file is package data (in a source
checkout, a tracked file), and editing it would change every later demo."""


def is_bundled_demo(path: Path | None) -> bool:
    """Whether ``path`` is the demo config shipped inside the package."""
    from mcpvisor.config import demo_config_path

    return path is not None and path.resolve() == demo_config_path()

class Api:
    """The endpoints, bound to one `Hub` and one `DashboardGuard`."""

    def __init__(self, hub: Hub, guard: DashboardGuard) -> None:
        self.hub = hub
        self.guard = guard
        self._cache: tuple[tuple[str, int, int, int], dict[str, dict[str, Any]]] | None = None

    async def _refused(self, conn: HTTPConnection, method: str, *, login: bool = False) -> Response | None:
        headers = {k.lower(): v for k, v in conn.headers.items()}
        refused = await self.guard.check(method, headers, login=login)
        if refused is None:
            return None
        return _error(refused.status, refused.error)

    def _editable(self) -> bool:
        """Whether the page may change servers: a config file that is not the bundled demo."""
        path = self.hub.source.config_path
        return path is not None and not is_bundled_demo(path)

    def _entries(self) -> Entries | None:
        path = self.hub.source.config_path
        return Entries(path) if path is not None else None

    async def _configured(self) -> dict[str, dict[str, Any]]:
        """The config file's servers; read again only when the file changed (the feed asks
        every second for every open page)."""
        entries = self._entries()
        if entries is None:
            return {}
        try:
            st = entries.path.stat()
            signature = (str(entries.path), st.st_mtime_ns, st.st_size, st.st_ino)
            if self._cache is not None and self._cache[0] == signature:
                return self._cache[1]
            servers = await trio.to_thread.run_sync(entries.all)
        except Exception as exc:  # an unreadable file: show what runs, say why in the log
            logger.warning("dashboard: cannot read %s: %s", entries.path, exc)
            return {}
        self._cache = (signature, servers)
        return servers

    # --- pages ----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        name = request.path_params.get("asset", "index.html")
        if name not in STATIC:
            return _error(404, "not found")
        if (refused := await self._refused(request, "GET")) is not None:
            return refused
        return Response(_asset(name), media_type=TYPES[name.rsplit(".", 1)[1]], headers=PAGE_HEADERS)

    async def login(self, request: Request) -> Response:
        if (refused := await self._refused(request, "GET", login=True)) is not None:
            return refused
        token = request.query_params.get("token", "")
        if not await self.guard.accepts(token):
            return _error(401, "this login URL holds no valid token; use the one `mcpvisor serve` printed")
        response = RedirectResponse("/", status_code=303, headers={"Referrer-Policy": "no-referrer"})
        response.headers["Set-Cookie"] = set_cookie(token, secure=self.guard.tls)
        return response

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    # --- reading ----------------------------------------------------------------------------
    async def status(self, request: Request) -> Response:
        if (refused := await self._refused(request, "GET")) is not None:
            return refused
        report = await self.hub.status(await self._configured())
        report["configEditable"] = self._editable()
        return JSONResponse(report)

    async def servers(self, request: Request) -> Response:
        if request.method == "POST":
            return await self.add(request)
        if (refused := await self._refused(request, "GET")) is not None:
            return refused
        configured = await self._configured()
        report = await self.hub.status(configured)
        rows = []
        for server in report.get("servers", []):
            entry = configured.get(server["name"])
            rows.append({"name": server["name"], "entry": masked(entry) if entry is not None else None,
                         "status": server})
        return JSONResponse({"servers": rows, "configEditable": self._editable()})

    async def server(self, request: Request) -> Response:
        if request.method == "PUT":
            return await self.replace(request)
        if request.method == "DELETE":
            return await self.remove(request)
        if (refused := await self._refused(request, "GET")) is not None:
            return refused
        name = request.path_params["name"]
        configured = await self._configured()
        report = await self.hub.status(configured)
        found = [s for s in report.get("servers", []) if s["name"] == name]
        if not found:
            return _error(404, f"no server named {name!r}")
        entry = configured.get(name)
        return JSONResponse({"name": name, "entry": masked(entry) if entry is not None else None,
                             "status": found[0]})

    # --- changing ---------------------------------------------------------------------------
    async def _body(self, request: Request) -> Any:
        """The JSON body, read as it streams in and refused (413) at `MAX_BODY_BYTES`: a
        huge body is never held in memory (a declared Content-Length is refused unread)."""
        too_large = _Bad(413, f"body larger than {MAX_BODY_BYTES} bytes")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise too_large
            chunks.append(chunk)
        data = b"".join(chunks)
        try:
            return json.loads(data or b"{}")
        except ValueError as exc:
            raise _Bad(400, f"the body is not JSON: {exc}") from None

    async def _edit(self, request: Request, change: Any, status: int = 200) -> Response:
        """Run ``change(entries, body)`` in a thread, then have the proxy apply the file."""
        from mcpvisor._atomic import LockTimeout
        from mcpvisor.store import DuplicateServer, InvalidConfig, StoreError, UnknownServer

        if (refused := await self._refused(request, request.method)) is not None:
            return refused
        entries = self._entries()
        if entries is None:
            return _error(409, "this proxy was not started from a config file: there is nothing to edit")
        if is_bundled_demo(entries.path):
            return _error(409, DEMO_READ_ONLY)
        try:
            body = await self._body(request)
            result = await trio.to_thread.run_sync(change, entries, body)
        except _Bad as bad:
            return _error(bad.status, bad.message)
        except FieldErrors as err:
            return _error(422, str(err), fields=err.fields)
        except UnknownServer as err:
            return _error(404, str(err), suggestions=err.suggestions)
        except DuplicateServer as err:
            return _error(409, str(err).replace("; use --force to replace it", "; edit it instead"))
        except InvalidConfig as err:
            return _error(422, str(err))
        except LockTimeout as err:
            return _error(503, str(err))
        except (StoreError, OSError) as err:
            return _error(409, str(err))
        reload = await self.hub.source.reload()
        return JSONResponse({**result, "reload": reload}, status_code=status)

    async def add(self, request: Request) -> Response:
        def change(entries: Entries, body: Any) -> dict[str, Any]:
            if not isinstance(body, dict):
                raise _Bad(400, 'expected {"name": NAME, "entry": {...}}')
            name, entry = str(body.get("name") or ""), body.get("entry")
            return {"added": name, "entry": masked(entries.add(name, entry))}

        return await self._edit(request, change, 201)

    async def replace(self, request: Request) -> Response:
        name = request.path_params["name"]

        def change(entries: Entries, body: Any) -> dict[str, Any]:
            entry = body.get("entry", body) if isinstance(body, dict) else body
            return {"replaced": name, "entry": masked(entries.replace(name, entry))}

        return await self._edit(request, change)

    async def remove(self, request: Request) -> Response:
        name = request.path_params["name"]

        def change(entries: Entries, body: Any) -> dict[str, Any]:
            entries.remove(name)
            return {"removed": name}

        return await self._edit(request, change)

    async def switch(self, request: Request) -> Response:
        name, verb = request.path_params["name"], request.path_params["verb"]
        if verb not in ("enable", "disable"):
            return _error(404, "not found")

        def change(entries: Entries, body: Any) -> dict[str, Any]:
            changed = entries.set_enabled(name, verb == "enable")
            return {"server": name, "enabled": verb == "enable", "changed": changed}

        return await self._edit(request, change)

    async def oauth_login(self, request: Request) -> Response:
        """"Log in" on a server that needs one: start its OAuth login in the proxy and answer
        ``{"url": ...}``, the authorization URL for the person to open."""
        if (refused := await self._refused(request, "POST")) is not None:
            return refused
        name = request.path_params["name"]
        try:
            url = await self.hub.source.login(name)
        except ValueError as exc:
            return _error(409, str(exc))
        return JSONResponse({"server": name, "url": url})

    async def test(self, request: Request) -> Response:
        """The probe behind ``mcpvisor mcp test``, on the entry as the file has it now."""
        from mcpvisor.config import ConfigError, load_config
        from mcpvisor.probe import probe_server

        if (refused := await self._refused(request, "POST")) is not None:
            return refused
        name = request.path_params["name"]
        path = self.hub.source.config_path
        if path is None:
            return _error(409, "this proxy was not started from a config file")
        try:
            config = await trio.to_thread.run_sync(load_config, path)
        except ConfigError as err:
            return _error(422, str(err))
        spec = config.servers.get(name)
        if spec is None:
            return _error(404, f"no server named {name!r} in {path}")
        result = await probe_server(spec, limit=TEST_TIMEOUT_S, reaper=self.hub.source.reaper)
        return JSONResponse({**result.to_json(with_tools=True), "enabled": spec.enabled})

    # --- the live feed ----------------------------------------------------------------------
    async def feed(self, websocket: WebSocket) -> None:
        """``snapshot`` at once, then each change as ``event`` followed by a ``status``;
        a ``status`` every `FEED_TICK_S` otherwise."""
        refused = await self.guard.check("GET", {k.lower(): v for k, v in websocket.headers.items()})
        if refused is not None:
            await websocket.close(code=1008, reason=refused.error[:120])
            return
        await websocket.accept()
        try:
            report = await self.hub.status(await self._configured())
            seq = report["seq"]
            await websocket.send_json({"type": "snapshot", "status": report})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._drain, websocket, nursery.cancel_scope)
                while True:
                    changed = self.hub.changed
                    with trio.move_on_after(FEED_TICK_S):
                        await changed.wait()
                    for event in self.hub.events_since(seq):
                        await websocket.send_json({"type": "event", "event": event})
                        seq = event["seq"]
                    report = await self.hub.status(await self._configured())
                    await websocket.send_json({"type": "status", "status": report})
        except (WebSocketDisconnect, trio.BrokenResourceError, trio.ClosedResourceError, RuntimeError):
            return

    async def _drain(self, websocket: WebSocket, scope: trio.CancelScope) -> None:
        """Read (and ignore) what the page sends, to see it leave."""
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
        finally:
            scope.cancel()


class _Bad(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def dashboard_routes(hub: Hub, guard: DashboardGuard) -> list[BaseRoute]:
    """The routes to mount next to ``/mcp``."""
    api = Api(hub, guard)
    return [
        Route("/", api.page),
        Route("/static/{asset}", api.page),
        Route("/login", api.login),
        Route("/healthz", api.healthz),
        Route("/api/status", api.status),
        Route("/api/servers", api.servers, methods=["GET", "POST"]),
        Route("/api/servers/{name}", api.server, methods=["GET", "PUT", "DELETE"]),
        Route("/api/servers/{name}/test", api.test, methods=["POST"]),
        Route("/api/servers/{name}/login", api.oauth_login, methods=["POST"]),
        Route("/api/servers/{name}/{verb}", api.switch, methods=["POST"]),
        WebSocketRoute("/api/events", api.feed),
    ]
