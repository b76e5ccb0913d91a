"""mcpvisor as an OAuth 2.1 client of its upstreams: the SDK's client auth behind our transports.

The protocol itself (discovery through ``WWW-Authenticate``, RFC 9728 and RFC 8414 with
their fallbacks, DCR, client metadata documents, PKCE, ``resource``, scope selection,
step-up, the ``iss`` check) is the SDK's `mcp.client.auth.OAuthClientProvider`, used as it
is. What this module adds:

* `UpstreamAuth`: that provider (or the SDK's client-credentials ones) over a `TokenStore`
  port, the tokens on disk (`mcpvisor.tokens`), with refresh at `REFRESH_AT` of a token's
  lifetime instead of at its end (the port and that bookkeeping are
  `mcpvisor.actors.link.oauth_store`'s), one refresh at a time per server when ten calls get a
  401 together (the calls that carried a valid token skip the flow's lock entirely),
  tokens deleted only on ``invalid_grant`` (and not when another proxy sharing the state
  directory already rotated them), and the authorization server's metadata remembered so
  a refresh after a restart reaches the right token endpoint;
* `NeedsLogin`: what a start or a call raises when only a person can go on;
* the servers written to the 2025-03-26 authorization spec: the SDK's discovery already
  falls back to the authorization server metadata at the server's origin and, without
  any, to the default endpoints (``/authorize``, ``/token``, ``/register``); what a proxy
  that cannot ask a person decides then (a login is needed when the 401 asks for a
  Bearer token or the config has an ``oauth`` entry), and `NoLoginFound`, the plain
  error when a server refuses and nothing to log in with is found;
* the redirect URI it registers for a person's login (`CALLBACK_PATH` on 127.0.0.1);
  the browser step that serves it is `mcpvisor.actors.link.oauth_redirect`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthTokenError
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from mcpvisor.actors.core.spec import OAuthSpec, ServerSpec
from mcpvisor.actors.link.logins import NeedsLogin, NoLoginFound, login_message
from mcpvisor.actors.link.oauth_store import RefreshContext, SdkTokenStorage, TokenStore, refresh_due

__all__ = [
    "CALLBACK_PATH",
    "NeedsLogin",
    "NoLoginFound",
    "UpstreamAuth",
    "login_message",
]

logger = logging.getLogger(__name__)

CALLBACK_PATH: Final = "/callback"
"""The loopback redirect URI's path (RFC 8252 §7.3: ``http://127.0.0.1:PORT/callback``)."""
CLIENT_NAME: Final = "mcpvisor"


def _shown(url: httpx2.URL) -> str:
    """``url`` for an error message: no user info, no query."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"


def _discovers(request: httpx2.Request) -> bool:
    """``request`` is one of the flow's metadata look-ups (RFC 9728, RFC 8414, OIDC)."""
    return request.method == "GET" and "/.well-known/" in request.url.path


def _asks_bearer(challenge: str | None) -> bool:
    """A ``WWW-Authenticate`` naming the ``Bearer`` scheme (RFC 6750 §3): the server wants an
    OAuth access token, even when it publishes no metadata to find its endpoints by."""
    return challenge is not None and any(
        part.strip().lower().split(" ", 1)[0] == "bearer" for part in challenge.split(","))


def _refused(response: httpx2.Response) -> bool:
    """A 401, or a 403 asking for more scope: the SDK's flow takes over."""
    if response.status_code == 401:
        return True
    challenge = response.headers.get("www-authenticate", "")
    return response.status_code == 403 and "insufficient_scope" in challenge


