"""The journal's writer: every finished tool call, recorded in an SQLite file.

Owns:

* `CallRecord`: what the call path hands over (raw, unencoded: sizes, digests and the
  outcome are worked out by the writer, never on the call path);
* `Journal`: the bounded channel the call path writes into with `record_nowait` (it
  never waits: a full channel drops the record and counts it), and the one writer
  task that drains it in batches into SQLite (WAL, one transaction per batch) on a
  worker thread (`trio.to_thread`), so the hot path never waits on disk;
* `open_journal`: the async context manager that runs the writer for a block and, on
  the way out (also on cancellation or an exception), writes what is queued, bounded
  by `CLOSE_TIMEOUT_S`, and closes the database.

A crash of the process (SIGKILL) loses at most the batch being gathered: each batch is
one transaction, and SQLite's WAL keeps the file consistent whatever the moment.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Protocol

import msgspec
import trio

from mcpvisor.outcomes import IS_ERROR, OUTCOMES, outcome_of
from mcpvisor.redact import scrub_known

logger = logging.getLogger(__name__)

QUEUE_RECORDS: Final = 65_536
"""Records waiting for the writer at most; beyond that `record_nowait` drops (and counts)
rather than make a call wait. At ~200 bytes each this bounds the queue near 13 MB."""

BATCH_RECORDS: Final = 1_024
"""Records written in one transaction at most (one fsync-free WAL append per batch)."""

ROWS_PER_SLICE: Final = 64
"""Records turned into rows between two checkpoints of the writer task: each slice holds
the event loop (and the GIL) for a few hundred microseconds at most, so a call finishing
meanwhile waits no longer than that (measured: ~4 us per record)."""

BATCH_WINDOW_S: Final = 0.05
"""How long the writer gathers records after the first one before writing the batch: the
most a SIGKILL can lose is this window's records (plus the batch being written)."""

RETRY_FIRST_S: Final = 0.25
RETRY_MAX_S: Final = 2.0
"""Backoff of a batch the PostgreSQL store could not take (it is held, and tried again)."""

CLOSE_TIMEOUT_S: Final = 5.0
"""Bound on writing the queued records when the journal closes (docs/style.md rule 16)."""

DIGEST_BYTES: Final = 16
"""BLAKE2b digest size for arguments and results: 128 bits tells payloads apart."""

SCHEMA_VERSION: Final = 2
"""2: ``trace_id`` (the call's OpenTelemetry trace, when tracing is on); a version 1 file
gains the column when opened, its rows with none."""

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    session TEXT,
    run TEXT,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    arg_bytes INTEGER,
    arg_digest TEXT,
    result_bytes INTEGER,
    result_digest TEXT,
    arguments TEXT,
    result TEXT,
    outcome TEXT NOT NULL,
    error TEXT,
    latency_ms REAL NOT NULL,
    retries INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER,
    list_version INTEGER,
    trace_id TEXT
);
"""
# No index: each would cost every insert a second b-tree update, and the summary reads the
# whole table anyway.

_INSERT: Final = (
    "INSERT INTO calls (time, session, run, server, tool, arg_bytes, arg_digest, result_bytes, "
    "result_digest, arguments, result, outcome, error, latency_ms, retries, restarts, list_version, "
    "trace_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_encoder = msgspec.json.Encoder()


@dataclass(slots=True)
class CallRecord:
    """One finished call as the call path saw it (nothing here is encoded or hashed yet).

    ``arguments`` and ``result`` are the raw JSON bytes (fast path) or the objects
    (the SDK path, the API); ``error`` the exception, or None for a result.
    """

    finished: float
    server: str
    tool: str
    latency: float
    error: BaseException | None = None
    session: str | None = None
    run: str | None = None
    arguments: Any = None
    result: Any = None
    retries: int = 0
    restarts: int | None = None
    list_version: int | None = None
    trace_id: str | None = None
    """The call's OpenTelemetry trace id (32 hex digits), when tracing is on and it was sampled."""


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, msgspec.Raw):
        return bytes(value)
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RuntimeError):  # not JSON, or mutated meanwhile
        return None


def _text(value: Any) -> str | None:
    """A run label: a string, or the raw JSON string the fast path took from ``_meta``."""
    if value is None or isinstance(value, str):
        return value
    try:
        decoded = msgspec.json.decode(bytes(value))
    except (TypeError, msgspec.DecodeError):
        return None
    return decoded if isinstance(decoded, str) else None


