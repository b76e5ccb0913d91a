"""Who may use the network fronts: bearer tokens, and the Host and Origin rules.

Owns, with no I/O of its own and no knowledge of the config file (the supervisor builds
these from ``settings``):

* `StaticTokens`: the SDK's `TokenVerifier` for the shared tokens
  (``settings.authToken``, ``settings.authTokens``, ``$MCPVISOR_TOKEN``,
  ``--token-file``), compared in constant time; the token set is read at every check,
  so a hot reload that removes a token locks its holder out at once, and one that adds
  the first token to an open front guards it from the next request (`guarding`);
* `ChainVerifier`: static tokens first, then an OAuth verifier (`mcpvisor.actors.fronts.oauth`);
* `HostRules`: which Host and Origin headers a front accepts (DNS-rebinding defence),
  as a predicate for the websocket front and as the SDK's `TransportSecuritySettings`
  for the HTTP front, so both fronts apply the same rules;
* `Gate`: the whole admission decision for one websocket handshake, giving the same
  answers the HTTP front gives (401 with ``WWW-Authenticate: Bearer``, 421, 403).

Nothing here logs a token or a header value (issue 12: no secret in any log line).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urlsplit

from mcpvisor.actors.fronts.hosts import LOOPBACK_NAMES, WEB_SCHEMES, host_name, is_loopback, is_wildcard

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

logger = logging.getLogger(__name__)

BEARER: Final = "bearer "
"""RFC 6750 section 2.1: ``Authorization: Bearer <token>`` (scheme case-insensitive)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header value, or None."""
    if not authorization or not authorization.lower().startswith(BEARER):
        return None
    token = authorization[len(BEARER) :].strip()
    return token or None


# --------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------


class Verifier(Protocol):
    """The SDK's `mcp.server.auth.provider.TokenVerifier`, plus whether it guards now."""

    async def verify_token(self, token: str) -> AccessToken | None: ...

    def guarding(self) -> bool:
        """Whether a token is required right now (a hot reload may add the first token or
        remove the last one, so the fronts ask at every request and handshake)."""
        ...


def guarding(verifier: Verifier | None) -> bool:
    """Whether ``verifier`` requires a token right now (None: an open front)."""
    return verifier is not None and verifier.guarding()


class StaticTokens:
    """Shared bearer tokens, each with a name that says which client it belongs to.

    Args:
        tokens: returns name -> token now; called at every check, so a token removed by a
            hot reload is refused from the next request on.
        scopes: the scopes a shared token carries (all that are required: a shared token
            is full access).
    """

    def __init__(self, tokens: Callable[[], Mapping[str, str]], *, scopes: Sequence[str] = ()) -> None:
        self._tokens = tokens
        self._scopes = list(scopes)

    def guarding(self) -> bool:
        return bool(self._tokens())

    def names(self) -> tuple[str, ...]:
        """The names of the tokens configured now (never their values)."""
        return tuple(self._tokens())

    def match(self, presented: str) -> str | None:
        """The name of the token equal to ``presented``, or None.

        Every configured token is compared, each with `hmac.compare_digest`, so the time
        taken says nothing about how much of a token matched or which one did.
        """
        given = presented.encode()
        found: str | None = None
        for name, token in self._tokens().items():
            if hmac.compare_digest(given, token.encode()) and found is None:
                found = name
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        name = self.match(token)
        if name is None:
            return None
        logger.debug("bearer token %r accepted", name)  # its name, never its value
        # The SDK's record (its bearer middleware reads it), imported at the first token
        # checked: a front or a metrics port that checks none loads no SDK for it.
        from mcp.server.auth.provider import AccessToken

        return AccessToken(token=token, client_id=name, scopes=list(self._scopes))


class ChainVerifier:
    """The first verifier that accepts a token wins (static tokens, then OAuth)."""

    def __init__(self, verifiers: Sequence[Verifier]) -> None:
        self.verifiers = tuple(verifiers)

    def guarding(self) -> bool:
        return any(v.guarding() for v in self.verifiers)

    async def verify_token(self, token: str) -> AccessToken | None:
        for verifier in self.verifiers:
            try:
                found = await verifier.verify_token(token)
            except Exception as exc:  # a presented token is attacker input: refuse, never crash the front
                logger.warning("refused a bearer token: its check failed (%s)", type(exc).__name__)
                continue
            if found is not None:
                return found
        return None


