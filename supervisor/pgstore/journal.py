"""The call journal in the PostgreSQL store: one ``mcpvisor_calls`` table for every replica.

`PgJournalDB` is the journal writer's database (`mcpvisor.journal.open_journal`'s
``opener``): the same rows as the SQLite journal, each with the replica that served the
call, written with ``COPY`` in one transaction per batch. A batch the store cannot take
is held and tried again by the writer while the store is unreachable (``retries``):
calls never wait on the store.

`read_rows` is what ``mcpvisor journal postgresql://...`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg

from mcpvisor.journal._writer import CallRecord, table_rows
from mcpvisor.pgstore import StoreError, StoreUnreachable, shown_url
from mcpvisor.pgstore.link import Link, connect, reason

COLUMNS: Final = ("replica", "time", "session", "run", "server", "tool", "arg_bytes", "arg_digest",
                  "result_bytes", "result_digest", "arguments", "result", "outcome", "error", "latency_ms",
                  "retries", "restarts", "list_version", "trace_id")
_COPY: Final = f"COPY mcpvisor_calls ({', '.join(COLUMNS)}) FROM STDIN"


class PgJournalDB:
    """The journal writer's side of the store (one worker thread at a time)."""

    errors: tuple[type[BaseException], ...] = (StoreError, psycopg.Error)
    retries: tuple[type[BaseException], ...] = (StoreUnreachable,)
    """Only an unreachable store is waited for: a batch it refuses (bad data) is dropped."""

    def __init__(self, url: str, replica: str, *, payloads: bool) -> None:
        self.path = shown_url(url)
        self.replica = replica
        self.payloads = payloads
        self._link = Link(url, "journal")

    def rows(self, records: Sequence[CallRecord], wall_offset: float) -> list[tuple[Any, ...]]:
        return [(self.replica, *row) for row in table_rows(records, wall_offset, payloads=self.payloads)]

    def insert(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self._link.transaction() as cur, cur.copy(_COPY) as copy:
            for row in rows:
                copy.write_row(row)

    def close(self) -> None:
        self._link.close()


class _Reader:
    """A connection that answers the SQLite journal reader's queries (``?`` placeholders,
    ``PRAGMA table_info``) from the store's table, so the summaries are computed once."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if sql.startswith("PRAGMA table_info(calls)"):
            return self.conn.execute(
                "SELECT ordinal_position, column_name FROM information_schema.columns "
                "WHERE table_name = 'mcpvisor_calls' ORDER BY ordinal_position")
        return self.conn.execute(sql.replace("FROM calls", "FROM mcpvisor_calls").replace("?", "%s"), args)


def read_rows(url: str, query: Any) -> list[Any]:
    """``query(conn)``'s rows from the store's journal table (as `mcpvisor.journal._summary` reads a file).

    Raises:
        StoreUnreachable: the store cannot be reached.
        StoreError: it has no journal table (never migrated).
    """
    with connect(url, "journal reader") as conn:
        try:
            rows: list[Any] = query(_Reader(conn))
        except psycopg.errors.UndefinedTable:
            raise StoreError(f"the store at {shown_url(url)} has no journal yet "
                             "(run `mcpvisor store migrate`, or start a replica on it)") from None
        except psycopg.Error as exc:
            raise StoreUnreachable(url, reason(exc, url)) from None
    return rows


def replicas(url: str, run: str | None = None) -> dict[str, int]:
    """Calls per replica (the summary's extra part for a shared journal)."""
    def query(conn: _Reader) -> list[Any]:
        where, args = ("WHERE run = ?", (run,)) if run is not None else ("", ())
        return list(conn.execute(f"SELECT replica, count(*) FROM calls {where} GROUP BY replica "
                                 "ORDER BY replica", args).fetchall())

    return {name: int(count) for name, count in read_rows(url, query)}
