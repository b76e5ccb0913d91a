"""One connection to the store per purpose, used from worker threads.

psycopg's async API runs on asyncio only, so mcpvisor uses its sync API in
``trio.to_thread`` workers: each `Link` is one connection used by one thread at a time
(its own lock), opened on first use and opened again after a failure, so the store
coming back needs no restart. Every failure to reach the store becomes
`StoreUnreachable`, whose message names the host, port and database, never the password.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg

from mcpvisor.pgstore import StoreUnreachable, replica_name
from mcpvisor.redact import scrub, scrub_known

CONNECT_TIMEOUT_S: Final = 2
"""libpq's connect timeout (its minimum): a state change while the store is down fails
within about this long."""
STATEMENT_TIMEOUT_MS: Final = 10_000
"""Bound on one statement: the store's rows are small; longer means it is stuck."""


def connect(url: str, purpose: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A new connection to ``url``, named after the replica and ``purpose`` in ``pg_stat_activity``.

    Raises:
        StoreUnreachable: it cannot be opened (the reason names no secret).
    """
    try:
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name=f"mcpvisor {replica_name()} {purpose}"[:63],
                               options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}")
    except psycopg.Error as exc:
        raise StoreUnreachable(url, reason(exc, url)) from None


def reason(exc: BaseException, url: str) -> str:
    """The first line of what went wrong, without the URL's password (or any known secret)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    secrets = [url]
    try:
        from urllib.parse import urlsplit

        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        secrets.append(password)
    return scrub_known(scrub(text, secrets))


class Link:
    """One connection for one purpose (state, journal, health...), one thread at a time."""

    def __init__(self, url: str, purpose: str) -> None:
        self.url = url
        self.purpose = purpose
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def _open(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            try:  # a connection kept from before the store restarted is dead: find out here
                conn.execute("SELECT 1")
                return conn
            except psycopg.Error:
                pass
        self._drop()
        conn = self._conn = connect(self.url, self.purpose)
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    @contextmanager
    def transaction(self, *, wait: bool = True) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in a transaction: committed when the block ends, rolled back if it raises.

        Args:
            wait: False: raise `StoreUnreachable` at once when another thread holds the link.

        Raises:
            StoreUnreachable: the store cannot be reached, or the connection was lost (the
                link opens a new one next time). Other errors of the block pass through.
        """
        if not self._lock.acquire(blocking=wait):
            raise StoreUnreachable(self.url, "an earlier request to it has not answered yet")
        try:
            conn = self._open()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                self._drop()
                raise StoreUnreachable(self.url, reason(exc, self.url)) from None
            except psycopg.InterfaceError as exc:
                self._drop()
                raise StoreUnreachable(self.url, reason(exc, self.url)) from None
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._drop()
