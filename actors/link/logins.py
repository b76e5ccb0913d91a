"""What a login to an upstream needs from a person, without the OAuth machinery (the SDK's).

The message every call to and status view of such a server shows, `NeedsLogin` (raised
when only a person can go on), `NoLoginFound` (a 401 with nothing to log in with), and the
browser step. The upstream actor imports these on every start; the OAuth client itself
(`mcpvisor.actors.link.oauth`) loads only for a server that has one.
"""

from __future__ import annotations

from typing import Final

import trio

from mcpvisor.actors.errors import ProxyError

LOGIN_WAIT_S: Final = 300.0
"""How long a login waits for the browser's redirect: a person has to read and click."""


async def open_browser(url: str) -> bool:
    """Open ``url`` with Python's `webbrowser` (``$BROWSER`` first), in a worker thread:
    a command-line browser runs until it exits. Returns whether one was found."""
    import webbrowser  # here: only a login opens a browser, and every start would pay ~0.5 ms

    try:
        return await trio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)
    except webbrowser.Error:
        return False


def login_message(server: str) -> str:
    """What a call to, and every status view of, a server that needs a login says."""
    return f"server {server} needs a login: run mcpvisor mcp login {server}"


class NeedsLogin(Exception):
    """Only a person can go on: the server wants an authorization the stored tokens cannot
    give (none stored, ``invalid_grant``, the browser not allowed or not back in time)."""

    def __init__(self, server: str, why: str | None = None) -> None:
        self.server = server
        self.why = why
        super().__init__(login_message(server) + (f" ({why})" if why else ""))


class NoLoginFound(ProxyError):
    """A server refused a request (HTTP 401) and no way to log in to it was found: no OAuth
    metadata, and no challenge or client registration to log in with. The message names
    the server and every URL tried with its answer (never a token: none exists yet)."""

    def __init__(self, server: str, tried: list[str], why: str) -> None:
        self.server = server
        where = f" (tried {', '.join(tried)})" if tried else ""
        super().__init__(f"server {server} answered HTTP 401 and offers no way to log in: "
                         f"no OAuth metadata{where}, {why}")
