"""Edits of the config file on behalf of the CLI (``mcpvisor mcp add/remove/enable/disable``,
``mcpvisor import``).

Owns :class:`ConfigStore`: a transaction over the JSON config file (a superset of Claude
Code's ``.mcp.json``) and the few edits the CLI makes through it, with the errors they raise.

The file belongs to the user. Every edit reads the file fresh under the file lock, changes
only what it was asked to, and writes atomically (see :mod:`mcpvisor._atomic`), so two
commands run at once both land; the lock file (``<file>.lock``) is deleted when the edit
ends, and a temporary file a killed edit left is deleted by the next one, so nothing but
the file itself is left in the user's folder. Everything mcpvisor does not own is kept as it was: other
top-level keys, other servers' entries (same key order), unknown keys inside entries, and
the file's indentation. An edit that changes nothing writes nothing, so the file keeps its
exact bytes; an edit that would make the config invalid writes nothing either.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor._atomic import (
    DEFAULT_LOCK_TIMEOUT_S,
    JSONFileError,
    atomic_write_text,
    dump_json,
    locked,
    parse_json,
    to_plain,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = [
    "ConfigStore",
    "DuplicateServer",
    "InvalidConfig",
    "MalformedConfig",
    "StoreError",
    "UnknownServer",
]

SERVERS_KEY: Final = "mcpServers"
"""Where servers live, as in Claude Code's ``.mcp.json``."""

ENABLED_KEY: Final = "enabled"
"""mcpvisor's own switch; absent means enabled."""

FOREIGN_DISABLED_KEY: Final = "disabled"
"""The switch other clients (Cline, Roo) write; dropped when we set ours so the two never disagree."""

MAX_SUGGESTIONS: Final = 3
"""Close matches offered for an unknown server name (difflib's default count)."""

SUGGESTION_CUTOFF: Final = 0.6
"""difflib's default similarity cutoff for close matches."""

_INDENT_RE: Final = re.compile(r"^([ \t]+)\S", re.MULTILINE)


class StoreError(Exception):
    """Base class of the config store's errors."""


class MalformedConfig(StoreError):
    """The config file cannot be edited: it is not JSON, or a part we edit has the wrong shape.

    The file is left as it is. Attributes: ``path``.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(problem if problem.startswith(str(path)) else f"{path}: {problem}")
        self.path = path


class DuplicateServer(StoreError):
    """A server with this name is already configured (pass ``force=True`` to replace it)."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(f"server {name!r} already exists in {path}; use --force to replace it")
        self.name = name
        self.path = path


class UnknownServer(StoreError):
    """No server of this name is configured.

    Attributes:
        name: The name asked for.
        known: Every configured server name, in file order.
        suggestions: The closest known names, best first.
    """

    def __init__(self, name: str, known: Sequence[str], suggestions: Sequence[str], path: Path) -> None:
        if suggestions:
            hint = "did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
        elif known:
            hint = "configured: " + ", ".join(known)
        else:
            hint = "no servers are configured"
        super().__init__(f"no server named {name!r} in {path}; {hint}")
        self.name = name
        self.known = list(known)
        self.suggestions = list(suggestions)
        self.path = path


class InvalidConfig(StoreError):
    """The edit would make the config invalid; nothing was written.

    The validator's exception is ``__cause__`` and :attr:`error`.
    """

    def __init__(self, path: Path, error: Exception) -> None:
        super().__init__(f"{path}: not saved, the change would make the config invalid: {error}")
        self.path = path
        self.error = error


