"""The state directory: user-built toolsets, the equipped toolset and per-tool annotations.

Owns:

* Where the state lives is `mcpvisor.settings.state_dir`.
* The JSON form in ``state.json`` of the records in `mcpvisor.actors.core.model`
  (:class:`SavedState`, :class:`Toolset`, :class:`ToolEntry`, :class:`PinnedSchema`,
  :class:`Note`).
* :class:`StateStore` — reads and transactional updates of ``state.json``: every update
  is a read-modify-write under the file lock with an atomic write, so two proxies sharing a
  state directory never lose each other's changes and never leave a half-written file.
* :func:`now_iso` — the one wall-clock read here, for the timestamps users see.

Toolsets declared in the config file are read-only and never stored here. A
``state.json`` that cannot be read is an error, never silently reset; keys this version
does not know (written by a newer one) are kept on every write.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor._atomic import (
    DEFAULT_LOCK_TIMEOUT_S,
    JSONFileError,
    atomic_write_text,
    dump_json,
    locked,
    parse_json,
    to_plain,
)
from mcpvisor.actors.core.model import Note, PinnedSchema, SavedState, ToolEntry, Toolset

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "CorruptState",
    "StateError",
    "StateStore",
    "ToolsetExists",
    "UnknownToolset",
    "now_iso",
]

STATE_FILE: Final = "state.json"

STATE_VERSION: Final = 1
"""The ``version`` this code writes into a new ``state.json``. A file with a higher
version (a newer mcpvisor) is read as far as we understand it and keeps its number."""


class StateError(Exception):
    """Base class of the state directory's errors."""


class CorruptState(StateError):
    """``state.json`` cannot be read; it was left exactly as it is.

    Attributes:
        path: The file.
        problem: What is wrong, and where in the document.
    """

    def __init__(self, path: Path, problem: str) -> None:
        head = problem if problem.startswith(str(path)) else f"{path}: {problem}"
        super().__init__(f"{head} (the file was left as it is; fix it or move it away)")
        self.path = path
        self.problem = problem


class ToolsetExists(StateError):
    """A toolset of this name is already saved. Attribute: ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a toolset named {name!r} already exists")
        self.name = name


class UnknownToolset(StateError):
    """No toolset of this name is saved. Attributes: ``name``, ``known`` (sorted)."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        saved = ", ".join(known) if known else "none"
        super().__init__(f"no saved toolset named {name!r}; saved toolsets: {saved}")
        self.name = name
        self.known = list(known)


