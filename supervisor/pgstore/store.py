"""`PgStore`: the PostgreSQL store one supervisor (or one command) holds.

It owns the connections (one per purpose: the state, catalog and tokens share one; the
health check has its own, so a slow write never makes a replica look down), the
migrations at open, the health check `Supervisor.store_health` answers with, and the
token stamps `follow` bumps when another replica (or ``mcpvisor mcp login``) stores tokens.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
import trio

from mcpvisor import redact
from mcpvisor.pgstore import KEY_ENV, StoreError, StoreKeyError, StoreUnreachable, replica_name, shown_url
from mcpvisor.pgstore.data import PgCatalog, PgStateStore, PgTokenStore, sealer, unseal
from mcpvisor.pgstore.journal import PgJournalDB
from mcpvisor.pgstore.link import Link, connect, reason
from mcpvisor.pgstore.schema import LATEST, Migration, current_version, migrate

HEALTH_TIMEOUT_S: Final = 1.0
"""Bound on the health check's ``SELECT 1``: longer counts as unreachable."""
HEALTH_CACHE_S: Final = 1.0
"""A health answer is reused this long (probes and the dashboard may ask often)."""


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``mcpvisor store check`` found."""

    store: str
    version: int
    latest: int
    key: str
    """``ok`` (a stored token decrypts), ``no tokens`` (nothing to try it on), ``missing``."""
    problems: tuple[str, ...]


class PgStore:
    """One replica's (or one command's) handle on the store at ``url``."""

    def __init__(self, url: str, *, state_dir: Path, replica: str | None = None) -> None:
        self.url = url
        self.shown = shown_url(url)
        self.replica = replica or replica_name()
        self.origin = f"{self.replica}/{os.getpid()}/{secrets.token_hex(4)}"
        """Names this process in what it notifies, so it ignores its own changes."""
        self.data = Link(url, "state")
        self._health = Link(url, "health")
        self.state = PgStateStore(self, state_dir)
        self.catalog = PgCatalog(self)
        self._stamps: dict[str, int] = {}
        self._generation = 0
        self._health_at: float | None = None
        self._health_answer: str | None = None
        password = _password(url)
        if password:
            redact.remember([password, url])

    # --- what the supervisor and the commands use ------------------------------------
    def tokens(self, server: str) -> PgTokenStore:
        return PgTokenStore(self, server)

    def journal_db(self, *, payloads: bool) -> PgJournalDB:
        return PgJournalDB(self.url, self.replica, payloads=payloads)

    def token_stamp(self, server: str) -> int:
        return self._stamps.get(server, 0) + self._generation

    def tokens_changed(self, server: str | None) -> None:
        """Another process stored or deleted ``server``'s tokens (None: any server's, e.g.
        after the listener reconnected and may have missed some)."""
        if server is None:
            self._generation += 1
        else:
            self._stamps[server] = self._stamps.get(server, 0) + 1

    def migrate(self) -> list[Migration]:
        """Apply the missing migrations (blocking).

        Raises:
            StoreUnreachable, StoreError.
        """
        try:
            with connect(self.url, "migrate") as conn:
                return migrate(conn)
        except psycopg.Error as exc:
            raise StoreUnreachable(self.url, reason(exc, self.url)) from None

    def check(self) -> CheckReport:
        """Reachable, the schema current, the key present and able to decrypt a stored token (blocking).

        Raises:
            StoreUnreachable: it cannot be reached (nothing else could be checked).
        """
        problems: list[str] = []
        try:
            with connect(self.url, "check") as conn:
                version = current_version(conn)
                sealed = None
                if version >= 1:
                    row = conn.execute("SELECT server, sealed FROM mcpvisor_oauth ORDER BY updated_at DESC "
                                       "LIMIT 1").fetchone()
                    sealed = (row[0], bytes(row[1])) if row else None
        except psycopg.Error as exc:
            raise StoreUnreachable(self.url, reason(exc, self.url)) from None
        if version < LATEST:
            problems.append(f"the schema is at version {version}, this mcpvisor needs {LATEST}: "
                            "run `mcpvisor store migrate` (or start a replica)")
        elif version > LATEST:
            problems.append(f"the schema is at version {version}, newer than this mcpvisor knows ({LATEST})")
        try:
            fernet = sealer()
        except StoreKeyError as exc:
            fernet = None
            problems.append(str(exc))
            key = "unusable"
        else:
            key = "missing" if fernet is None else "ok"
            if fernet is None:
                problems.append(f"${KEY_ENV} is not set: upstream OAuth tokens cannot be stored or read")
        if fernet is not None:
            if sealed is None:
                key = "no tokens"
            else:
                try:
                    unseal(fernet, *sealed)
                except StoreKeyError as exc:
                    key = "wrong"
                    problems.append(str(exc))
        return CheckReport(self.shown, version, LATEST, key, tuple(problems))

    async def health(self) -> str | None:
        """None when the store answers ``SELECT 1`` within `HEALTH_TIMEOUT_S`, else why not
        (no secret in it); an answer is reused for `HEALTH_CACHE_S`."""
        now = trio.current_time()
        if self._health_at is not None and now - self._health_at < HEALTH_CACHE_S:
            return self._health_answer
        answer: str | None = f"the store at {self.shown} did not answer within {HEALTH_TIMEOUT_S:g}s"
        with trio.move_on_after(HEALTH_TIMEOUT_S):
            try:
                # Abandoned on timeout: the thread ends with its connect or query timeout;
                # meanwhile the link is busy and the next check says so at once.
                await trio.to_thread.run_sync(self._select_one, abandon_on_cancel=True)
                answer = None
            except StoreError as exc:
                answer = str(exc)
        self._health_at, self._health_answer = trio.current_time(), answer
        return answer

    def _select_one(self) -> None:
        with self._health.transaction(wait=False) as cur:
            cur.execute("SELECT 1")

    def close(self) -> None:
        self.data.close()
        self._health.close()


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password
    except ValueError:
        return None


@asynccontextmanager
async def open_store(url: str, *, state_dir: Path, replica: str | None = None) -> AsyncIterator[PgStore]:
    """The store at ``url``, migrated to this version's schema, for the block; its
    connections closed after.

    Raises:
        StoreUnreachable: it cannot be reached.
        StoreError: its schema is newer than this mcpvisor knows.
    """
    store = PgStore(url, state_dir=state_dir, replica=replica)
    try:
        await trio.to_thread.run_sync(store.migrate)
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(store.close)