def _payload(data: bytes | None) -> str | None:
    """A payload as stored: text, scrubbed of the config's secrets (`mcpvisor.redact`)."""
    return None if data is None else scrub_known(data.decode("utf-8", "replace"))


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def _compact(data: bytes | None) -> bytes | None:
    """The result's JSON without spaces after separators, so ``isError`` is found either way."""
    if data is None or b'"isError"' not in data:
        return data
    return data.replace(b'"isError": true', IS_ERROR)


JOURNAL_MODE: Final = 0o600
"""The journal may hold call payloads: only its owner reads it. SQLite gives its ``-wal``
and ``-shm`` files the database file's mode, so creating that one private is enough."""


def _private(path: Path) -> None:
    """Create ``path`` with `JOURNAL_MODE` (or make an existing journal private) before
    SQLite opens it, so no payload is ever in a file others may read."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, JOURNAL_MODE)
    try:
        os.fchmod(fd, JOURNAL_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, JOURNAL_MODE)


def table_rows(records: Sequence[CallRecord], wall_offset: float, *, payloads: bool) -> list[tuple[Any, ...]]:
    """The ``calls`` rows of ``records`` (in `_INSERT`'s column order): encoded, sized, hashed,
    classified; payloads only when ``payloads``."""
    rows = []
    for r in records:
        args = _as_bytes(r.arguments)
        result = _compact(_as_bytes(r.result))
        rows.append((
            r.finished + wall_offset, r.session, _text(r.run), r.server, r.tool,
            None if args is None else len(args), _digest(args),
            None if result is None else len(result), _digest(result),
            _payload(args) if payloads else None,
            _payload(result) if payloads else None,
            outcome_of(r.error, result),
            None if r.error is None else scrub_known(str(r.error) or type(r.error).__name__),
            r.latency * 1000.0, r.retries, r.restarts, r.list_version, r.trace_id,
        ))
    return rows


class JournalWriter(Protocol):
    """Where the writer task puts its batches: `JournalDB` (SQLite) or the PostgreSQL store's
    table (`mcpvisor.pgstore.journal.PgJournalDB`). Used from one worker thread at a time."""

    path: Any
    errors: tuple[type[BaseException], ...]
    retries: tuple[type[BaseException], ...]

    def rows(self, records: Sequence[CallRecord], wall_offset: float) -> list[tuple[Any, ...]]: ...

    def insert(self, rows: Sequence[tuple[Any, ...]]) -> None: ...

    def close(self) -> None: ...


class JournalDB:
    """The SQLite side: used from one worker thread at a time (never concurrently)."""

    def __init__(self, path: str | os.PathLike[str], *, payloads: bool) -> None:
        self.path = Path(path)
        self.payloads = payloads
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _private(self.path)
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a committed batch survives the process dying (it is in the OS's
        # cache); only an OS crash can lose the last batches, never corrupt the file.
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        self.conn.executescript(SCHEMA)
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(calls)")}
        if "trace_id" not in columns:  # a version 1 journal, appended to
            self.conn.execute("ALTER TABLE calls ADD COLUMN trace_id TEXT")
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    """What a failed `insert` raises."""
    retries: tuple[type[BaseException], ...] = ()
    """The failures after which a batch is held and tried again (a store that comes back)
    rather than dropped: none for a file."""

    def rows(self, records: Sequence[CallRecord], wall_offset: float) -> list[tuple[Any, ...]]:
        """The table rows of ``records``: encoded, sized, hashed, classified."""
        return table_rows(records, wall_offset, payloads=self.payloads)

    def insert(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows`` in one transaction (SQLite releases the GIL while it works)."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(_INSERT, rows)

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True, slots=True)
class JournalStatistics:
    written: int
    dropped: int
    queued: int


class Journal:
    """The call path's handle: `record_nowait` never blocks; `run` is the writer task."""

    Record: ClassVar[type[CallRecord]] = CallRecord
    """What `record_nowait` takes: the call path makes its records through the journal it
    holds, so a proxy without a journal never imports this module (SQLite, hashing)."""

    def __init__(self, path: str | os.PathLike[str], *, payloads: bool = False) -> None:
        self.path = Path(path)
        self.payloads = payloads
        self._send, self._receive = trio.open_memory_channel[CallRecord](QUEUE_RECORDS)
        self.written = 0
        self.dropped = 0
        # Records carry Trio-clock times; one reading of the wall clock turns them into
        # timestamps a reader understands (docs/style.md rule 15: no behaviour depends on it).
        self._wall_offset = time.time() - trio.current_time()
        self._closing = False
        self._outage_dropped: int | None = None
        """`dropped` when a store outage began (None: writing); the log says how many it cost."""
        self._close_requested = trio.Event()
        self._scope = trio.CancelScope(shield=True)
        """The writer's scope: shielded, so records queued before a cancellation are still
        written; `open_journal` bounds it with a deadline once the channel is closed."""

    def record_nowait(self, record: CallRecord) -> None:
        """Queue one record; if the writer is this far behind (or gone), drop it and count it."""
        try:
            self._send.send_nowait(record)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += 1

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(self.written, self.dropped, self._send.statistics().current_buffer_used)

    async def run(self, db: JournalWriter, *,
                  task_status: trio.TaskStatus[Journal] = trio.TASK_STATUS_IGNORED) -> None:
        """Drain the channel in batches until it is closed and empty."""
        task_status.started(self)
        with self._scope:
            await self._loop(db)

    async def _loop(self, db: JournalWriter) -> None:
        receive = self._receive
        while True:
            try:
                first = await receive.receive()
            except trio.EndOfChannel:
                return
            # Gather by sleeping, not by receiving: a task woken per record would cost the
            # call path a task switch per call (measured: +15% on a 0.08 ms call).
            if not self._closing:
                with trio.move_on_after(BATCH_WINDOW_S):
                    await self._close_requested.wait()
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if len(batch) >= BATCH_RECORDS:
                    await self._write(db, batch)
                    batch = []
            if batch:
                await self._write(db, batch)

    async def _write(self, db: JournalWriter, batch: list[CallRecord]) -> None:
        # Rows are built here, a slice at a time between checkpoints: a worker thread doing
        # it would hold the GIL for whole switch intervals (5 ms) while calls wait for it.
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(batch), ROWS_PER_SLICE):
            rows += db.rows(batch[start:start + ROWS_PER_SLICE], self._wall_offset)
            await trio.lowlevel.checkpoint()
        backoff = RETRY_FIRST_S
        while True:
            try:
                await trio.to_thread.run_sync(db.insert, rows, abandon_on_cancel=False)
            except db.errors as exc:
                if not isinstance(exc, db.retries) or self._closing:
                    self.dropped += len(batch)
                    logger.error("journal %s: could not write %d records: %s", db.path, len(batch), exc)
                    return
                if self._outage_dropped is None:  # said once per outage, not per try
                    self._outage_dropped = self.dropped
                    logger.warning("journal %s: could not write (%s); holding %d records and trying again "
                                   "(calls go on; at most %d more wait, the rest are dropped and counted)",
                                   db.path, exc, len(batch), QUEUE_RECORDS)
                # Waits here while the channel fills: the call path never waits on the store.
                try:
                    with trio.move_on_after(backoff):
                        await self._close_requested.wait()
                except trio.Cancelled:  # the close's bound ran out: the held batch is lost
                    self.dropped += len(batch)
                    raise
                backoff = min(backoff * 2, RETRY_MAX_S)
                continue
            break
        self.written += len(batch)
        if self._outage_dropped is not None:
            lost, self._outage_dropped = self.dropped - self._outage_dropped, None
            logger.warning("journal %s: writing again; %d records were dropped meanwhile", db.path, lost)


