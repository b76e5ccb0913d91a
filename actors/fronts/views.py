"""Fixed views: a client that sees one toolset, chosen by the URL it connects to or the token it presents.

The 2026-07-28 revision says ``tools/list`` must not vary per connection or as a side
effect of other requests on it, but may vary by the authorization presented. Equipping
a toolset with a management tool changes what *every* client of the proxy sees; a fixed
view gives one client one toolset without touching anyone else:

* the URL: ``/mcp/toolset/NAME`` on the HTTP front, ``/toolset/NAME`` on the websocket
  front, serve toolset NAME (404 naming the toolsets for one that does not exist);
* the token: a named token that carries a toolset (``settings.authTokens: {"ci":
  {"token": ..., "toolset": "dev"}}``) sees that toolset on ``/mcp`` (or ``/``), and
  may not open another toolset's URL (403).

A view lists the toolset's tools as the proxy would list them with the toolset equipped
(same names, pins, lazy servers, discovery), without the management tools, and its
calls go through the same plan read from the view, so a name outside it is refused as
unknown. Resources and prompts are the proxy's own. Its clients hear ``list_changed``
for tools only when the view's own list changes.

Owns `ToolsetViews` (the views, rebuilt when the catalog or the toolset changes, and
which of them changed), `choose` (which view a request gets, or the HTTP refusal),
`view_name` (the view of a request being handled), the two ASGI pieces of the HTTP front
(`ViewPaths` before the SDK's app, `ViewGate` after its token check) and the websocket
path rule (`ws_toolset`).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.core.model import Toolset

HTTP_TOOLSET_PREFIX: Final = "/mcp/toolset/"
"""``/mcp/toolset/NAME``: the HTTP front's URL of toolset NAME's view."""
WS_TOOLSET_PREFIX: Final = "/toolset/"
"""``ws://host:port/toolset/NAME``: the websocket front's URL of toolset NAME's view."""

URL_KEY: Final = "mcpvisor.url_toolset"
"""ASGI scope key: the toolset a request's URL names (set by `ViewPaths`)."""
VIEW_KEY: Final = "mcpvisor.view"
"""ASGI scope key: the view the request is served (set by `ViewGate`; absent: the proxy's)."""

CONNECTION_VIEW: ContextVar[str | None] = ContextVar("mcpvisor_connection_view", default=None)
"""The view of the connection being served, for fronts whose requests carry no HTTP
request (the websocket front sets it around each connection)."""

NOT_FOUND: Final = 404
FORBIDDEN: Final = 403