# --------------------------------------------------------------------------------------
# Host and Origin
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostRules:
    """The Host names (any port) and browser Origins a front accepts.

    A request without an Origin header (a CLI client, not a browser) passes the Origin
    check; a browser page is admitted only from an allowed host or an origin listed
    in ``settings.allowedOrigins`` (browsers apply no CORS to websockets: the server
    must refuse foreign origins itself).
    """

    hosts: frozenset[str]
    origins: frozenset[str]

    def host_ok(self, value: str | None) -> bool:
        return bool(value) and host_name(value or "") in self.hosts

    def origin_ok(self, value: str | None) -> bool:
        if not value:
            return True
        origin = value.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in WEB_SCHEMES and host_name(parts.netloc) in self.hosts

    def sdk_lists(self) -> tuple[list[str], list[str]]:
        """The same rules as the SDK's `TransportSecuritySettings` lists (hosts, origins)."""
        hosts = sorted(self.hosts)
        allowed_hosts = [pattern for h in hosts for pattern in (h, f"{h}:*")]
        allowed_origins = [
            f"{scheme}://{h}{port}" for h in hosts for scheme in WEB_SCHEMES for port in ("", ":*")
        ]
        return allowed_hosts, allowed_origins + sorted(self.origins)


def host_rules(
    bind: str,
    *,
    machine_addresses: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
) -> HostRules:
    """The Host/Origin rules for a front bound to ``bind``.

    On loopback only loopback names pass (plus ``settings.allowedHosts``). Bound beyond
    loopback, the bind address and every one of the machine's addresses pass too: a
    token, not the Host header, guards such a bind (the start refuses it without one
    unless ``--insecure-no-auth``), and a client on the network names the machine by
    its address.

    Args:
        bind: the ``--host`` given.
        machine_addresses: this machine's interface addresses and names (used only when
            ``bind`` is not loopback).
        allowed_hosts: ``settings.allowedHosts``.
        allowed_origins: ``settings.allowedOrigins`` (exact origins, ``scheme://host[:port]``).
    """
    hosts = {host_name(h) for h in LOOPBACK_NAMES}
    hosts.update(host_name(h) for h in allowed_hosts)
    if not is_loopback(bind):
        if not is_wildcard(bind):
            hosts.add(host_name(bind))
        hosts.update(host_name(a) for a in machine_addresses)
    origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins)
    return HostRules(frozenset(h for h in hosts if h), origins)


# --------------------------------------------------------------------------------------
# one websocket handshake
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP answer refusing a handshake."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: str


class Gate:
    """The admission decision the HTTP front makes, for a websocket handshake.

    Order as on the HTTP front (the SDK's bearer middleware runs before its transport
    security check): token first (401), then Host (421), then Origin (403).

    Args:
        rules: the Host/Origin rules.
        verifier: the token verifier, or None for a front that is always open. It is asked
            at every handshake whether it guards (`guarding`), so a token added by a hot
            reload is required from the next handshake on.
        required_scopes: scopes every accepted token must carry (403 otherwise).
        resource_metadata_url: advertised in ``WWW-Authenticate`` (RFC 9728) when set.
    """

    def __init__(
        self,
        rules: HostRules,
        verifier: Verifier | None = None,
        *,
        required_scopes: Sequence[str] = (),
        resource_metadata_url: str | None = None,
    ) -> None:
        self.rules = rules
        self.verifier = verifier
        self.required_scopes = tuple(required_scopes)
        self.resource_metadata_url = resource_metadata_url

    def _challenge(self, status: int, error: str, description: str) -> Refusal:
        parts = [f'error="{error}"', f'error_description="{description}"']
        if self.resource_metadata_url:
            parts.append(f'resource_metadata="{self.resource_metadata_url}"')
        return Refusal(status, (("WWW-Authenticate", "Bearer " + ", ".join(parts)),), description)

    async def admit(self, headers: Mapping[str, str]) -> tuple[AccessToken | None, Refusal | None]:
        """Decide on one handshake.

        Args:
            headers: the request headers, names lowercased.

        Returns:
            ``(who, None)`` to accept (``who`` is None on an open front), or
            ``(None, refusal)``.
        """
        who: AccessToken | None = None
        if guarding(self.verifier):
            assert self.verifier is not None
            token = bearer_token(headers.get("authorization"))
            who = await self.verifier.verify_token(token) if token is not None else None
            if who is None:
                return None, self._challenge(401, "invalid_token", "Authentication required")
            for scope in self.required_scopes:
                if scope not in who.scopes:
                    return None, self._challenge(403, "insufficient_scope", f"Required scope: {scope}")
        if not self.rules.host_ok(headers.get("host")):
            return None, Refusal(421, (), "Invalid Host header")
        if not self.rules.origin_ok(headers.get("origin")):
            return None, Refusal(403, (), "Invalid Origin header")
        return who, None
