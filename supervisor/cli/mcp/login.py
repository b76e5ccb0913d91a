"""``mcpvisor mcp login NAME`` and ``mcpvisor mcp logout NAME``: the OAuth login of a remote server.

``login`` runs the MCP authorization flow the proxy runs (`mcpvisor.actors.link.oauth`):
it asks the server, is refused with a 401, discovers its authorization server, registers
(or uses the configured client), listens on 127.0.0.1 for the redirect, opens the
authorization URL in the browser (``$BROWSER`` is honoured; ``--no-browser`` only prints
it) and returns once the tokens are stored in the state directory. A running proxy sees
the new tokens by itself and starts the server. A ``client_credentials`` server logs in
without a browser.

``logout`` revokes the stored tokens where the authorization server advertises RFC 7009
revocation, and forgets them.

Exit codes: 0 logged in / out, 1 the login failed, 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, Formatter
from mcpvisor.cli.config_cmd import CommandError, load_lenient, require
from mcpvisor.cli.mcp._common import fails
from mcpvisor.cli.mcp.inspect import _spec

LOGIN_REQUEST_TIMEOUT_S: Final = 30.0
"""Bound on each HTTP request of the login (the wait for the browser has its own)."""
PROBE_PROTOCOL: Final = "2025-11-25"
"""The protocol version the login's first request names (the flow's ``resource`` needs one)."""


def register(cmds: Any, parent: argparse.ArgumentParser) -> None:
    login = cmds.add_parser(
        "login",
        help="log in to a server that needs OAuth (opens the browser)",
        parents=[parent],
        formatter_class=Formatter,
        description="Run the OAuth login of an http or sse server and store its tokens in the "
        "state directory, or in the shared store (settings.store, $MCPVISOR_STORE; encrypted with "
        "$MCPVISOR_STORE_KEY) where every replica uses them; a running proxy picks them up by itself.",
        epilog="examples:\n  mcpvisor mcp login linear\n  mcpvisor mcp login linear --no-browser\n",
    )
    login.add_argument("name", metavar="NAME")
    login.add_argument("--no-browser", action="store_true", help="print the login URL; do not open it")
    login.add_argument("--state-dir", metavar="DIR", help="where tokens are stored (default: the proxy's)")
    login.set_defaults(func=run_login)
    logout = cmds.add_parser(
        "logout",
        help="revoke and forget a server's OAuth tokens",
        parents=[parent],
        formatter_class=Formatter,
        description="Revoke a server's stored OAuth tokens (where its authorization server "
        "supports it) and delete them.",
        epilog="examples:\n  mcpvisor mcp logout linear\n",
    )
    logout.add_argument("name", metavar="NAME")
    logout.add_argument("--state-dir", metavar="DIR", help="where tokens are stored (default: the proxy's)")
    logout.set_defaults(func=run_logout)


def _server(args: argparse.Namespace) -> tuple[Any, Path, str | None]:
    """The server's spec, the state directory and the shared store (``settings.store``,
    ``$MCPVISOR_STORE``; None: the tokens live in the state directory)."""
    from mcpvisor.settings import state_dir, with_env_overrides

    target = require(args)
    config, _ = load_lenient(target)
    spec = _spec(config, args.name, target)
    if spec.transport not in ("http", "sse"):
        raise CommandError(f"server {spec.name} is a {spec.transport} server: "
                           "only http and sse servers log in")
    settings = with_env_overrides(config.settings)
    directory = state_dir(args.state_dir, configured=settings.state_dir)
    return spec, directory, settings.store


@asynccontextmanager
async def _tokens(spec: Any, directory: Path, store: str | None) -> AsyncIterator[Any]:
    """The server's `TokenStore`: its file in the state directory, or its row in the
    replicas' shared store (every replica then uses what this command stores)."""
    from mcpvisor.tokens import FileTokenStore

    if store is None:
        yield FileTokenStore(directory, spec.name)
        return
    from mcpvisor.pgstore.store import open_store

    async with open_store(store, state_dir=directory) as shared:
        yield shared.tokens(spec.name)


@fails
def run_login(args: argparse.Namespace) -> int:
    import trio

    from mcpvisor import redact

    spec, directory, shared = _server(args)
    redact.remember(redact.server_secrets(spec))
    try:
        where = trio.run(_login, spec, directory, shared, not args.no_browser)
    except Exception as exc:  # the flow's own words (not its task group's), scrubbed of any token
        from mcpvisor.actors.upstream.failures import first_leaf

        why = redact.scrub_known(str(first_leaf(exc)))
        print(f"mcpvisor: login to {spec.name} failed: {why}", file=sys.stderr)
        return EXIT_FAILED
    out.say(f"Logged in to {spec.name}; tokens stored in {where}", style="green")
    return EXIT_OK


async def _login(spec: Any, directory: Path, shared: str | None, browser: bool) -> Path:
    async with _tokens(spec, directory, shared) as store:
        return await _login_into(spec, store, browser)


async def _login_into(spec: Any, store: Any, browser: bool) -> Path:
    import httpx2

    from mcpvisor.actors.link.oauth import UpstreamAuth
    from mcpvisor.actors.link.oauth_redirect import open_browser, open_callback_listener

    await store.forget_tokens(refresh_token=None)  # a login asks again, whatever is stored
    port = spec.oauth.callback_port if spec.oauth is not None else None
    async with open_callback_listener(spec.name, port, store) as listener:

        async def show(url: str) -> None:
            print(f"Log in to {spec.name} at:\n  {url}", file=sys.stderr, flush=True)
            if browser and not await open_browser(url):
                print("(no browser found: open the URL above)", file=sys.stderr, flush=True)

        auth = UpstreamAuth(spec, store, redirect=show, callback=listener.wait,
                            redirect_uri=listener.redirect_uri)
        headers = {**spec.headers, "mcp-protocol-version": PROBE_PROTOCOL,
                   "accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(auth=auth.provider, timeout=LOGIN_REQUEST_TIMEOUT_S) as http:
            if spec.transport == "http":
                body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": PROBE_PROTOCOL, "capabilities": {},
                                   "clientInfo": {"name": "mcpvisor-login", "version": "1"}}}
                request = http.stream("POST", spec.url, json=body, headers=headers)
            else:
                request = http.stream("GET", spec.url, headers=headers)
            async with request as response:
                if response.status_code in (401, 403):
                    raise RuntimeError(f"the server still refuses the token (HTTP {response.status_code})")
    if (await store.load()).tokens is None:
        raise RuntimeError("the server did not ask for a login (it answers without a token)")
    path: Path = store.path
    return path


@fails
def run_logout(args: argparse.Namespace) -> int:
    import trio

    from mcpvisor.tokens import revoke

    spec, directory, shared = _server(args)

    async def logout() -> tuple[bool, list[str]]:
        async with _tokens(spec, directory, shared) as store:
            login = await store.forget()
        if login.tokens is None:
            return False, []
        return True, await revoke(login)

    had, revoked = trio.run(logout)
    if not had:
        out.say(f"No tokens stored for {spec.name}")
        return EXIT_OK
    note = f" (revoked: {', '.join(revoked)})" if revoked else " (the server offers no revocation)"
    out.say(f"Logged out of {spec.name}: tokens forgotten{note}")
    return EXIT_OK