class ConfigStore:
    """The config file as a sequence of locked, atomic edits.

    Args:
        path: The config file. It need not exist; the first edit that changes something
            creates it (and its directory).
        validate: ``validate(doc, path)`` raises on an invalid document. It runs on every
            document about to be written; default: no validation.
        lock_timeout: Seconds to wait for another process editing the same file.
    """

    def __init__(
        self,
        path: Path,
        *,
        validate: Callable[[dict[str, Any], Path], None] | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self._validate = validate
        self._lock_timeout = lock_timeout

    def read(self) -> dict[str, Any]:
        """The document as it is now; ``{}`` when the file does not exist.

        Takes no lock: writes are atomic, so a reader always sees a whole file.

        Raises:
            MalformedConfig: The file is not a JSON object.
        """
        doc, _ = self._load()
        return doc

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        """Lock the file, yield its current document for changing in place, then save it.

        The document is read inside the lock, so it includes every edit that finished
        before. On normal exit, if the document changed, it is validated and written
        atomically in the file's own indentation; if it did not change, nothing is written
        and the file keeps its bytes. If the block raises, nothing is written.

        Raises:
            LockTimeout: Another process held the lock too long; nothing was read or written.
            MalformedConfig: The file is not a JSON object; it is left as it is.
            InvalidConfig: The validator rejected the changed document; nothing was written.
        """
        with locked(self.path, self._lock_timeout, remove=True):
            doc, text = self._load()
            before = dump_json(doc)
            yield doc
            after = dump_json(doc)
            if after == before:
                return
            if self._validate is not None:
                try:  # a copy: whatever the validator does, we write what the edit made
                    self._validate(copy.deepcopy(doc), self.path)
                except Exception as exc:
                    raise InvalidConfig(self.path, exc) from exc
            indent = _detect_indent(text) if text is not None else None
            atomic_write_text(self.path, after if indent in (None, 2) else dump_json(doc, indent=indent))

    def add_server(self, name: str, entry: Mapping[str, Any], *, force: bool = False) -> None:
        """Add server ``name`` at the end of ``mcpServers`` (creating it if needed).

        With ``force``, an existing server of that name is replaced where it stands.

        Raises:
            DuplicateServer: ``name`` exists and ``force`` is false; nothing was written.
            InvalidConfig, MalformedConfig, LockTimeout: as for :meth:`edit`.
        """
        value = to_plain(entry)
        with self.edit() as doc:
            servers = self._servers(doc, create=True)
            if name in servers and not force:
                raise DuplicateServer(name, self.path)
            servers[name] = value

    def remove_server(self, name: str) -> dict[str, Any]:
        """Remove server ``name`` and return its entry as it was in the file.

        Raises:
            UnknownServer: No such server (with the known names and close matches).
            InvalidConfig, MalformedConfig, LockTimeout: as for :meth:`edit`.
        """
        with self.edit() as doc:
            servers = self._servers(doc)
            if name not in servers:
                raise self._unknown(name, servers)
            removed: dict[str, Any] = servers.pop(name)
        return removed

    def set_enabled(self, name: str, enabled: bool) -> bool:
        """Enable or disable server ``name``; return whether the file changed.

        Disabling writes ``"enabled": false``; enabling removes that key (an explicit
        ``"enabled": true`` is left alone). Either way a ``"disabled"`` key written by
        another client is dropped, so the entry never says two things.

        Raises:
            UnknownServer: No such server.
            MalformedConfig: The server's entry is not an object.
            InvalidConfig, LockTimeout: as for :meth:`edit`.
        """
        with self.edit() as doc:
            servers = self._servers(doc)
            if name not in servers:
                raise self._unknown(name, servers)
            entry = servers[name]
            if not isinstance(entry, dict):
                raise MalformedConfig(self.path, f"{SERVERS_KEY}.{name}: expected an object")
            before = copy.deepcopy(entry)
            entry.pop(FOREIGN_DISABLED_KEY, None)
            if enabled:
                if entry.get(ENABLED_KEY, True) is not True:
                    del entry[ENABLED_KEY]
            else:
                entry[ENABLED_KEY] = False
            changed = dump_json(entry) != dump_json(before)
        return changed

    def server_names(self) -> list[str]:
        """The configured server names, in file order (no lock; see :meth:`read`)."""
        return list(self._servers(self.read()))

    def _load(self) -> tuple[dict[str, Any], str | None]:
        """The document and the file's text (None when missing)."""
        try:
            text = self.path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            return {}, None
        except UnicodeDecodeError as exc:
            raise MalformedConfig(self.path, f"not UTF-8 text (byte {exc.start})") from exc
        try:
            return parse_json(text, self.path), text
        except JSONFileError as exc:
            raise MalformedConfig(self.path, str(exc)) from exc

    def _servers(self, doc: dict[str, Any], *, create: bool = False) -> dict[str, Any]:
        """The ``mcpServers`` object of ``doc`` (added at the end when ``create``)."""
        servers = doc.setdefault(SERVERS_KEY, {}) if create else doc.get(SERVERS_KEY, {})
        if not isinstance(servers, dict):
            raise MalformedConfig(self.path, f'"{SERVERS_KEY}" must be an object')
        return servers

    def _unknown(self, name: str, servers: Mapping[str, Any]) -> UnknownServer:
        """The UnknownServer error for ``name``, with the closest configured names."""
        known = list(servers)
        close = difflib.get_close_matches(name, known, n=MAX_SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
        return UnknownServer(name, known, close, self.path)


def _detect_indent(text: str) -> int | str | None:
    """The indent unit of a pretty-printed JSON text, or None for a one-line file."""
    match = _INDENT_RE.search(text)
    if match is None:
        return None
    unit = match.group(1)
    if unit.strip(" ") == "":
        return len(unit)
    return unit
