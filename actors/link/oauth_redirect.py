"""The browser step of an upstream login: the loopback redirect listener and the browser.

When a person can log in, the OAuth client (`mcpvisor.actors.link.oauth`) sends them to
the authorization server and waits for its redirect back. This module owns the two ends
of that trip, both on this machine:

* `open_browser`: Python's `webbrowser` (so ``$BROWSER`` is honoured), in a thread;
* `open_callback_listener` and `CallbackListener`: an HTTP listener on 127.0.0.1 (RFC 8252
  §7.3) for the redirect at `CALLBACK_PATH`, on the configured port, else on the port the
  stored client was registered with, else on a free one; it hands the code, state and
  ``iss`` to the waiting login, or `NeedsLogin` when the person declined or never came
  back within `LOGIN_WAIT_S`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qs, urlsplit

import trio
from mcp.shared.auth import AuthorizationCodeResult

from mcpvisor.actors.link.logins import LOGIN_WAIT_S, NeedsLogin, open_browser
from mcpvisor.actors.link.oauth import CALLBACK_PATH

if TYPE_CHECKING:
    from mcpvisor.actors.link.oauth_store import TokenStore

__all__ = ["LOGIN_WAIT_S", "CallbackListener", "open_browser", "open_callback_listener"]

MAX_CALLBACK_REQUEST: Final = 16 * 1024
"""The largest redirect request the listener reads (a URL with a code and a state)."""


class CallbackListener:
    """A loopback HTTP listener for the authorization redirect (RFC 8252 §7.3)."""

    def __init__(self, listener: trio.SocketListener, server: str) -> None:
        self._listener = listener
        self.server = server
        self.port: int = listener.socket.getsockname()[1]
        self.redirect_uri = f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"
        self._send, self._receive = trio.open_memory_channel[AuthorizationCodeResult | str](1)

    async def wait(self) -> AuthorizationCodeResult:
        """The redirect's code, state and ``iss``; `NeedsLogin` after `LOGIN_WAIT_S` or an
        ``error`` redirect (the person declined, or the server refused)."""
        with trio.move_on_after(LOGIN_WAIT_S):
            got = await self._receive.receive()
            if isinstance(got, str):
                raise NeedsLogin(self.server, f"the authorization server answered {got}")
            return got
        raise NeedsLogin(self.server, f"no login within {LOGIN_WAIT_S:g}s")

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await self._listener.accept()
                nursery.start_soon(self._answer, stream)

    async def _answer(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            with trio.move_on_after(LOGIN_WAIT_S):
                while b"\r\n\r\n" not in head and len(head) < MAX_CALLBACK_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            target = urlsplit(line[1]) if len(line) >= 2 else None
            if target is None or target.path != CALLBACK_PATH:
                await _reply(stream, 404, "not the login callback")
                return
            query = {k: v[0] for k, v in parse_qs(target.query).items()}
            if "code" in query:
                result: AuthorizationCodeResult | str = AuthorizationCodeResult(
                    code=query["code"], state=query.get("state"), iss=query.get("iss"))
                text = f"mcpvisor: logged in to {self.server}. You can close this tab."
            else:
                result = query.get("error", "no code")
                text = f"mcpvisor: the login to {self.server} did not complete ({result})."
            await _reply(stream, 200, text)
            try:
                self._send.send_nowait(result)
            except trio.WouldBlock:
                pass  # a second redirect (a reload of the page): the first one counts


async def _reply(stream: trio.SocketStream, status: int, text: str) -> None:
    body = text.encode()
    head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    try:
        await stream.send_all(head + body)
    except trio.BrokenResourceError:
        pass


async def _registered_port(store: TokenStore | None) -> int | None:
    """The loopback port the stored client was registered with (reusing it reuses the
    registration; RFC 8252 lets the port vary, but not every server does)."""
    client = (await store.load()).client if store is not None else None
    for uri in (client.redirect_uris or []) if client is not None else []:
        if uri.host in ("127.0.0.1", "localhost") and uri.port:
            return int(uri.port)
    return None


@asynccontextmanager
async def open_callback_listener(server: str, port: int | None,
                                 store: TokenStore | None = None) -> AsyncIterator[CallbackListener]:
    """Listen on 127.0.0.1 for the login redirect while open: on ``port``
    (``oauth.callbackPort``), else on the port the stored client was registered with if
    it is free, else on a free port.

    Raises:
        OSError: ``port`` is taken (the message names it).
    """
    candidates: list[int] = [port] if port else [p for p in (await _registered_port(store),) if p] + [0]
    listeners: list[trio.SocketListener] = []
    for i, candidate in enumerate(candidates):
        try:
            listeners = await trio.open_tcp_listeners(candidate, host="127.0.0.1")
            break
        except OSError as exc:
            if i + 1 == len(candidates):
                raise OSError(exc.errno, f"server {server}: cannot listen for the login redirect on "
                                         f"127.0.0.1:{candidate} ({exc.strerror})") from exc
    listener = listeners[0]
    async with listener, trio.open_nursery() as nursery:
        callback = CallbackListener(listener, server)
        nursery.start_soon(callback.serve)
        try:
            yield callback
        finally:
            nursery.cancel_scope.cancel(reason="login listener closed")