@asynccontextmanager
async def open_journal(path: str | os.PathLike[str], *, payloads: bool = False,
                       opener: Callable[[], JournalWriter] | None = None) -> AsyncIterator[Journal]:
    """Record calls into ``path`` for the duration of the block.

    The file is created (with its directory) if missing; an existing journal is appended
    to. On exit, also by cancellation or an exception, the queued records are written
    (bounded by `CLOSE_TIMEOUT_S`) and the database closed.

    ``opener``: where the rows go instead of the SQLite file at ``path`` (the PostgreSQL
    store's table: ``path`` is then only what the log names).

    Raises:
        sqlite3.Error, OSError: the file cannot be opened as a journal (before the block).
    """
    journal = Journal(path, payloads=payloads)
    db: JournalWriter = await trio.to_thread.run_sync(
        opener if opener is not None else lambda: JournalDB(path, payloads=payloads))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run, db)
            try:
                yield journal
            finally:
                # The writer drains what is queued and ends at the closed channel; a disk
                # that stalls longer than the bound loses the rest (docs/style.md rule 16).
                journal._send.close()
                journal._closing = True
                journal._close_requested.set()
                journal._scope.deadline = trio.current_time() + CLOSE_TIMEOUT_S
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(db.close)
        journal.dropped += journal._receive.statistics().current_buffer_used  # never written
        if journal.dropped:
            logger.warning("journal %s: %d records dropped", path, journal.dropped)


__all__ = ["CLOSE_TIMEOUT_S", "OUTCOMES", "CallRecord", "Journal", "JournalDB", "open_journal"]
