"""OAuth 2.1 access tokens (JWTs) for the network fronts: `JwtVerifier`.

Owns checking a bearer JWT against its issuer's published keys (RFC 7517 JWKS, found
through the issuer's RFC 8414 metadata unless ``jwksUri`` names it), with PyJWT:
signature, ``exp``/``nbf``, ``iss`` and ``aud``; the scopes come from ``scope`` (RFC 9068)
or ``scp``. The key set is fetched with the SDK's async HTTP client (no thread, no
blocking call under trio), cached for `JWKS_TTL_S`, and fetched again early when a
token names an unknown key id, at most once per `JWKS_MIN_REFRESH_S` (so a stream of
forged key ids cannot make us hammer the issuer). Refusals are logged by reason
only, never with the token or its claims.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx2
import jwt
import trio
from mcp.server.auth.provider import AccessToken

logger = logging.getLogger(__name__)

JWKS_TTL_S: Final = 300.0
"""How long a fetched key set is trusted before it is fetched again (key rotation shows
within 5 minutes; the same order as common JWKS client caches)."""

JWKS_MIN_REFRESH_S: Final = 30.0
"""An unknown ``kid`` refetches the keys at most this often."""

FETCH_TIMEOUT_S: Final = 5.0
"""A silent issuer fails the token check in this long instead of holding the request."""

LEEWAY_S: Final = 30.0
"""Clock skew tolerated on ``exp``/``nbf`` (RFC 7519 section 4.1.4 allows "some small leeway")."""

ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""Asymmetric algorithms only: ``none`` and the HMAC family (keyed by a public key, the
classic confusion attack) are never accepted."""


def resource_url(audience: Sequence[str], fallback: str) -> str:
    """The resource this server is (RFC 9728): the first audience that is an http(s) URL,
    else ``fallback``."""
    for aud in audience:
        if urlsplit(aud).scheme in ("http", "https"):
            return aud
    return fallback


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be: RFC 8414 section 3.1, then OpenID Connect Discovery."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [
        urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-authorization-server" + path, "", "")),
        urlunsplit((parts.scheme, parts.netloc, path + "/.well-known/openid-configuration", "", "")),
    ]


class JwtVerifier:
    """The SDK's `TokenVerifier` for JWT access tokens from one issuer.

    Args:
        issuer: the ``iss`` tokens must carry.
        audience: accepted ``aud`` values (a token must name at least one).
        jwks_uri: the key set's URL; None: read from the issuer's metadata.
    """

    def __init__(self, issuer: str, audience: Sequence[str], *, jwks_uri: str | None = None) -> None:
        self.issuer = issuer
        self.audience = list(audience)
        self.jwks_uri = jwks_uri
        self._keys: jwt.PyJWKSet | None = None
        self._fetched_at = -float("inf")
        self._lock = trio.Lock()

    async def _get_json(self, client: httpx2.AsyncClient, url: str) -> Any:
        response = await client.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()

    async def _fetch(self) -> None:
        async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client:
            uri = self.jwks_uri
            if uri is None:
                for url in metadata_urls(self.issuer):
                    try:
                        meta = await self._get_json(client, url)
                    except (httpx2.HTTPError, ValueError):
                        continue
                    if isinstance(meta, dict) and isinstance(meta.get("jwks_uri"), str):
                        uri = meta["jwks_uri"]
                        break
                if uri is None:
                    raise LookupError(f"{self.issuer} publishes no jwks_uri in its metadata")
                self.jwks_uri = uri
            self._keys = jwt.PyJWKSet.from_dict(await self._get_json(client, uri))
        self._fetched_at = trio.current_time()

    async def _key(self, kid: str | None) -> jwt.PyJWK | None:
        async with self._lock:
            now = trio.current_time()
            stale = now - self._fetched_at > JWKS_TTL_S
            unknown = self._find(kid) is None and now - self._fetched_at > JWKS_MIN_REFRESH_S
            if self._keys is None or stale or unknown:
                try:
                    with trio.fail_after(FETCH_TIMEOUT_S * 3):
                        await self._fetch()
                except (
                    httpx2.HTTPError,
                    ValueError,
                    LookupError,
                    jwt.PyJWKSetError,
                    trio.TooSlowError,
                ) as exc:
                    logger.warning("could not fetch the OAuth issuer's keys: %s", type(exc).__name__)
                    self._fetched_at = now  # back off like an unknown kid would
        return self._find(kid)

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if self._keys is None:
            return None
        keys = self._keys.keys
        if kid is None:
            return keys[0] if len(keys) == 1 else None
        return next((k for k in keys if k.key_id == kid), None)

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check one bearer token; None (and a reason-only log line) when it is refused."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None  # not a JWT (a wrong shared token, most likely)
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            logger.info("refused an access token: algorithm not accepted")
            return None
        key = await self._key(header.get("kid") if isinstance(header.get("kid"), str) else None)
        if key is None:
            logger.info("refused an access token: signed by no key the issuer publishes")
            return None
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            logger.info("refused an access token: %s", type(exc).__name__)
            return None
        scope = claims.get("scope")
        scopes = (
            scope.split()
            if isinstance(scope, str)
            else [s for s in claims.get("scp", []) if isinstance(s, str)]
        )
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else list(aud or [])
        client = claims.get("client_id") or claims.get("azp") or claims.get("sub") or "oauth"
        return AccessToken(
            token=token,
            client_id=str(client),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            resource=next((a for a in auds if a in self.audience), None),
            subject=claims.get("sub"),
            claims={"iss": claims.get("iss")},
        )
