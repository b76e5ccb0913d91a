"""The state, the remembered catalog and the OAuth tokens in the PostgreSQL store.

Each class keeps the interface and the document shape of its file counterpart, so the
menu, the boot, the upstream actors and the commands use either without knowing which:

* `PgStateStore` (`mcpvisor.state.StateStore`): one row holding the state document;
  every update is a read-modify-write under ``SELECT ... FOR UPDATE`` (replicas changing
  it at once are serialized, none is lost), and tells the other replicas (``NOTIFY``) in
  the same transaction, so they hear of it exactly when it is committed.
* `PgCatalog` (`mcpvisor.remembered.CatalogFile`): one row per server.
* `PgTokenStore` (`mcpvisor.tokens.FileTokenStore`): one row per server holding the
  token document sealed with Fernet (AES-128-CBC with HMAC-SHA256, from the
  ``cryptography`` package) under a key derived from ``$MCPVISOR_STORE_KEY``; a store
  holding tokens is useless to whoever reads the database without the key.

All of it is blocking: called from worker threads (the async methods of `PgTokenStore`
go there themselves).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcpvisor import redact
from mcpvisor._atomic import dump_json
from mcpvisor.actors.core.model import SavedState
from mcpvisor.actors.link.oauth_store import StoredLogin
from mcpvisor.pgstore import KEY_ENV, StoreKeyError
from mcpvisor.remembered import CATALOG_VERSION, Remembered
from mcpvisor.state import StateStore, _decode_state, _encode_state
from mcpvisor.tokens import FileTokenStore, edit, login_of

if TYPE_CHECKING:
    from mcpvisor.pgstore.link import Link
    from mcpvisor.pgstore.store import PgStore

CHANNEL: Final = "mcpvisor"
"""The ``LISTEN/NOTIFY`` channel of every replica of one store."""
MIN_KEY_CHARS: Final = 32
"""``$MCPVISOR_STORE_KEY`` is at least this long (``openssl rand -base64 32`` gives 44)."""
_SALT: Final = b"mcpvisor store v1"


def notify(cur: Any, kind: str, origin: str, server: str | None = None) -> None:
    """Tell every replica (delivered when the transaction commits): ``kind`` is ``state`` or ``token``."""
    payload = json.dumps({"kind": kind, "origin": origin, "server": server})
    cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


# --- the state -----------------------------------------------------------------------


class PgStateStore(StateStore):
    """The state document in ``mcpvisor_state`` (see the module doc); the conveniences
    (`save_toolset`, `set_equipped`...) are `StateStore`'s, over this `load` and `update`.

    ``directory`` stays the replica's own state directory (its control socket and the
    like live there); ``path`` is what messages name: the store, without its password.
    """

    def __init__(self, store: PgStore, directory: Path) -> None:
        super().__init__(directory)
        self._store = store
        self.path = store.shown  # type: ignore[assignment]  # messages only: a URL, not a file

    @property
    def _link(self) -> Link:
        return self._store.data

    def load(self) -> SavedState:
        with self._link.transaction() as cur:
            row = cur.execute("SELECT doc FROM mcpvisor_state WHERE id = 1").fetchone()
        return _decode_state(row[0] if row else {}, self.path)

    def update(self, fn: Callable[[SavedState], SavedState]) -> SavedState:
        """As `mcpvisor.state.StateStore.update`, serialized by the row's lock; the other
        replicas are told when it commits (nothing is written, nor told, when unchanged)."""
        with self._link.transaction() as cur:
            cur.execute("INSERT INTO mcpvisor_state (id, doc) VALUES (1, '{}') ON CONFLICT (id) DO NOTHING")
            row = cur.execute("SELECT doc FROM mcpvisor_state WHERE id = 1 FOR UPDATE").fetchone()
            raw: dict[str, Any] = row[0] if row else {}
            new = fn(_decode_state(raw, self.path))
            if not isinstance(new, SavedState):
                raise TypeError(f"update function returned {type(new).__name__}, not SavedState")
            out = _encode_state(new, raw)
            if dump_json(out) != dump_json(raw):
                cur.execute("UPDATE mcpvisor_state SET doc = %s, updated_at = now() WHERE id = 1",
                            (json.dumps(out),))
                notify(cur, "state", self._store.origin)
        return new


# --- the remembered catalog ------------------------------------------------------------


class PgCatalog:
    """Each server's remembered lists in ``mcpvisor_catalog`` (as `CatalogFile`)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store
        self.path = store.shown

    def load(self) -> dict[str, Remembered]:
        with self._store.data.transaction() as cur:
            rows = cur.execute("SELECT server, doc FROM mcpvisor_catalog").fetchall()
        out: dict[str, Remembered] = {}
        for server, doc in rows:
            if isinstance(doc, dict) and doc.get("version") == CATALOG_VERSION:
                entry = Remembered.from_json(doc.get("entry"))
                if entry is not None:
                    out[server] = entry
        return out

    def remember(self, server: str, entry: Remembered) -> bool:
        """Store ``entry`` as ``server``'s; False when the store already held the same lists."""
        doc = {"version": CATALOG_VERSION, "entry": entry.to_json()}
        with self._store.data.transaction() as cur:
            row = cur.execute("SELECT doc FROM mcpvisor_catalog WHERE server = %s FOR UPDATE",
                              (server,)).fetchone()
            old = Remembered.from_json(row[0].get("entry")) if row and isinstance(row[0], dict) else None
            if old is not None and (old.fingerprint, old.era, old.lists, old.withheld, old.fresh_until) == (
                    entry.fingerprint, entry.era, entry.lists, entry.withheld, entry.fresh_until):
                return False
            cur.execute("INSERT INTO mcpvisor_catalog (server, doc) VALUES (%s, %s) ON CONFLICT (server) "
                        "DO UPDATE SET doc = excluded.doc, updated_at = now()", (server, json.dumps(doc)))
        return True


