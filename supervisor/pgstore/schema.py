"""The store's tables, created and migrated by mcpvisor itself.

`MIGRATIONS` are numbered and only ever appended to; ``mcpvisor_schema`` records each one
applied. `migrate` takes a session-level advisory lock first, so replicas starting
together apply each migration once (the others wait, then find nothing left to do), and
applies each migration with its version row in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg

from mcpvisor.pgstore import StoreError

LOCK_KEY: Final = 0x6D6370_7669736F
"""The advisory lock the migrations are applied under ("mcpviso" in hex)."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sql: str


MIGRATIONS: Final = (
    Migration(1, "the state, remembered catalog, OAuth tokens and journal tables", """
CREATE TABLE mcpvisor_state (
    id integer PRIMARY KEY CHECK (id = 1),
    doc jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE mcpvisor_catalog (
    server text PRIMARY KEY,
    doc jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE mcpvisor_oauth (
    server text PRIMARY KEY,
    sealed bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE mcpvisor_calls (
    id bigserial PRIMARY KEY,
    replica text NOT NULL,
    time double precision NOT NULL,
    session text,
    run text,
    server text NOT NULL,
    tool text NOT NULL,
    arg_bytes integer,
    arg_digest text,
    result_bytes integer,
    result_digest text,
    arguments text,
    result text,
    outcome text NOT NULL,
    error text,
    latency_ms double precision NOT NULL,
    retries integer NOT NULL DEFAULT 0,
    restarts integer,
    list_version integer,
    trace_id text
);
"""),
)

LATEST: Final = MIGRATIONS[-1].version

_VERSIONS: Final = """
CREATE TABLE IF NOT EXISTS mcpvisor_schema (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The highest migration applied (0: none, not even the version table)."""
    exists = conn.execute("SELECT to_regclass('mcpvisor_schema') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM mcpvisor_schema").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[Any]) -> list[Migration]:
    """Apply the migrations the store lacks; returns those applied (empty: it was current).

    ``conn`` must be in autocommit mode (each migration is its own transaction).

    Raises:
        StoreError: the store's schema is newer than this mcpvisor knows.
        psycopg.Error: the store failed (the caller turns it into `StoreUnreachable`).
    """
    conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
    try:
        conn.execute(_VERSIONS)
        version = current_version(conn)
        if version > LATEST:
            raise StoreError(f"the store's schema is version {version}, newer than this mcpvisor "
                             f"knows ({LATEST}); upgrade mcpvisor")
        applied = []
        for migration in MIGRATIONS:
            if migration.version <= version:
                continue
            with conn.transaction():
                conn.execute(migration.sql.encode())
                conn.execute("INSERT INTO mcpvisor_schema (version, description) VALUES (%s, %s)",
                             (migration.version, migration.description))
            applied.append(migration)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
