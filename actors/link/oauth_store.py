"""What one upstream login leaves behind, and when its token is due for a refresh.

The OAuth client (`mcpvisor.actors.link.oauth`) keeps a server's tokens, its client
registration and its authorization server's metadata behind a `TokenStore` port (the
files of `mcpvisor.tokens` in production, shared by every proxy on one state directory).
This module owns that port and the bookkeeping around it:

* `StoredLogin` and `TokenStore`: what is stored and how it is read and written;
* `SdkTokenStorage`: the SDK's ``TokenStorage`` over a `TokenStore`, stamping when
  tokens were obtained so their expiry survives a restart;
* `RefreshContext` and `refresh_due`: a token counts as expired at `REFRESH_AT` of its
  lifetime, on a clock a test can move, rather than at its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken

__all__ = ["REFRESH_AT", "RefreshContext", "SdkTokenStorage", "StoredLogin", "TokenStore", "refresh_due"]

REFRESH_AT: Final = 0.8
"""A token is refreshed once this fraction of its lifetime has passed, so a call never
goes out with a token about to expire (clocks drift; a long call outlives a short token)."""


@dataclass(frozen=True, slots=True)
class StoredLogin:
    """What a `TokenStore` holds for one server under its current issuer."""

    tokens: OAuthToken | None = None
    obtained_at: float | None = None
    """Wall-clock seconds when ``tokens`` were issued (their expiry survives a restart)."""
    client: OAuthClientInformationFull | None = None
    metadata: OAuthMetadata | None = None


class TokenStore(Protocol):
    """Where one server's tokens live (`mcpvisor.tokens.FileTokenStore` in production).

    Every method may block on a file lock shared with other proxies; none raises for a
    missing file (an empty `StoredLogin`).
    """

    async def load(self) -> StoredLogin: ...

    async def save_tokens(self, tokens: OAuthToken, obtained_at: float) -> None: ...

    async def save_client(self, client: OAuthClientInformationFull) -> None: ...

    async def save_metadata(self, metadata: OAuthMetadata) -> None: ...

    async def forget_tokens(self, *, refresh_token: str | None) -> bool:
        """Delete the tokens, unless the stored refresh token is no longer ``refresh_token``
        (another proxy replaced them meanwhile). Returns whether they were deleted."""
        ...

    def stamp(self) -> int:
        """Changes whenever anything is stored (a login elsewhere wakes a waiting server)."""
        ...


class SdkTokenStorage:
    """The SDK's `TokenStorage` over a `TokenStore`, stamping when tokens were obtained."""

    def __init__(self, store: TokenStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    async def get_tokens(self) -> OAuthToken | None:
        return (await self.store.load()).tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.store.save_tokens(tokens, self.clock())

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return (await self.store.load()).client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.store.save_client(client_info)


@dataclass
class RefreshContext(OAuthContext):
    """The SDK's flow context with expiry at `REFRESH_AT` of a token's life, on our clock."""

    clock: Callable[[], float] = time.time
    obtained_at: float | None = None
    """When `current_tokens` were issued (wall clock): stored tokens are taken only if newer."""

    def update_token_expiry(self, token: OAuthToken) -> None:
        self.obtained_at = self.clock()
        self.token_expiry_time = refresh_due(token, self.obtained_at)

    def is_token_valid(self) -> bool:
        return bool(self.current_tokens and self.current_tokens.access_token
                    and (self.token_expiry_time is None or self.clock() <= self.token_expiry_time))


def refresh_due(token: OAuthToken | None, obtained_at: float | None) -> float | None:
    """When ``token`` should be refreshed (None: it does not say when it expires)."""
    if token is None or token.expires_in is None or obtained_at is None:
        return None
    return obtained_at + REFRESH_AT * token.expires_in