# --- the OAuth tokens ------------------------------------------------------------------


def sealer(env: Mapping[str, str] | None = None) -> Fernet | None:
    """The Fernet key derived (HKDF-SHA256) from ``$MCPVISOR_STORE_KEY``; None when it is unset.

    Raises:
        StoreKeyError: the key is shorter than `MIN_KEY_CHARS`.
    """
    key = (os.environ if env is None else env).get(KEY_ENV, "")
    if not key:
        return None
    redact.remember([key])
    if len(key) < MIN_KEY_CHARS:
        raise StoreKeyError(f"${KEY_ENV} is too short ({len(key)} characters; at least {MIN_KEY_CHARS}: "
                            "generate one with `openssl rand -base64 32`)")
    derived = HKDF(algorithm=SHA256(), length=32, salt=_SALT, info=b"oauth tokens").derive(key.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def _no_key(server: str) -> StoreKeyError:
    return StoreKeyError(f"${KEY_ENV} is not set: the PostgreSQL store keeps server {server}'s OAuth tokens "
                         f"encrypted with it; set it (the same on every replica, at least {MIN_KEY_CHARS} "
                         "characters, e.g. `openssl rand -base64 32`)")


def unseal(fernet: Fernet | None, server: str, sealed: bytes) -> dict[str, Any]:
    """The token document of ``server`` from its sealed bytes.

    Raises:
        StoreKeyError: no key, or not the key they were sealed with.
    """
    if fernet is None:
        raise _no_key(server)
    try:
        doc = json.loads(fernet.decrypt(bytes(sealed)))
    except InvalidToken:
        raise StoreKeyError(f"server {server}'s stored OAuth tokens cannot be decrypted with ${KEY_ENV}: "
                            "it is not the key they were stored with") from None
    return doc if isinstance(doc, dict) else {}


class PgTokenStore(FileTokenStore):
    """One server's tokens in ``mcpvisor_oauth``, sealed (see the module doc); every
    change tells the other replicas, whose waiting server then starts with them."""

    def __init__(self, store: PgStore, server: str) -> None:
        self.server = server
        self._store = store
        # What messages name (a URL, not a file): `FileTokenStore.path` is a Path.
        self.path = f"{store.shown} (server {server})"  # type: ignore[assignment]

    def stamp(self) -> int:
        """Changes when this server's tokens changed in the store (heard by `follow`)."""
        return self._store.token_stamp(self.server)

    def _read(self) -> dict[str, Any] | None:
        with self._store.data.transaction() as cur:
            row = cur.execute("SELECT sealed FROM mcpvisor_oauth WHERE server = %s",
                              (self.server,)).fetchone()
        if row is None:
            return None
        return unseal(sealer(), self.server, row[0])

    async def _update(self, change: Callable[[dict[str, Any]], None], *, issuer: str | None = None,
                      create: bool = True) -> None:
        def write() -> None:
            fernet = sealer()
            if fernet is None:
                raise _no_key(self.server)
            with self._store.data.transaction() as cur:
                row = cur.execute("SELECT sealed FROM mcpvisor_oauth WHERE server = %s FOR UPDATE",
                                  (self.server,)).fetchone()
                if row is None and not create:
                    return
                doc = unseal(fernet, self.server, row[0]) if row is not None else {}
                edit(doc, self.server, change, issuer=issuer)
                sealed = fernet.encrypt(json.dumps(doc).encode())
                cur.execute("INSERT INTO mcpvisor_oauth (server, sealed) VALUES (%s, %s) "
                            "ON CONFLICT (server) DO UPDATE SET sealed = excluded.sealed, updated_at = now()",
                            (self.server, sealed))
                notify(cur, "token", self._store.origin, self.server)

        await trio.to_thread.run_sync(write)

    async def forget(self) -> StoredLogin:
        def remove() -> dict[str, Any] | None:
            with self._store.data.transaction() as cur:
                row = cur.execute("DELETE FROM mcpvisor_oauth WHERE server = %s RETURNING sealed",
                                  (self.server,)).fetchone()
                if row is None:
                    return None
                notify(cur, "token", self._store.origin, self.server)
            try:
                return unseal(sealer(), self.server, row[0])
            except StoreKeyError:
                return None  # forgotten either way; nothing to revoke with

        return login_of(await trio.to_thread.run_sync(remove))