class _Provider:
    """What mcpvisor adds to each of the SDK's providers (mixed in before it)."""

    context: Any  # a `RefreshContext` (`_setup`); `Any` as each SDK base declares its own type
    _initialized: bool
    _server: str
    _store: TokenStore
    _on_login_needed: Callable[[], None]

    def _setup(self, server: str, store: TokenStore, clock: Callable[[], float],
               on_login_needed: Callable[[], None], *, person: bool, declared: bool = False) -> None:
        ctx = self.context
        values = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
        self.context = RefreshContext(**values, clock=clock)
        self._server = server
        self._store = store
        self._on_login_needed = on_login_needed
        self._person = person
        self._declared = declared

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        login = await self._store.load()
        if login.metadata is not None and self.context.oauth_metadata is None:
            # A refresh after a restart must reach the token endpoint discovery found.
            self.context.oauth_metadata = login.metadata
        self.context.obtained_at = login.obtained_at
        self.context.token_expiry_time = refresh_due(login.tokens, login.obtained_at)

    async def _adopt_stored(self) -> None:
        """Take tokens another proxy (or ``mcp login``) stored since ours were issued; never
        older ones (a read racing our own refresh's write sees the tokens it replaced)."""
        login = await self._store.load()
        ctx = self.context
        held = ctx.current_tokens
        if login.tokens is None or (held is not None and login.tokens.access_token == held.access_token):
            return
        if held is not None and (login.obtained_at or 0.0) <= (ctx.obtained_at or 0.0):
            return
        ctx.current_tokens = login.tokens
        ctx.obtained_at = login.obtained_at
        ctx.token_expiry_time = refresh_due(login.tokens, login.obtained_at)

    _challenged: bool = False
    """The server refused a request once: from then on a request without a token goes
    through the SDK's flow (which logs in) rather than straight out."""

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        ctx = self.context
        challenge: str | None = None  # the ``WWW-Authenticate`` of the server's refusal of ``request``
        if self._initialized and ctx.current_tokens is not None and not ctx.is_token_valid():
            await self._adopt_stored()
        untouched = ctx.current_tokens is None and not self._challenged
        if self._initialized and (ctx.is_token_valid() or untouched):
            # The common cases: a valid token, or a server that never asked for one. No lock
            # (the SDK's flow holds one across the whole request, which would put concurrent
            # calls to one server in a line).
            sent = ctx.current_tokens
            if sent is not None:
                self._add_auth_header(request)  # type: ignore[attr-defined]
            response = yield request
            if not _refused(response):
                return
            challenge = response.headers.get("www-authenticate")
            self._challenged = True
            if (response.status_code == 401 and sent is not None and ctx.current_tokens is sent
                    and ctx.can_refresh_token()):
                # Refused before its time: refresh it (the first of several refused calls to
                # take the flow's lock does; the others then find the new token valid).
                ctx.token_expiry_time = 0.0
        flow = super()._auth_flow(request)  # type: ignore[misc]
        tried: list[str] = []  # the metadata look-ups of this flow and their answers (`NoLoginFound`)
        try:
            outgoing = await flow.__anext__()
            while True:
                registers = self._registers(outgoing)
                ctx = self.context
                bare = ctx.oauth_metadata is None and ctx.protected_resource_metadata is None
                if registers and not self._person:
                    if bare and not (self._declared or _asks_bearer(challenge)):
                        # No metadata, no Bearer challenge, no ``oauth`` entry: nothing says
                        # this 401 is OAuth's (a server may want another credential).
                        await flow.aclose()
                        raise NoLoginFound(self._server, tried, _NOT_BEARER.format(server=self._server))
                    # Nobody can log in on this link: register when someone can (the
                    # registration names the redirect listener's port). Without metadata
                    # the login uses the 2025-03-26 default endpoints at the origin.
                    self._on_login_needed()
                    raise NeedsLogin(self._server)
                response = yield outgoing
                if outgoing is request and _refused(response):
                    challenge = response.headers.get("www-authenticate")
                elif _discovers(outgoing):
                    tried.append(f"{_shown(outgoing.url)}: {response.status_code}")
                elif registers and bare and response.status_code not in (200, 201):
                    # The 2025-03-26 default registration endpoint is not there either.
                    await flow.aclose()
                    raise NoLoginFound(self._server, tried, f"and no client registration at "
                                       f"{_shown(outgoing.url)}: {response.status_code}")
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    _declared: bool = False
    """The config gives the server an ``oauth`` entry: a 401 is OAuth's even without metadata."""
    _person: bool = False
    """A person can be asked (a browser and a redirect listener): only then a client is
    registered and an authorization asked for."""

    def _registers(self, request: httpx2.Request) -> bool:
        """``request`` is the flow's Dynamic Client Registration (RFC 7591)."""
        metadata = self.context.oauth_metadata
        endpoint = metadata.registration_endpoint if metadata is not None else None
        if request.method != "POST":
            return False
        if endpoint is not None:
            return str(request.url) == str(endpoint)
        return request.url.path == "/register"  # the SDK's fallback without metadata

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        if response.status_code == 200:
            ok: bool = await super()._handle_refresh_response(response)  # type: ignore[misc]
            return ok
        error = _error_code(await response.aread())
        if error == "invalid_grant":
            sent = self.context.current_tokens.refresh_token if self.context.current_tokens else None
            if not await self._store.forget_tokens(refresh_token=sent):
                await self._adopt_stored()  # another proxy refreshed first: use its tokens
                return bool(self.context.is_token_valid())
            logger.info("%s: the refresh token was refused (invalid_grant); a new login is needed",
                        self._server)
            self.context.clear_tokens()
            if not self._person:  # a person at hand: the flow goes on to the login itself
                self._on_login_needed()
            return False
        if response.status_code >= 500 or response.status_code == 429:
            # The authorization server is down, not the grant: keep the tokens, fail this try.
            raise OAuthTokenError(f"token refresh failed: HTTP {response.status_code}")
        logger.info("%s: token refresh refused (HTTP %d, %s)", self._server, response.status_code, error)
        self.context.clear_tokens()
        return False

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)  # type: ignore[misc]
        if self.context.oauth_metadata is not None:
            await self._store.save_metadata(self.context.oauth_metadata)


