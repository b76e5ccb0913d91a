"""The remembered catalog: each server's last seen lists, kept in the state directory.

Owns:

* `catalog_fingerprint`: what must not have changed for a server's remembered lists to
  be used (transport, command, args, env, cwd, url, headers, image, docker args,
  protocol). Only its hash is stored: env and header values never reach the file.
* `Remembered`: one server's entry (its lists as the server sent them, the protocol era
  it answered in, when they were seen). A 2026-07-28 server's caching directives count:
  a list it marks ``cacheScope: private`` (it may hold what only the proxy's own
  authorization may see) is not written to this file, which every later proxy on the
  state directory serves to every client, and its ``ttlMs`` says until when the entry
  may be listed from memory (`Remembered.listable`).
* `CatalogFile` (``catalog.json`` in the state directory): `CatalogFile.load` at start,
  `CatalogFile.remember` after a server listed. Every write is a read-modify-write of
  that server's entry alone, under the file's lock, with an atomic replace: two proxies
  sharing a state directory keep each other's entries and never leave a torn file.
* `CatalogWriter`: the task that writes what servers list, off the actors' paths (a
  server's lists are handed over without waiting; the newest per server is written, in
  a worker thread, and only when it differs from what the file has).

The file is a cache: one that cannot be read is logged and replaced by the next write,
and a proxy without it starts exactly as it would the first time.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec
import trio

from mcpvisor._atomic import (
    DEFAULT_LOCK_TIMEOUT_S,
    JSONFileError,
    atomic_write_text,
    dump_json,
    locked,
    read_json,
)
from mcpvisor.actors.core.catalog import CacheHint, UpstreamLists
from mcpvisor.state import now_iso

_ISO: Final = "%Y-%m-%dT%H:%M:%SZ"

if TYPE_CHECKING:
    from mcpvisor.config import ServerSpec

logger = logging.getLogger(__name__)

CATALOG_FILE: Final = "catalog.json"

CATALOG_VERSION: Final = 1
"""The ``version`` this code writes; a file of another version is not read (it is a cache)."""

_FINGERPRINTED: Final = ("transport", "command", "args", "env", "cwd", "url", "headers", "image",
                         "docker_args", "protocol")
"""The `ServerSpec` fields that decide what a server is: change one and its lists are
not listed from memory (a filter such as ``hiddenTools`` applies on top of the lists and
does not count)."""

_KINDS: Final = ("tools", "resources", "templates", "prompts")

FLUSH_S: Final = 2.0
"""Bound on writing what is still pending when the proxy stops (docs/style.md rule 16: a shielded
wait is bounded); each write is one small file under its lock, milliseconds."""


def catalog_fingerprint(spec: ServerSpec) -> str:
    """A 16-hex-digit hash of what the server is (`_FINGERPRINTED`); values are not kept."""
    payload = {name: _plain(getattr(spec, name, None)) for name in _FINGERPRINTED}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


class Remembered(msgspec.Struct, frozen=True):
    """One server's last seen lists."""

    fingerprint: str
    seen: str
    """When they were listed (UTC, ``2026-11-22T10:00:00Z``): what ``status`` shows."""
    era: str | None
    """The protocol era the server answered in (``legacy`` or a 2026-07-28-era version)."""
    lists: UpstreamLists
    withheld: tuple[str, ...] = ()
    """The kinds the server marked ``cacheScope: private``: not written (empty here)."""
    fresh_until: str | None = None
    """When the shortest ``ttlMs`` of the lists runs out (UTC, as ``seen``); None when the
    server sent none (a handshake-era server: its lists are remembered as always)."""

    def listable(self, now: datetime | None = None) -> bool:
        """Whether a start may list these lists from memory: all of them were written
        (none private) and none is past its ttl. The era is used either way."""
        if self.withheld:
            return False
        if self.fresh_until is None:
            return True
        try:
            until = datetime.strptime(self.fresh_until, _ISO).replace(tzinfo=UTC)
        except ValueError:
            return False
        return (now or datetime.now(UTC)) < until

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fingerprint": self.fingerprint, "seen": self.seen, "era": self.era}
        for kind in _KINDS:
            out[kind] = [dict(item) for item in getattr(self.lists, kind)]
        if self.withheld:
            out["withheld"] = list(self.withheld)
        if self.fresh_until is not None:
            out["freshUntil"] = self.fresh_until
        return out

    @classmethod
    def of(cls, fingerprint: str, era: str | None, lists: UpstreamLists,
           hints: Mapping[str, CacheHint] | None = None, now: datetime | None = None) -> Remembered:
        """The entry for lists seen ``now``, each list under the server's caching directives
        (``hints`` by kind): a private list is withheld, the shortest ttl bounds the entry."""
        now = now or datetime.now(UTC)
        withheld = tuple(kind for kind in _KINDS if hints and kind in hints and hints[kind].private)
        for kind in withheld:
            lists = lists.replace(kind, ())
        ttls = [hint.ttl_ms for hint in (hints or {}).values()]
        fresh_until = (now + timedelta(milliseconds=min(ttls))).strftime(_ISO) if ttls else None
        return cls(fingerprint, now.strftime(_ISO), era, lists, withheld, fresh_until)

    @classmethod
    def from_json(cls, raw: Any) -> Remembered | None:
        """The entry, or None when it is not shaped like one (a cache entry is skipped, not fixed)."""
        if not isinstance(raw, dict):
            return None
        fingerprint, seen, era = raw.get("fingerprint"), raw.get("seen"), raw.get("era")
        if not isinstance(fingerprint, str) or not isinstance(seen, str) or not isinstance(era, str | None):
            return None
        lists = UpstreamLists()
        for kind in _KINDS:
            items = raw.get(kind, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                return None
            lists = lists.replace(kind, items)
        withheld, fresh_until = raw.get("withheld", []), raw.get("freshUntil")
        if not isinstance(withheld, list) or not all(k in _KINDS for k in withheld):
            return None
        if not isinstance(fresh_until, str | None):
            return None
        return cls(fingerprint, seen, era, lists, tuple(withheld), fresh_until)


class CatalogFile:
    """``catalog.json`` in one state directory. Blocking file I/O: call it from a worker thread."""

    def __init__(self, directory: Path, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> None:
        self.path = Path(directory) / CATALOG_FILE
        self._lock_timeout = lock_timeout

    def load(self) -> dict[str, Remembered]:
        """Every server's entry, by name; empty when the file is missing or unreadable
        (logged: the file is only a cache)."""
        servers = self._servers(self._read())
        out: dict[str, Remembered] = {}
        for name, raw in servers.items():
            entry = Remembered.from_json(raw)
            if entry is not None:
                out[name] = entry
        return out

    def remember(self, server: str, entry: Remembered) -> bool:
        """Store ``entry`` as ``server``'s, leaving every other entry as it is.

        Returns False when the file already held exactly these lists, era and
        fingerprint (nothing written: a restart that lists the same tools costs no write).

        Raises:
            OSError: the directory cannot be written (the file is unchanged).
            supervisor._atomic.LockTimeout: another process held the lock too long.
        """
        with locked(self.path, self._lock_timeout):
            doc = self._read()
            servers = self._servers(doc)
            old = Remembered.from_json(servers.get(server))
            if old is not None and (old.fingerprint, old.era, old.lists, old.withheld, old.fresh_until) == (
                    entry.fingerprint, entry.era, entry.lists, entry.withheld, entry.fresh_until):
                return False
            servers[server] = entry.to_json()
            atomic_write_text(self.path, dump_json({"version": CATALOG_VERSION, "servers": servers}))
        return True

    def _read(self) -> dict[str, Any]:
        try:
            doc = read_json(self.path)
        except (JSONFileError, OSError) as exc:
            logger.warning("remembered catalog %s cannot be read (%s); it will be rewritten", self.path, exc)
            return {}
        if doc is None or doc.get("version") != CATALOG_VERSION:
            return {}
        return doc

    @staticmethod
    def _servers(doc: dict[str, Any]) -> dict[str, Any]:
        servers = doc.get("servers")
        return dict(servers) if isinstance(servers, dict) else {}


class _Seen(msgspec.Struct, frozen=True):
    server: str
    fingerprint: str
    lists: UpstreamLists
    era: str | None
    hints: Mapping[str, CacheHint] | None


class CatalogStore(Protocol):
    """Where remembered lists are kept: `CatalogFile`, or the replicas' shared store
    (`mcpvisor.pgstore.data.PgCatalog`). Blocking: called from worker threads."""

    path: Any

    def load(self) -> dict[str, Remembered]: ...

    def remember(self, server: str, entry: Remembered) -> bool: ...


class CatalogWriter:
    """Writes each server's newest lists to the catalog file, one at a time, off the actors.

    `seen` never waits (an upstream calls it after listing); `run` is the writer task.
    """

    def __init__(self, file: CatalogStore) -> None:
        self.file = file
        self._pending: dict[str, _Seen] = {}
        self._wake = trio.Event()
        self._idle = trio.Event()
        self._idle.set()
        self.writes = 0
        """Entries written (those unchanged from the file are not)."""

    def seen(self, spec: ServerSpec, lists: UpstreamLists, era: str | None,
             hints: Mapping[str, CacheHint] | None = None) -> None:
        """``spec``'s server listed ``lists`` while speaking ``era``, under the caching
        directives ``hints`` (by kind): remember them (see `Remembered.of`)."""
        self._pending[spec.name] = _Seen(spec.name, catalog_fingerprint(spec), lists, era, hints)
        if self._idle.is_set():
            self._idle = trio.Event()
        self._wake.set()

    async def wait_idle(self) -> None:
        """Wait until everything handed over so far has been written (or failed)."""
        await self._idle.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what is handed over, until cancelled; then what is still pending, within
        `FLUSH_S` (a proxy stopped right after its servers listed still remembers them).
        A failed write is logged, never raised."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await self._drain()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_S):
                await self._drain()

    async def _drain(self) -> None:
        while self._pending:
            server = next(iter(self._pending))
            item = self._pending.pop(server)
            entry = (Remembered.of(item.fingerprint, item.era, item.lists, item.hints) if item.hints
                     else Remembered(item.fingerprint, now_iso(), item.era, item.lists))
            try:
                if await trio.to_thread.run_sync(self.file.remember, server, entry):
                    self.writes += 1
            except Exception as exc:  # a cache: the proxy serves without it
                logger.warning("could not remember %s's lists in %s: %s", server, self.file.path, exc)
        self._idle.set()
