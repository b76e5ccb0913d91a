"""How an upstream actor reaches its server: the `OpenLink` port and the production opener.

A child process over our own pipes for stdio; the SDK's client transports otherwise,
with the server's OAuth (its token store, and the loopback redirect listener when a
start may ask a person to log in) wired in. Tests pass in-memory openers (tests/fakes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

from mcpvisor.actors.core.argv import stdio_argv
from mcpvisor.actors.link import CallOrigin, Link, LinkEvents, open_stdio_link

if TYPE_CHECKING:
    from mcpvisor.actors.upstream.actor import Upstream


class OpenLink(Protocol):
    """How an actor gets a connection: spawn or connect, handshake, yield the live link.

    The link is closed and its process stopped when the context exits. ``on_spawn`` is
    called with the link as soon as it exists (before the handshake), so a failure
    during the handshake can be explained by the link's exit status and stderr.
    The default is `open_real_link`; tests pass in-memory fakes (tests/fakes).
    """

    def __call__(self, up: Upstream, *, events: LinkEvents, protocol: str,
                 on_spawn: Callable[[Link], None]) -> AbstractAsyncContextManager[Link]: ...


class UpstreamLinkEvents:
    """Adapter from a link's callbacks to its actor (runs on the link's reader task)."""

    def __init__(self, upstream: Upstream) -> None:
        self._up = upstream

    def list_changed(self, kind: str) -> None:
        self._up.mark_dirty(kind)

    def list_rechecked(self, kind: str) -> None:
        self._up.recheck(kind)

    def resource_updated(self, uri: str) -> None:
        self._up.hooks.resource_updated(self._up.name, uri)

    def log_message(self, params: dict[str, Any]) -> None:
        self._up.hooks.log_message(self._up.name, params)

    def fallback_origin(self, method: str) -> CallOrigin | None:
        return self._up.hooks.fallback_origin(method)

    @property
    def log_level(self) -> str | None:
        return self._up.hooks.log_level()


@asynccontextmanager
async def open_real_link(up: Upstream, *, events: LinkEvents, protocol: str,
                         on_spawn: Callable[[Link], None]) -> AsyncIterator[Link]:
    """The production `OpenLink`: a child process for stdio, the SDK's transports otherwise
    (imported here, on the first such server: a stdio server never loads the SDK)."""
    spec = up.spec
    if spec.transport in ("stdio", "stdio-docker"):
        async with open_stdio_link(
            up.name, stdio_argv(spec), env=spec.env, cwd=spec.cwd, events=events, reaper=up.reaper,
            protocol=protocol, max_message=up.max_message, shutdown_grace=spec.shutdown_grace,
            on_spawn=on_spawn,
        ) as link:
            yield link
        return
    from mcpvisor.actors.link.oauth import UpstreamAuth
    from mcpvisor.actors.link.oauth_redirect import open_callback_listener
    from mcpvisor.actors.link.sdk import open_sdk_link
    from mcpvisor.actors.transports import sdk_transport

    async with AsyncExitStack() as stack:
        auth = None
        store = up.token_store()
        if store is not None:
            if up.login_interactive:
                port = spec.oauth.callback_port if spec.oauth is not None else None
                listener = await stack.enter_async_context(open_callback_listener(up.name, port, store))
                login = UpstreamAuth(spec, store, redirect=up.show_login, callback=listener.wait,
                                     redirect_uri=listener.redirect_uri, on_login_needed=up.login_needed)
            else:
                login = UpstreamAuth(spec, store, on_login_needed=up.login_needed)
            auth = login.provider
        # A dual-era streamable-HTTP server under ``auto`` also serves 2026-07-28 clients in their era.
        modern = ((lambda: sdk_transport(spec, up.max_message, auth=auth))
                  if spec.transport == "http" and spec.protocol == "auto" else None)
        sdk_link = await stack.enter_async_context(
            open_sdk_link(up.name, sdk_transport(spec, up.max_message, auth=auth), events=events,
                          protocol=protocol, modern_transport=modern))
        on_spawn(sdk_link)
        yield sdk_link
