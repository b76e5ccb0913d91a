"""Put a `Supervisor` behind a front: stdio, streamable HTTP or websocket.

Owns the fronts' lifetimes (`serve` returns when a stdio client closes its end, and
runs until cancelled for the network fronts) and their security (docs/design.md "Security
of the network fronts"): building the token verifier, the Host/Origin rules
(`mcpvisor.actors.fronts.auth`), the session limits and TLS from ``settings`` and the command line,
and refusing to open a non-loopback bind that nothing guards.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor._config_types import MIN_TOKEN_CHARS, replica_name
from mcpvisor.actors.core.vocabulary import HTTP_PATH
from mcpvisor.actors.fronts.hosts import is_loopback
from mcpvisor.config import DEFAULT_HOST, DEFAULT_PORT, Settings
from mcpvisor.proxy import Supervisor

if TYPE_CHECKING:
    # The network fronts' guard loads the SDK's auth types: imported where a front is built,
    # so a stdio `serve` never loads them.
    from mcpvisor.actors.fronts.auth import Gate, HostRules, Verifier

logger = logging.getLogger(__name__)

TOKEN_ENV: Final = "MCPVISOR_TOKEN"
"""A shared token from the environment (docs/design.md), named "env" in logs."""
TOKEN_FILE_NAME: Final = "token-file"
"""The name `--token-file`'s token goes by in logs."""
STATIC_ISSUER_PLACEHOLDER: Final = "https://mcpvisor.invalid/"
"""The SDK's `AuthSettings` requires an issuer even for a resource server that only
checks shared tokens; with no resource URL nothing ever shows or uses it (RFC 2606 name)."""

HOW_TO_SET_A_TOKEN: Final = (
    'set a token: settings.authToken in the config ("${MY_TOKEN}" reads it from the environment), '
    f"${TOKEN_ENV}, or --token-file PATH (a file only you can read: "
    "`openssl rand -hex 32 > ~/.mcpvisor-token && chmod 600 ~/.mcpvisor-token`); "
    "clients then send `Authorization: Bearer TOKEN`. On a trusted network, --insecure-no-auth "
    "serves without one."
)


class UnsafeBind(Exception):
    """A network front would be reachable beyond this machine with nothing guarding it."""


class TokenFileError(Exception):
    """``--token-file`` cannot be used (missing, unreadable, readable by others, empty)."""


class PortUnavailable(Exception):
    """A network front's address cannot be listened on (in use, not this machine's, not allowed)."""