def now_iso() -> str:
    """The current UTC time as ``2026-11-22T10:00:00Z`` (seconds precision).

    The only wall-clock read in this module: these timestamps are for people, never for
    timing (which comes from trio's clock).
    """
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StateStore:
    """``state.json`` in one state directory, read whole and updated as a transaction.

    Args:
        directory: The state directory; created by the first write.
        lock_timeout: Seconds to wait for another process updating the same directory.
    """

    def __init__(self, directory: Path, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE
        self._lock_timeout = lock_timeout

    def load(self) -> SavedState:
        """The state as it is now; an empty state when there is no ``state.json``.

        Takes no lock: writes are atomic, so a reader always sees a whole file.

        Raises:
            CorruptState: The file is not valid JSON or not shaped like a state; the
                message names the file and the problem, and the file is left alone.
        """
        raw, _ = self._read()
        return _decode_state(raw, self.path)

    def update(self, fn: Callable[[SavedState], SavedState]) -> SavedState:
        """Apply ``fn`` to the current state and save what it returns.

        Read, ``fn`` and write all happen under the directory's file lock, so concurrent
        updates from other processes are serialized and none is lost. The write is atomic
        and keeps keys of ``state.json`` this version does not know. If ``fn`` raises, or
        the state it returns cannot be written, the file is untouched. A result identical
        to the file is not rewritten.

        Args:
            fn: Maps the current state to the new one; it must not block for long (the
                lock is held while it runs).

        Returns:
            The state ``fn`` returned, as now saved.

        Raises:
            CorruptState: The current file cannot be read; ``fn`` was not called.
            LockTimeout: Another process held the lock too long; nothing was read.
            StateError: The new state holds a read-only toolset or a mislabelled one.
        """
        with locked(self.path, self._lock_timeout):
            raw, text = self._read()
            new = fn(_decode_state(raw, self.path))
            if not isinstance(new, SavedState):
                raise TypeError(f"update function returned {type(new).__name__}, not SavedState")
            out = dump_json(_encode_state(new, raw))
            if out != text:
                atomic_write_text(self.path, out)
        return new

    def save_toolset(self, toolset: Toolset, *, replace: bool = False) -> SavedState:
        """Save ``toolset`` (after the others; a replaced one keeps its place and ``created_at``).

        Raises:
            ToolsetExists: One of that name is saved and ``replace`` is false.
            StateError: ``toolset.read_only``: config-file toolsets are not stored here.
        """
        if toolset.read_only:
            raise StateError(f"toolset {toolset.name!r} is declared in the config file and is read-only")

        def change(state: SavedState) -> SavedState:
            existing = state.toolsets.get(toolset.name)
            if existing is not None and not replace:
                raise ToolsetExists(toolset.name)
            saved = (toolset if existing is None
                     else msgspec.structs.replace(toolset, created_at=existing.created_at))
            return msgspec.structs.replace(state, toolsets={**state.toolsets, toolset.name: saved})

        return self.update(change)

    def delete_toolset(self, name: str) -> SavedState:
        """Delete toolset ``name``, unequip it if it was equipped, and drop its annotations.

        Raises:
            UnknownToolset: No saved toolset has that name (the error lists those that do).
        """

        def change(state: SavedState) -> SavedState:
            if name not in state.toolsets:
                raise UnknownToolset(name, sorted(state.toolsets))
            return SavedState(
                equipped=None if state.equipped == name else state.equipped,
                toolsets={key: ts for key, ts in state.toolsets.items() if key != name},
                annotations={key: notes for key, notes in state.annotations.items() if key != name},
            )

        return self.update(change)

    def set_equipped(self, name: str | None) -> SavedState:
        """Record ``name`` as the equipped toolset (None: nothing equipped).

        The name is not checked against the saved toolsets: it may be declared in the config.
        """
        return self.update(lambda state: msgspec.structs.replace(state, equipped=name))

    def add_notes(self, toolset: str, namespaced_name: str, notes: Sequence[Note]) -> SavedState:
        """Annotate ``namespaced_name`` in ``toolset``: a note whose name exists replaces it
        in place, a new one is appended."""

        def change(state: SavedState) -> SavedState:
            per_toolset = dict(state.annotations.get(toolset, {}))
            merged = list(per_toolset.get(namespaced_name, ()))
            for note in notes:
                index = next((i for i, old in enumerate(merged) if old.name == note.name), None)
                if index is None:
                    merged.append(note)
                else:
                    merged[index] = note
            per_toolset[namespaced_name] = tuple(merged)
            return msgspec.structs.replace(state, annotations={**state.annotations, toolset: per_toolset})

        return self.update(change)

    def _read(self) -> tuple[dict[str, Any], str | None]:
        """The raw document and the file's text (``{}``, None when there is no file)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, None
        except UnicodeDecodeError as exc:
            raise CorruptState(self.path, f"not UTF-8 text (byte {exc.start})") from exc
        try:
            return parse_json(text, self.path), text
        except JSONFileError as exc:
            raise CorruptState(self.path, str(exc)) from exc


# --- JSON form -----------------------------------------------------------------------


class _Shape(Exception):
    """A part of the document has the wrong shape; ``args`` = (where, expected)."""


def _get(obj: Mapping[str, Any], key: str, where: str, kinds: tuple[type, ...], *, required: bool) -> Any:
    """``obj[key]`` checked against ``kinds`` (None allowed when not required)."""
    if key not in obj:
        if required:
            raise _Shape(f"{where}.{key}", "is missing")
        return None
    value = obj[key]
    if value is None and not required:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_KIND_NAMES[k] for k in kinds)
        raise _Shape(f"{where}.{key}", f"must be {names}" + ("" if required else " or null"))
    return value


_KIND_NAMES: Final[Mapping[type, str]] = {
    str: "a string",
    dict: "an object",
    list: "an array",
    int: "an integer",
}


def _decode_state(doc: dict[str, Any], path: Path) -> SavedState:
    """The :class:`SavedState` in a parsed ``state.json``, or CorruptState saying what is wrong."""
    try:
        version = _get(doc, "version", "state", (int,), required=False)
        if version is not None and version < 1:
            raise _Shape("state.version", "must be 1 or more")
        equipped = _get(doc, "equipped", "state", (str,), required=False)
        toolsets = {
            name: _decode_toolset(name, raw, f"toolsets.{name}")
            for name, raw in (_get(doc, "toolsets", "state", (dict,), required=False) or {}).items()
        }
        annotations = {
            toolset: _decode_annotations(per_tool, f"annotations.{toolset}")
            for toolset, per_tool in (
                _get(doc, "annotations", "state", (dict,), required=False) or {}
            ).items()
        }
    except _Shape as exc:
        where, problem = exc.args
        raise CorruptState(path, f"{where.removeprefix('state.')} {problem}") from None
    return SavedState(equipped=equipped, toolsets=toolsets, annotations=annotations)


def _object(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a JSON object."""
    if not isinstance(value, dict):
        raise _Shape(where, "must be an object")
    return value


def _decode_toolset(name: str, raw: Any, where: str) -> Toolset:
    """One saved toolset."""
    obj = _object(raw, where)
    tools = []
    for i, item in enumerate(_get(obj, "tools", where, (list,), required=True)):
        entry = _object(item, f"{where}.tools[{i}]")
        tools.append(_decode_tool(entry, f"{where}.tools[{i}]"))
    return Toolset(
        name=name,
        tools=tuple(tools),
        description=_get(obj, "description", where, (str,), required=False),
        created_at=_get(obj, "createdAt", where, (str,), required=True),
        updated_at=_get(obj, "updatedAt", where, (str,), required=True),
    )


def _decode_tool(obj: dict[str, Any], where: str) -> ToolEntry:
    """One tool of a toolset."""
    pinned = _get(obj, "pinned", where, (dict,), required=False)
    return ToolEntry(
        namespaced_name=_get(obj, "namespacedName", where, (str,), required=True),
        ref_id=_get(obj, "refId", where, (str,), required=False),
        alias=_get(obj, "alias", where, (str,), required=False),
        pinned=None
        if pinned is None
        else PinnedSchema(
            description=_get(pinned, "description", f"{where}.pinned", (str,), required=False),
            input_schema=_get(pinned, "inputSchema", f"{where}.pinned", (dict,), required=True),
            output_schema=_get(pinned, "outputSchema", f"{where}.pinned", (dict,), required=False),
        ),
    )


def _decode_annotations(raw: Any, where: str) -> dict[str, tuple[Note, ...]]:
    """One toolset's annotations: namespaced name -> notes."""
    result = {}
    for tool, notes in _object(raw, where).items():
        if not isinstance(notes, list):
            raise _Shape(f"{where}.{tool}", "must be an array")
        decoded = []
        for i, item in enumerate(notes):
            note = _object(item, f"{where}.{tool}[{i}]")
            decoded.append(
                Note(
                    name=_get(note, "name", f"{where}.{tool}[{i}]", (str,), required=True),
                    note=_get(note, "note", f"{where}.{tool}[{i}]", (str,), required=True),
                )
            )
        result[tool] = tuple(decoded)
    return result


def _dict_or_empty(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (for merging over old JSON)."""
    return value if isinstance(value, dict) else {}


def _merge(raw: Any, known: dict[str, Any]) -> dict[str, Any]:
    """``known`` written over ``raw``: unknown keys of ``raw`` stay, and where they were."""
    out = dict(_dict_or_empty(raw))
    out.update(known)
    return out


def _claim(raw_items: list[Any], key: str, value: str) -> dict[str, Any] | None:
    """Remove and return the first object in ``raw_items`` whose ``key`` is ``value``."""
    for i, item in enumerate(raw_items):
        if isinstance(item, dict) and item.get(key) == value:
            found: dict[str, Any] = raw_items.pop(i)
            return found
    return None


def _encode_state(state: SavedState, raw: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of ``state``, keeping what ``raw`` (the file's document) holds that we do not know."""
    if state.equipped is not None and not isinstance(state.equipped, str):
        raise StateError(f"equipped must be a toolset name or None, not {state.equipped!r}")
    version = raw.get("version")
    raw_toolsets = _dict_or_empty(raw.get("toolsets"))
    toolsets = {}
    for key, toolset in state.toolsets.items():
        if toolset.read_only:
            raise StateError(f"toolset {key!r} is declared in the config file and is read-only")
        if key != toolset.name:
            raise StateError(f"toolset {toolset.name!r} is stored under the name {key!r}")
        toolsets[key] = _encode_toolset(toolset, raw_toolsets.get(key))
    raw_annotations = _dict_or_empty(raw.get("annotations"))
    annotations = {}
    for toolset_name, per_tool in state.annotations.items():
        raw_per_tool = _dict_or_empty(raw_annotations.get(toolset_name))
        annotations[toolset_name] = {
            tool: _encode_notes(notes, raw_per_tool.get(tool)) for tool, notes in per_tool.items()
        }
    return _merge(
        raw,
        {
            "version": version if isinstance(version, int) and version >= STATE_VERSION else STATE_VERSION,
            "equipped": state.equipped,
            "toolsets": toolsets,
            "annotations": annotations,
        },
    )


def _encode_toolset(toolset: Toolset, raw: Any) -> dict[str, Any]:
    """One toolset, over its previous JSON form ``raw``."""
    old_tools = _dict_or_empty(raw).get("tools")
    raw_tools = list(old_tools) if isinstance(old_tools, list) else []
    tools = []
    for tool in toolset.tools:
        raw_tool = _claim(raw_tools, "namespacedName", tool.namespaced_name)
        pinned: dict[str, Any] | None = None
        if tool.pinned is not None:
            pinned = _merge(
                raw_tool.get("pinned") if raw_tool is not None else None,
                {
                    "description": tool.pinned.description,
                    "inputSchema": to_plain(tool.pinned.input_schema),
                    "outputSchema": to_plain(tool.pinned.output_schema),
                },
            )
        tools.append(
            _merge(
                raw_tool,
                {
                    "namespacedName": tool.namespaced_name,
                    "refId": tool.ref_id,
                    "alias": tool.alias,
                    "pinned": pinned,
                },
            )
        )
    return _merge(
        raw,
        {
            "description": toolset.description,
            "createdAt": toolset.created_at,
            "updatedAt": toolset.updated_at,
            "tools": tools,
        },
    )


def _encode_notes(notes: Sequence[Note], raw: Any) -> list[dict[str, Any]]:
    """One tool's notes, over their previous JSON form ``raw``."""
    raw_notes = list(raw) if isinstance(raw, list) else []
    return [
        _merge(_claim(raw_notes, "name", note.name), {"name": note.name, "note": note.note}) for note in notes
    ]