_NOT_BEARER: Final = (
    "and its 401 asks for no Bearer token. If it wants another credential, set it in the "
    "server's headers; if it uses OAuth at the default endpoints (/authorize, /token, "
    "/register at its origin), run mcpvisor mcp login {server}")


def _error_code(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    return error if isinstance(error, str) else None


class _CodeProvider(_Provider, OAuthClientProvider):
    """The authorization-code flow (a person in a browser)."""

    fixed_client: OAuthClientInformationFull | None = None
    """A pre-registered client (``oauth.clientId``): used as it is, never registered."""
    listening: bool = False
    """A redirect listener is open: a stored registration for another redirect URI is
    registered again (without one, the stored client is kept: it can still refresh)."""

    async def _initialize(self) -> None:
        await super()._initialize()
        ctx = self.context
        if self.fixed_client is not None:
            ctx.client_info = self.fixed_client
            return
        client = ctx.client_info
        uris = ctx.client_metadata.redirect_uris or []
        if (self.listening and client is not None and client.redirect_uris
                and ctx.client_metadata_url != client.client_id
                and not set(map(str, uris)) <= set(map(str, client.redirect_uris))):
            # Registered for another loopback port: register again rather than be refused.
            ctx.client_info = None


def _client_credentials(spec: OAuthSpec, server_url: str, storage: SdkTokenStorage) -> OAuthClientProvider:
    """The SDK's machine-to-machine provider the config asks for, with our additions."""
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )
    from mcp.shared.exceptions import MCPDeprecationWarning

    scope = " ".join(spec.scopes) or None
    client_id = spec.client_id or ""
    with warnings.catch_warnings():
        # No issuer is configured: the one discovery yields is used (the SDK warns that
        # a later version will want it named).
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        if spec.private_key_file is not None:
            with open(spec.private_key_file, encoding="utf-8") as f:
                key = f.read()
            jwt = SignedJWTParameters(issuer=client_id, subject=client_id, signing_key=key,
                                      signing_algorithm=_algorithm(key))

            class _JWT(_Provider, PrivateKeyJWTOAuthProvider):
                pass

            return _JWT(server_url, storage, client_id, jwt.create_assertion_provider(), scope=scope)

        class _Secret(_Provider, ClientCredentialsOAuthProvider):
            pass

        method = spec.token_endpoint_auth_method
        return _Secret(server_url, storage, client_id, spec.client_secret or "",
                       token_endpoint_auth_method="client_secret_post" if method == "client_secret_post"
                       else "client_secret_basic", scope=scope)