class ViewRefused(Exception):
    """A request may not have the view it asked for: the HTTP status and why."""

    def __init__(self, status: int, message: str, toolsets: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.toolsets = toolsets

    def body(self) -> bytes:
        """A JSON-RPC error (id null), as the SDK answers its own HTTP-level refusals."""
        error = {"code": -32600, "message": self.message, "data": {"toolsets": list(self.toolsets)}}
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


class _Built(msgspec.Struct):
    base: Snapshot
    toolset: Toolset
    snapshot: Snapshot


class ToolsetViews:
    """The fixed views of one proxy.

    Args:
        toolsets: the toolsets that exist now, by name (declared and saved).
        build: toolset -> what a client sees with it equipped, built without equipping it.
        base: the proxy's snapshot now (a new one means the catalog changed).
        tokens: the configured named tokens now (name -> token).
        bindings: the toolset each toolset-bound token is limited to, now (name -> toolset).
    """

    def __init__(self, toolsets: Callable[[], Mapping[str, Toolset]], build: Callable[[Toolset], Snapshot],
                 base: Callable[[], Snapshot], *, tokens: Callable[[], Mapping[str, str]] = dict,
                 bindings: Callable[[], Mapping[str, str]] = dict) -> None:
        self._toolsets = toolsets
        self._build = build
        self._base = base
        self._tokens = tokens
        self._bindings = bindings
        self._built: dict[str, _Built] = {}
        self._announced: dict[str, tuple[Mapping[str, Any], ...] | None] = {}
        """The tools list each view's clients were last told of (views someone asked for)."""

    def names(self) -> list[str]:
        return sorted(self._toolsets())

    def snapshot(self, name: str) -> Snapshot | None:
        """What view ``name`` shows now; None when no toolset has that name (any more)."""
        toolset = self._toolsets().get(name)
        if toolset is None:
            self._built.pop(name, None)
            return None
        base = self._base()
        built = self._built.get(name)
        if built is None or built.base is not base or built.toolset is not toolset:
            built = self._built[name] = _Built(base, toolset, self._build(toolset))
        self._announced.setdefault(name, built.snapshot.tools_list)
        return built.snapshot

    def changed(self) -> list[str]:
        """The views whose tools list differs from the one their clients were last told of
        (only views someone has used); each is then taken as told."""
        out: list[str] = []
        for name, told in list(self._announced.items()):
            snap = self.snapshot(name)
            now = snap.tools_list if snap is not None else None
            if now != told:
                out.append(name)
                self._announced[name] = now
        return out

    def bound(self, who: AccessToken | None) -> tuple[str, str] | None:
        """(token name, toolset) when ``who`` presented a named token that carries a toolset.

        The presented token itself is compared with the named one (constant time), so an
        OAuth client whose id happens to equal a token's name is not taken for it.
        """
        if who is None:
            return None
        name = who.client_id
        toolset = self._bindings().get(name) if name is not None else None
        token = self._tokens().get(name) if name is not None else None
        if toolset is None or token is None or not hmac.compare_digest(who.token.encode(), token.encode()):
            return None
        return name, toolset

    def choose(self, url_toolset: str | None, who: AccessToken | None) -> str | None:
        """The view a request gets: the toolset its URL names, else its token's, else None
        (what the proxy exposes).

        Raises:
            ViewRefused: the URL or the token names a toolset that does not exist (404,
                naming those that do), or the token carries another toolset than the
                URL names (403).
        """
        bound = self.bound(who)
        known = tuple(sorted(self._toolsets()))
        listed = ", ".join(known) or "none"
        if url_toolset is not None:
            if url_toolset not in known:
                raise ViewRefused(NOT_FOUND, f"no toolset named {url_toolset!r}; toolsets: {listed}", known)
            if bound is not None and bound[1] != url_toolset:
                raise ViewRefused(FORBIDDEN, f"the token {bound[0]!r} is limited to the toolset {bound[1]!r}",
                                  (bound[1],))
            return url_toolset
        if bound is not None:
            if bound[1] not in known:
                raise ViewRefused(NOT_FOUND, f"the token {bound[0]!r} is limited to the toolset "
                                             f"{bound[1]!r}, which does not exist; toolsets: {listed}", known)
            return bound[1]
        return None


class NamedView:
    """A view as `mcpvisor.actors.fronts.plans.settle` reads it (``.snapshot``, read anew
    after a lazy load)."""

    def __init__(self, views: ToolsetViews, name: str) -> None:
        self.views = views
        self.name = name

    @property
    def snapshot(self) -> Snapshot:
        snap = self.views.snapshot(self.name)
        if snap is None:
            raise ViewRefused(NOT_FOUND, f"the toolset {self.name!r} no longer exists",
                              tuple(self.views.names()))
        return snap


def view_name(request: Any) -> str | None:
    """The view of the request being handled: ``request`` is the HTTP request the SDK
    hands its handlers (None off HTTP: then the connection's view, `CONNECTION_VIEW`)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, Mapping):
        view = scope.get(VIEW_KEY)
        return view if isinstance(view, str) else None
    return CONNECTION_VIEW.get()


def ws_toolset(path: str) -> str | None:
    """The toolset a websocket handshake's path names (``/toolset/NAME``), or None."""
    path = path.split("?", 1)[0]
    return path[len(WS_TOOLSET_PREFIX):] if path.startswith(WS_TOOLSET_PREFIX) else None


# --------------------------------------------------------------------------------------
# the HTTP front's two pieces
# --------------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class ViewPaths:
    """Before the SDK's app: ``/mcp/toolset/NAME`` is served by the ``/mcp`` endpoint (same
    token, Host and Origin checks, same sessions), with NAME kept in the scope."""

    def __init__(self, app: App, mcp_path: str) -> None:
        self.app = app
        self.mcp_path = mcp_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope.get("type") == "http" and isinstance(path, str) and path.startswith(HTTP_TOOLSET_PREFIX):
            scope = dict(scope, path=self.mcp_path, raw_path=self.mcp_path.encode())
            scope[URL_KEY] = path[len(HTTP_TOOLSET_PREFIX):].rstrip("/")
        await self.app(scope, receive, send)


class ViewGate:
    """After the SDK's token check, before its session manager: which view the request gets
    (`ToolsetViews.choose`), or its refusal (404, 403) with a JSON body naming the toolsets."""

    def __init__(self, app: App, views: ToolsetViews) -> None:
        self.app = app
        self.views = views

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        who = getattr(user, "access_token", None)
        try:
            view = self.views.choose(scope.get(URL_KEY), who)
        except ViewRefused as refused:
            await _refuse(send, refused)
            return
        if view is not None:
            scope[VIEW_KEY] = view
        await self.app(scope, receive, send)


async def _refuse(send: Send, refused: ViewRefused) -> None:
    body = refused.body()
    headers: Sequence[tuple[bytes, bytes]] = [(b"content-type", b"application/json"),
                                              (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
