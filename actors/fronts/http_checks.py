"""The checks `HttpFast` makes before it takes a request the SDK's app would otherwise serve.

Owns `HttpChecks`, a base class of `HttpFast`: Host and Origin (the front's rules),
``Content-Type`` and ``Accept``, the bearer token (the front's verifier and required
scopes; an open front's anonymous client), the view the URL or the token chooses, whether
a credential is the one that opened a session, and which tools map arguments to
``Mcp-Param-*`` headers; `classified`, the tool a 2026-07-28 request names if the SDK
would serve it. Each check answers only "take it" or "pass it on": a request failing one
goes to the SDK's app, which refuses it with its own status and body.

Separate from `mcpvisor.actors.fronts.http_fast`, which routes and answers what passes: the
checks follow the SDK app's rules and change with them, the routing follows the fast
path's. A base class rather than an object `HttpFast` holds, so its request handling calls
each check as its own method, with no object in between.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor.actors.fronts.views import HTTP_TOOLSET_PREFIX, ViewRefused

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.fronts.asgi import Scope
    from mcpvisor.actors.fronts.auth import HostRules, Verifier
    from mcpvisor.actors.fronts.backend import Backend
    from mcpvisor.actors.fronts.views import ToolsetViews

MCP_PATH: Final = "/mcp"
"""The front's endpoint; a toolset's view is under ``HTTP_TOOLSET_PREFIX``."""


class AnonymousClient(msgspec.Struct, frozen=True):
    """Who a request is while the front requires no token, as the checks name it: the
    client id the SDK's session checks give such a request, without the SDK's
    ``AccessToken`` (built from it only for a session the SDK holds)."""

    client_id: str
    token: str = ""
    scopes: tuple[str, ...] = ()
    expires_at: int | None = None


class HttpChecks:
    """The SDK app's checks, made once per request by `HttpFast` (which sets these attributes)."""

    rules: HostRules
    verifier: Verifier | None
    required_scopes: tuple[str, ...]
    anonymous: str
    views: ToolsetViews | None
    backend: Backend
    _anonymous_token: Any
    _anonymous_who: AnonymousClient
    _header_cache: tuple[Snapshot, frozenset[str]] | None
    _matched: tuple[Any, Any] | None

    def _host_ok(self, headers: Mapping[bytes, bytes]) -> bool:
        """Host and Origin, as the front's rules (the SDK's DNS-rebinding protection) take them."""
        host = headers.get(b"host")
        origin = headers.get(b"origin")
        if not self.rules.host_ok(host.decode("latin-1") if host is not None else None):
            return False
        return origin is None or self.rules.origin_ok(origin.decode("latin-1"))

    @staticmethod
    def _post_ok(headers: Mapping[bytes, bytes]) -> bool:
        """A POST's ``Content-Type`` is JSON and its ``Accept`` admits JSON and event streams."""
        ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip()
        return ctype == b"application/json" and accepts_both(headers.get(b"accept", b""))

    async def _admit(self, scope: Scope, headers: Mapping[bytes, bytes]) -> tuple[bool, Any]:
        """Host, Origin, Content-Type, Accept and token as the SDK's app checks them: (passed, who)."""
        if not self._host_ok(headers) or not self._post_ok(headers):
            return False, None
        verifier = self.verifier
        if verifier is None:
            return True, None
        if not verifier.guarding():
            return True, self._anonymous_who
        from mcpvisor.actors.fronts.auth import bearer_token

        auth = headers.get(b"authorization")
        token = bearer_token(auth.decode("latin-1") if auth is not None else None)
        who = await verifier.verify_token(token) if token is not None else None
        if who is None or (who.expires_at is not None and who.expires_at < time.time()):
            return False, None
        if any(s not in who.scopes for s in self.required_scopes):
            return False, None
        return True, who

    def _header_tools(self, snap: Snapshot | None) -> frozenset[str]:
        """The tools of ``snap`` (None: the proxy's) whose input schema maps an argument to an
        ``Mcp-Param-*`` header (``x-mcp-header``): the SDK checks those headers against the
        arguments. Kept for the latest snapshot only."""
        snapshot = snap if snap is not None else self.backend.router.snapshot
        cached = self._header_cache
        if cached is not None and cached[0] is snapshot:
            return cached[1]
        from mcp.shared.inbound import X_MCP_HEADER_KEY

        marker = X_MCP_HEADER_KEY.encode()

        def maps_headers(tool: Mapping[str, Any]) -> bool:
            try:
                return marker in msgspec.json.encode(tool.get("inputSchema"))
            except (TypeError, msgspec.EncodeError):
                return True  # unreadable here: the SDK decides

        names = frozenset(str(t.get("name")) for t in snapshot.tools_list if maps_headers(t))
        self._header_cache = (snapshot, names)
        return names

    def _view(self, scope: Scope, who: Any) -> tuple[bool, Snapshot | None]:
        """The view the request gets (its snapshot; None: the proxy's), or False to pass it on."""
        path: str = scope["path"]
        url_toolset = path[len(HTTP_TOOLSET_PREFIX):].rstrip("/") if path != MCP_PATH else None
        views = self.views
        if views is None:
            return url_toolset is None, None
        try:
            name = views.choose(url_toolset, who)
        except ViewRefused:
            return False, None
        if name is None:
            return True, None
        snap = views.snapshot(name)
        return snap is not None, snap

    def _owner_matches(self, owner: Any, who: Any) -> bool:
        """Whether ``who`` is the principal that opened the session (the SDK's own test). The
        last credential that matched an owner is remembered: an open front's anonymous
        client and a static token are the same object request after request."""
        if who is None:
            return owner is None
        if who is self._anonymous_who:  # an SDK session: the SDK is loaded
            if self._anonymous_token is None:
                from mcp.server.auth.provider import AccessToken

                self._anonymous_token = AccessToken(token="", client_id=self.anonymous, scopes=[])
            who = self._anonymous_token
        last = self._matched
        if last is not None and last[0] is owner and last[1] is who:
            return True
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context

        if owner == authorization_context(AuthenticatedUser(who)):
            self._matched = (owner, who)
            return True
        return False


def _admitted(accept: bytes) -> tuple[bool, bool]:
    """Whether the ``Accept`` header admits (JSON, an event stream)."""
    json = sse = False
    for part in accept.split(b","):
        media = part.split(b";", 1)[0].strip().lower()
        if media in (b"*/*", b"application/json", b"application/*"):
            json = True
        if media in (b"*/*", b"text/event-stream", b"text/*"):
            sse = True
    return json, sse


def accepts_both(accept: bytes) -> bool:
    """The ``Accept`` header admits both JSON and an event stream (as the SDK requires of a POST)."""
    return all(_admitted(accept))


def accepts_events(accept: bytes) -> bool:
    """The ``Accept`` header admits an event stream (as the SDK requires of a GET)."""
    return _admitted(accept)[1]


def classified(body: bytes, headers: Any) -> str | None:
    """The tool a 2026-07-28 request names, if the SDK would serve it: routing headers not
    repeated, its envelope and headers consistent (the SDK answers the others with its own
    errors); None otherwise."""
    from mcp.shared.inbound import (
        InboundLadderRejection,
        classify_inbound_request,
        find_duplicated_routing_header,
    )

    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
    if find_duplicated_routing_header(pairs) is not None:
        return None
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if isinstance(classify_inbound_request(decoded, headers=dict(pairs)), InboundLadderRejection):
        return None
    params = decoded.get("params") if isinstance(decoded, dict) else None
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None