def _algorithm(pem: str) -> str:
    """The JWS algorithm for a PEM key: ES256 for an EC key, RS256 otherwise."""
    return "ES256" if "EC PRIVATE KEY" in pem or _is_ec(pem) else "RS256"


def _is_ec(pem: str) -> bool:
    try:
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        return isinstance(load_pem_private_key(pem.encode(), password=None), ec.EllipticCurvePrivateKey)
    except (ValueError, TypeError, ImportError):
        return False


RedirectHandler = Callable[[str], Awaitable[None]]
CallbackHandler = Callable[[], Awaitable[AuthorizationCodeResult]]


class UpstreamAuth:
    """The `httpx2.Auth` of one server's HTTP client, and what its actor needs to know.

    Args:
        spec: the server (its ``url`` and ``oauth`` entry).
        store: where its tokens live.
        redirect: what to do with an authorization URL (open the browser, or raise
            `NeedsLogin` where no person may be asked); None: always `NeedsLogin`.
        callback: waits for the browser's redirect (`CallbackListener.wait`).
        redirect_uri: the loopback redirect URI (``oauth.callbackPort`` or a free port).
        on_login_needed: told (at once, on the link's task) when a login is needed.
        clock: wall-clock seconds (a test moves it to a token's refresh point).
    """

    def __init__(self, spec: ServerSpec, store: TokenStore, *, redirect: RedirectHandler | None = None,
                 callback: CallbackHandler | None = None, redirect_uri: str | None = None,
                 on_login_needed: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.server = spec.name
        oauth = spec.oauth or OAuthSpec()
        url = spec.url or ""
        self.needed = False
        """Set when the server asked for an authorization only a person can give."""

        def needed() -> None:
            self.needed = True
            if on_login_needed is not None:
                on_login_needed()

        async def no_browser(url: str) -> None:
            needed()
            raise NeedsLogin(spec.name)

        async def redirecting(auth_url: str) -> None:
            if redirect is None:
                await no_browser(auth_url)
                return
            await redirect(auth_url)

        async def no_callback() -> AuthorizationCodeResult:
            raise NeedsLogin(spec.name)

        storage = SdkTokenStorage(store, clock)
        self.provider: OAuthClientProvider
        if oauth.grant == "client_credentials":
            self.provider = _client_credentials(oauth, url, storage)
        else:
            uri = redirect_uri or f"http://127.0.0.1:{oauth.callback_port or 0}{CALLBACK_PATH}"
            metadata = OAuthClientMetadata(
                client_name=CLIENT_NAME,
                redirect_uris=[AnyUrl(uri)],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=" ".join(oauth.scopes) or None,
                token_endpoint_auth_method=_method(oauth),
            )
            provider = _CodeProvider(url, metadata, storage, redirecting, callback or no_callback,
                                     client_metadata_url=oauth.client_metadata_url)
            provider.listening = redirect_uri is not None
            if oauth.client_id:
                # Pre-registered: the client the config names, never a dynamic registration.
                fixed = OAuthClientInformationFull(
                    client_id=oauth.client_id, client_secret=oauth.client_secret,
                    redirect_uris=[AnyUrl(uri)], token_endpoint_auth_method=_method(oauth),
                    grant_types=["authorization_code", "refresh_token"],
                )
                provider.fixed_client = fixed
            self.provider = provider
        self.provider._setup(spec.name, store, clock, needed,  # type: ignore[attr-defined]
                             person=(redirect is not None and callback is not None)
                             or oauth.grant == "client_credentials", declared=spec.oauth is not None)


def _method(oauth: OAuthSpec) -> Any:
    """The token endpoint auth method to register (None: the SDK's default choice)."""
    method = oauth.token_endpoint_auth_method
    if method is None and oauth.client_id:
        return "client_secret_basic" if oauth.client_secret else "none"
    return method