# --------------------------------------------------------------------------------------
# what guards a front
# --------------------------------------------------------------------------------------


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path`` (surrounding whitespace stripped).

    Raises:
        TokenFileError: the file is missing or unreadable, group or others may read or
            write it (ssh's rule for a private key), or it is empty.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(
                f"{p}: readable or writable by group or others (mode {stat.S_IMODE(mode):o}); "
                f"run `chmod 600 {p}` (a token must be private, like an ssh key)"
            )
        token = p.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise TokenFileError(f"{p}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"{p}: not a text file") from None
    if not token:
        raise TokenFileError(f"{p}: empty; put a token in it (`openssl rand -hex 32`)")
    return token


def start_tokens(env: Mapping[str, str] | None = None, token_file: str | None = None) -> Mapping[str, str]:
    """The tokens given at start outside the config: ``$MCPVISOR_TOKEN`` ("env") and
    ``--token-file`` ("token-file"). Raises `TokenFileError` for a bad file."""
    env = os.environ if env is None else env
    tokens: dict[str, str] = {}
    if env.get(TOKEN_ENV, "").strip():
        tokens["env"] = env[TOKEN_ENV].strip()
    if token_file:
        tokens[TOKEN_FILE_NAME] = read_token_file(token_file)
    for name, token in tokens.items():
        where = f"${TOKEN_ENV}" if name == "env" else str(token_file)
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenFileError(
                f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters "
                "(make one with `openssl rand -hex 32`)"
            )
        if not all("!" <= c <= "~" for c in token):
            raise TokenFileError(f"{where}: the token may hold only printable ASCII, no spaces")
    return MappingProxyType(tokens)


def check_bind(host: str, *, guarded: bool, insecure_no_auth: bool) -> None:
    """Refuse a non-loopback bind without a token (unless ``insecure_no_auth``; then warn).

    Raises:
        UnsafeBind: with a message that says how to set a token.
    """
    if is_loopback(host) or guarded:
        return
    if insecure_no_auth:
        logger.warning(
            "serving on %s WITHOUT authentication (--insecure-no-auth): anyone who can reach "
            "this port can call every tool of every server",
            host,
        )
        return
    raise UnsafeBind(
        f"refusing to serve on {host} without a token: anyone who can reach it could call "
        f"every tool of every configured server. To serve beyond this machine, {HOW_TO_SET_A_TOKEN}"
    )


def check_port(host: str, port: int) -> None:
    """Refuse early when ``host:port`` cannot be listened on, before any server is spawned.

    Binds a throwaway socket the way the fronts will (``SO_REUSEADDR``, as hypercorn and
    ``trio.open_tcp_listeners`` set it, so a port that only has connections in TIME_WAIT
    is not called busy) and closes it at once. Port 0 (any free port) is not checked.

    Raises:
        PortUnavailable: one line that names the port and the host.
    """
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise PortUnavailable(f"cannot listen on {host}: {err.strerror or err}") from None
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise PortUnavailable(
                    f"port {port} on {host} is already in use (another mcpvisor? see mcpvisor status)"
                ) from None
            raise PortUnavailable(f"cannot listen on port {port} on {host}: {err.strerror or err}") from None


def machine_addresses() -> list[str]:
    """This machine's interface addresses and names: what a client on the network calls it."""
    names = [socket.gethostname(), socket.getfqdn()]
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for addr in addrs:
                if addr.family in (socket.AF_INET, socket.AF_INET6):
                    names.append(addr.address.split("%", 1)[0])
    except Exception:  # no interface list: the bind address and allowedHosts still apply
        logger.debug("could not list this machine's addresses", exc_info=True)
    return [n for n in names if n]


def tls_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    """A server TLS context from ``--certfile``/``--keyfile``, or None for plain text."""
    if not certfile and not keyfile:
        return None
    if not certfile:
        raise ValueError("--keyfile needs --certfile")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


class Guard(msgspec.Struct, frozen=True):
    """Everything that decides who a network front lets in, built once at start.

    ``verifier`` is asked at every request whether it guards (`Verifier.guarding`): the
    token set follows hot reloads, the rest of the guard does not.
    """

    rules: HostRules
    verifier: Verifier | None = None
    auth_settings: Any = None
    """The SDK's `AuthSettings` (None: no bearer check at all, or not built yet: `sdk_auth`)."""
    make_auth: Any = None
    """Builds the SDK's `AuthSettings` of this guard (None: it has none)."""
    required_scopes: tuple[str, ...] = ()
    resource_metadata_url: str | None = None
    tls: ssl.SSLContext | None = None
    token_names: tuple[str, ...] = ()

    def sdk_auth(self) -> Any:
        """The SDK's `AuthSettings` of this guard, built now if they were not at start (an
        HTTP front builds its SDK app on first need: `mcpvisor.actors.fronts.http_sdk`)."""
        if self.auth_settings is not None or self.make_auth is None:
            return self.auth_settings
        return self.make_auth()

    def gate(self) -> Gate:
        from mcpvisor.actors.fronts.auth import Gate

        return Gate(
            self.rules,
            self.verifier,
            required_scopes=self.required_scopes,
            resource_metadata_url=self.resource_metadata_url,
        )


def build_guard(
    sup: Supervisor,
    host: str,
    port: int,
    *,
    tokens: Mapping[str, str] | None = None,
    insecure_no_auth: bool = False,
    certfile: str | None = None,
    keyfile: str | None = None,
    scheme: str = "http",
    path: str = HTTP_PATH,
    sdk_auth: bool = True,
) -> Guard:
    """Build the guard of a front bound to ``host:port`` from ``sup.settings`` and the start tokens.

    ``sdk_auth``: also the SDK's ``AuthSettings`` now, for a front whose app the SDK builds at
    start; the metrics port checks its requests itself and leaves them out (with only shared
    tokens, it then loads no SDK at all), and the HTTP front builds them with its SDK app
    (`Guard.sdk_auth`).

    The shared tokens are read from ``sup.settings`` at every check, so a hot reload that
    removes one locks its client out at once, and one that adds the first token to an
    open loopback front guards it from the next request and handshake on. Whether a
    non-loopback bind may open at all is decided here, at start.

    Raises:
        UnsafeBind: non-loopback ``host`` and no token (see `check_bind`).
    """
    from mcpvisor.actors.fronts.auth import ChainVerifier, StaticTokens, host_rules

    settings: Settings = sup.settings
    fixed = dict(tokens or {})

    def current() -> Mapping[str, str]:
        return {**fixed, **sup.settings.auth_tokens}

    static = StaticTokens(current, scopes=list(settings.auth.required_scopes) if settings.auth else [])
    verifiers: list[Verifier] = [static]
    resource_metadata_url = None
    required: tuple[str, ...] = ()
    tls = tls_context(certfile, keyfile)
    make_auth: Callable[[], Any]
    if settings.auth is not None:
        # OAuth's verifier is the SDK's kind of verifier (it loads the SDK in any case).
        from mcp.server.auth.routes import build_resource_metadata_url
        from pydantic import AnyHttpUrl

        from mcpvisor.actors.fronts.oauth import JwtVerifier, resource_url

        scheme = scheme + ("s" if tls else "")
        resource = resource_url(settings.auth.audience, f"{scheme}://{host}:{port}{path}")
        verifiers.append(
            JwtVerifier(settings.auth.issuer, settings.auth.audience, jwks_uri=settings.auth.jwks_uri)
        )
        required = settings.auth.required_scopes
        resource_server_url = AnyHttpUrl(resource)
        resource_metadata_url = str(build_resource_metadata_url(resource_server_url))
        issuer = settings.auth.issuer

        def oauth_settings() -> Any:
            from mcp.server.auth.settings import AuthSettings

            # The verifier checks the audience itself (PyJWT), so the SDK need not compare resources.
            return AuthSettings(
                issuer_url=AnyHttpUrl(issuer),
                resource_server_url=resource_server_url,
                required_scopes=list(required) or None,
                validate_token_resource=False,
            )

        make_auth = oauth_settings
    else:

        def tokens_settings() -> Any:
            from mcp.server.auth.settings import AuthSettings
            from pydantic import AnyHttpUrl

            # Shared tokens only, possibly none yet: the SDK's bearer check is installed all the
            # same, so a token a hot reload adds is required from the next request on (an open
            # front admits everyone through `open_while_unguarded`).
            placeholder = AnyHttpUrl(STATIC_ISSUER_PLACEHOLDER)
            return AuthSettings(issuer_url=placeholder, resource_server_url=None)

        make_auth = tokens_settings
    verifier: Verifier = verifiers[0] if len(verifiers) == 1 else ChainVerifier(verifiers)
    check_bind(host, guarded=verifier.guarding(), insecure_no_auth=insecure_no_auth)
    rules = host_rules(
        host,
        machine_addresses=() if is_loopback(host) else machine_addresses(),
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
    )
    names = static.names() + (("oauth",) if settings.auth else ())
    if names:
        logger.info("clients must send a bearer token (accepted: %s)", ", ".join(names))
    auth_settings = make_auth() if sdk_auth else None
    return Guard(rules, verifier, auth_settings, make_auth, required,
                 resource_metadata_url, tls, names)


# --------------------------------------------------------------------------------------
# the fronts
# --------------------------------------------------------------------------------------


async def serve_http(
    sup: Supervisor,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    tokens: Mapping[str, str] | None = None,
    insecure_no_auth: bool = False,
    certfile: str | None = None,
    keyfile: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve streamable HTTP at ``http(s)://host:port/mcp`` (`mcpvisor.actors.fronts.http`)
    until cancelled, or until the proxy's drain is done (`mcpvisor.actors.fronts.drain`),
    with the dashboard, the management API and ``/healthz`` beside it (`mcpvisor.dashboard`).

    ``task_status.started`` receives the URL actually bound (``port=0`` picks a free port).

    Raises:
        UnsafeBind: before binding, for a non-loopback ``host`` with no token.
    """
    from mcpvisor.actors.fronts.http import HttpLimits, serve_http_front
    from mcpvisor.dashboard import guard_for
    from mcpvisor.dashboard._hub import Hub, LocalSource

    guard = build_guard(
        sup, host, port, tokens=tokens, insecure_no_auth=insecure_no_auth, certfile=certfile, keyfile=keyfile,
        sdk_auth=False,
    )
    hub = Hub(LocalSource(sup))
    dashboard_guard = guard_for(sup, guard)  # its login token is written now, for the banner

    def sdk_parts() -> tuple[Any, list[Any]]:
        """The SDK's bearer settings and the routes beside ``/mcp``: ``/``, ``/api/...``,
        ``/healthz`` (supervisor/dashboard) and ``/metrics``, built with the SDK's app."""
        from mcpvisor.dashboard import dashboard_routes

        routes = dashboard_routes(hub, dashboard_guard)
        if sup.metrics is not None:
            from mcpvisor.metrics_export import metrics_route

            routes.append(metrics_route(sup, dashboard_guard, loopback=is_loopback(host)))
        return guard.sdk_auth(), routes

    settings = sup.settings
    limits = HttpLimits(max_body=settings.max_message_bytes, max_sessions=settings.max_sessions,
                        session_idle_timeout=settings.session_idle_timeout,
                        handshake_timeout=settings.handshake_timeout)

    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)

        async def front(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
            await serve_http_front(sup.front, host, port, limits=limits, rules=guard.rules,
                                   verifier=guard.verifier, sdk_parts=sdk_parts,
                                   required_scopes=guard.required_scopes, certfile=certfile,
                                   keyfile=keyfile, views=sup.front.views,
                                   fast_path=settings.fast_path, ready=sup.store_health,
                                   replica=replica_name(os.environ), task_status=task_status)
            nursery.cancel_scope.cancel(reason="the HTTP front closed")

        task_status.started(await nursery.start(front))


async def serve_stdio(
    sup: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve one client on this process's stdin/stdout until it closes stdin."""
    from mcpvisor.actors.fronts.stdio import StdioFront, claim_stdio

    async with claim_stdio() as (receive, send):
        front = StdioFront(
            sup.front,
            receive,
            send,
            max_message=sup.settings.max_message_bytes,
            fast_path=sup.settings.fast_path,
        )
        task_status.started()
        await front.serve()


async def serve_ws(
    sup: Supervisor,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    tokens: Mapping[str, str] | None = None,
    insecure_no_auth: bool = False,
    certfile: str | None = None,
    keyfile: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over websocket at ``ws(s)://host:port/`` until cancelled, or until the
    proxy's drain is done and every connection has closed (`mcpvisor.actors.fronts.drain`).

    Raises:
        UnsafeBind: before binding, for a non-loopback ``host`` with no token.
    """
    from mcpvisor.actors.fronts.limits import install
    from mcpvisor.actors.fronts.ws import serve_websocket_front

    guard = build_guard(
        sup,
        host,
        port,
        tokens=tokens,
        insecure_no_auth=insecure_no_auth,
        certfile=certfile,
        keyfile=keyfile,
        scheme="ws",
        path="/",
    )
    install(sup.front.server)
    scheme = "wss" if guard.tls else "ws"
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            lambda task_status: serve_websocket_front(
                sup.front,
                host,
                port,
                max_message=sup.settings.max_message_bytes,
                gate=guard.gate(),
                ssl_context=guard.tls,
                max_sessions=sup.settings.max_sessions,
                idle_timeout=sup.settings.session_idle_timeout,
                handshake_timeout=sup.settings.handshake_timeout,
                credentials=lambda: (sup.settings.auth_tokens, sup.settings.token_toolsets),
                views=sup.front.views,
                task_status=task_status,
            )
        )
        task_status.started(f"{scheme}://{host}:{bound}/")


async def serve(
    sup: Supervisor,
    transport: str = "stdio",
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tokens: Mapping[str, str] | None = None,
    insecure_no_auth: bool = False,
    certfile: str | None = None,
    keyfile: str | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Put ``sup`` behind a front. stdio returns at EOF; http and ws run until cancelled.
    Each also returns once ``sup.front.drain`` is done (`mcpvisor.actors.fronts.drain`: the proxy stops
    gracefully) and its connections have their last answers.

    Args:
        tokens: bearer tokens given at start besides ``settings.authToken(s)`` (name -> token;
            see `start_tokens`).
        insecure_no_auth: allow a non-loopback ``host`` with no token (warns).
        certfile, keyfile: serve TLS (https / wss).
    """
    net: dict[str, Any] = {
        "tokens": tokens,
        "insecure_no_auth": insecure_no_auth,
        "certfile": certfile,
        "keyfile": keyfile,
    }
    if transport == "stdio":
        await serve_stdio(sup, task_status=task_status)
    elif transport == "http":
        await serve_http(sup, host, port, **net, task_status=task_status)
    elif transport == "ws":
        await serve_ws(sup, host, port, **net, task_status=task_status)
    else:
        raise ValueError(f"unknown transport {transport!r} (stdio, http or ws)")
