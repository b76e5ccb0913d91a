"""The OAuth tokens mcpvisor holds for its upstreams, on disk in the state directory.

Owns `FileTokenStore` (the `mcpvisor.actors.link.oauth_store.TokenStore` of one server) and
`revoke` (``mcpvisor mcp logout``).

One file per server, ``<state dir>/oauth/<server>.json``, mode 0600 in a 0700
directory, written atomically (`mcpvisor._atomic`). Inside, one record per
authorization server (keyed by its issuer: credentials and tokens of one are never
shown to another after a migration) with the registered client, the tokens, when they
were obtained and the server's metadata. Several proxies sharing a state directory
share the file: every write is a read-modify-write under the file's lock, and a
refresh token is only deleted if it is still the one the caller was refused.

Every token value read or written here is added to what logs, errors and status views
are scrubbed of (`mcpvisor.redact.remember`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor import redact
from mcpvisor._atomic import atomic_write_text, dump_json, locked, read_json

if TYPE_CHECKING:
    # The SDK's OAuth models (and its HTTP client, for revocation) load when a token file is
    # read or written: only for a server that logs in, never for a stdio `serve` without one.
    from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken

    from mcpvisor.actors.link.oauth_store import StoredLogin

__all__ = ["DIR_MODE", "FILE_MODE", "FileTokenStore", "revoke", "tokens_dir"]

DIR_MODE: Final = 0o700
"""The token directory: only the user may list it."""
FILE_MODE: Final = 0o600
"""A token file: only the user may read it."""
REVOKE_TIMEOUT_S: Final = 10.0
"""Bound on each revocation request at logout (the tokens are forgotten either way)."""


def tokens_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "oauth"


class FileTokenStore:
    """One server's tokens in ``<state dir>/oauth/<server>.json`` (see the module doc).

    Each method does its file I/O in a worker thread, holding the file's lock.
    """

    def __init__(self, state_dir: Path, server: str) -> None:
        self.server = server
        self.path = tokens_dir(state_dir) / f"{server}.json"

    # -- the TokenStore port ---------------------------------------------------------
    async def load(self) -> StoredLogin:
        doc = await trio.to_thread.run_sync(self._read)
        return _login(doc)

    async def save_tokens(self, tokens: OAuthToken, obtained_at: float) -> None:
        _remember(tokens)

        def change(entry: dict[str, Any]) -> None:
            entry["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
            entry["obtainedAt"] = obtained_at

        await self._update(change)

    async def save_client(self, client: OAuthClientInformationFull) -> None:
        issuer = client.issuer or ""

        def change(entry: dict[str, Any]) -> None:
            entry["client"] = client.model_dump(mode="json", exclude_none=True)

        await self._update(change, issuer=issuer)

    async def save_metadata(self, metadata: OAuthMetadata) -> None:
        def change(entry: dict[str, Any]) -> None:
            entry["metadata"] = metadata.model_dump(mode="json", exclude_none=True)

        await self._update(change)

    async def forget_tokens(self, *, refresh_token: str | None) -> bool:
        forgotten = False

        def change(entry: dict[str, Any]) -> None:
            nonlocal forgotten
            stored = (entry.get("tokens") or {}).get("refresh_token")
            if refresh_token is not None and stored is not None and stored != refresh_token:
                return  # another proxy refreshed since: its tokens are good
            entry.pop("tokens", None)
            entry.pop("obtainedAt", None)
            forgotten = True

        await self._update(change, create=False)
        return forgotten

    # -- logout ----------------------------------------------------------------------
    async def forget(self) -> StoredLogin:
        """Delete the whole file (every issuer's record); returns what the current one held."""

        def remove() -> dict[str, Any] | None:
            with locked(self.path):
                doc = read_json(self.path) if self.path.exists() else None
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                return doc

        return _login(await trio.to_thread.run_sync(remove))

    def stamp(self) -> int:
        """The file's modification time in ns (0: none): changes when anything is stored."""
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return 0

    # -- internals -------------------------------------------------------------------
    def _read(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None  # a server that never logged in leaves nothing in the state directory
        with locked(self.path):
            return read_json(self.path) if self.path.exists() else None

    async def _update(self, change: Callable[[dict[str, Any]], None], *, issuer: str | None = None,
                      create: bool = True) -> None:
        def write() -> None:
            if not create and not self.path.exists():
                return
            directory = self.path.parent
            directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            os.chmod(directory, DIR_MODE)
            with locked(self.path):
                doc = (read_json(self.path) if self.path.exists() else None) or {}
                edit(doc, self.server, change, issuer=issuer)
                atomic_write_text(self.path, dump_json(doc), mode=FILE_MODE)

        await trio.to_thread.run_sync(write)


def edit(doc: dict[str, Any], server: str, change: Callable[[dict[str, Any]], None], *,
         issuer: str | None = None) -> None:
    """Apply ``change`` to the current issuer's record of a token document (made if missing);
    ``issuer``, when given, becomes the current one. The document's shape is the same in a
    file and in the PostgreSQL store (`mcpvisor.pgstore.data`)."""
    doc["server"] = server
    if issuer is not None:
        doc["issuer"] = issuer
    current = str(doc.get("issuer", ""))
    issuers = doc.setdefault("issuers", {})
    change(issuers.setdefault(current, {}))


def login_of(doc: dict[str, Any] | None) -> StoredLogin:
    """The current issuer's record of a token document (empty when there is none)."""
    return _login(doc)


def _login(doc: dict[str, Any] | None) -> StoredLogin:
    """The current issuer's record of a token file (empty when unreadable)."""
    from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken

    from mcpvisor.actors.link.oauth_store import StoredLogin

    if not doc:
        return StoredLogin()
    entry = (doc.get("issuers") or {}).get(str(doc.get("issuer", ""))) or {}
    tokens = _model(OAuthToken, entry.get("tokens"))
    if tokens is not None:
        _remember(tokens)
    client = _model(OAuthClientInformationFull, entry.get("client"))
    if client is not None and client.client_secret:
        redact.remember([client.client_secret])
    obtained = entry.get("obtainedAt")
    at = float(obtained) if isinstance(obtained, int | float) else None
    metadata = _model(OAuthMetadata, entry.get("metadata"))
    return StoredLogin(tokens=tokens, obtained_at=at, client=client, metadata=metadata)


def _model(cls: Any, value: Any) -> Any:
    from pydantic import ValidationError

    if not isinstance(value, dict):
        return None
    try:
        return cls.model_validate(value)
    except ValidationError:
        return None


def _remember(tokens: OAuthToken) -> None:
    redact.remember([t for t in (tokens.access_token, tokens.refresh_token) if t])


async def revoke(login: StoredLogin) -> list[str]:
    """Revoke ``login``'s tokens where its authorization server advertises RFC 7009
    revocation; returns what was revoked ("refresh_token", "access_token"). Failures are
    not errors: the tokens are forgotten either way."""
    import httpx2

    metadata, tokens, client = login.metadata, login.tokens, login.client
    endpoint = metadata.revocation_endpoint if metadata is not None else None
    if endpoint is None or tokens is None:
        return []
    done: list[str] = []
    async with httpx2.AsyncClient(timeout=REVOKE_TIMEOUT_S) as http:
        for kind in ("refresh_token", "access_token"):
            value = getattr(tokens, kind)
            if not value:
                continue
            data = {"token": value, "token_type_hint": kind}
            auth: tuple[str | bytes, str | bytes] | None = None
            if client is not None:
                data["client_id"] = client.client_id
                if client.client_secret and client.token_endpoint_auth_method == "client_secret_post":
                    data["client_secret"] = client.client_secret
                elif client.client_secret:
                    auth = (client.client_id, client.client_secret)
            try:
                response = await (http.post(str(endpoint), data=data, auth=auth) if auth is not None
                                  else http.post(str(endpoint), data=data))
            except httpx2.HTTPError:
                continue
            if response.status_code == 200:
                done.append(kind)
    return done
