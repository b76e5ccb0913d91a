"""The management tools: toolsets, configuration mode, server status.

Owns:

* `DEFINITIONS`: the management tools as clients list them (names and arguments
  compatible with HyperTool's, DESIGN.md "Exposure modes");
* `Menu`: their handlers, and the operations the embedding API shares with them
  (`Menu.equip`, `Menu.unequip`, ...). Every answer is readable text plus the same
  data as ``structuredContent``; every failure is an ``isError`` result saying what
  exists instead.

Order of a change (build, equip, unequip, delete, annotate), one at a time under a
FIFO lock so concurrent requests apply in arrival order:

1. validate against what the router holds now (nothing changes on failure);
2. write ``state.json`` (under its file lock, in a worker thread, so the router's
   loop never waits on the disk);
3. only then apply the change inside the router (`Router.ask`), which rebuilds and
   announces it once.

A write that fails leaves both the file and what clients see as they were. Steps 2
and 3 are shielded from cancellation (bounded), so a cancelled caller cannot leave
the file changed and the router not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from actors import wire
from actors.core.catalog import assign_names
from actors.core.model import Note, SavedState, ToolEntry, Toolset
from actors.core.toolsets import (
    ANNOTATE,
    BUILD,
    CONFIG_TOOLS,
    DELETE,
    ENTER_CONFIG,
    EQUIP,
    EXIT_CONFIG,
    EXPOSED,
    GET_ACTIVE,
    LIST_AVAILABLE,
    LIST_SAVED,
    MANAGEMENT_TOOLS,
    MISSING,
    PENDING,
    REFUSED,
    SCHEMA_CHANGED,
    SERVER_STATUS,
    UNEQUIP,
    Catalog,
    ToolsetError,
    ToolsetExposure,
    estimate_tokens,
    full_list,
    one_line,
    pin_of,
)
from actors.router import ExposureCall
from supervisor._atomic import LockTimeout
from supervisor._config_types import NAME_RE, NAME_RULE
from supervisor.state import CorruptState, StateError, StateStore, ToolsetExists, UnknownToolset, now_iso

if TYPE_CHECKING:
    from actors.core.registry import RegistryCore
    from actors.router import Router
    from actors.upstream import Upstream, UpstreamStatus

COMMIT_TIMEOUT_S: Final = 30.0
"""Bound on the router applying a change once the state file has it (shielded from
cancellation, STYLE rule 16): the router applies in microseconds behind at most a
mailbox of upstream events; 30 s means it is gone (shutting down)."""

MAX_TOOLS_PER_TOOLSET: Final = 500
"""More is not a toolset; HyperTool caps at 100, a catalog of 20 servers has ~500."""

MAX_NOTE_CHARS: Final = 2000
"""A note is appended to a description every client reads: keep it a note."""

NAME_HELP: Final = NAME_RULE.split(" (")[0]

_OBJ: Final = {"type": "object"}


def _schema(properties: Mapping[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return out


_TOOL_REF: Final = {
    "type": "object",
    "properties": {
        "namespacedName": {"type": "string", "description": "The tool as server.tool, e.g. 'git.status'."},
        "refId": {"type": "string", "description": "The tool's refId from list-available-tools."},
    },
    "additionalProperties": False,
}

DEFINITIONS: Final[Mapping[str, Mapping[str, Any]]] = {
    d["name"]: d for d in (
        {
            "name": LIST_AVAILABLE,
            "annotations": {"readOnlyHint": True},
            "description": (
                "List every tool the proxy's servers offer, grouped by server, with namespaced names "
                "(server.tool), one-line descriptions, each server's state and each tool's refId. "
                "Use the namespaced names or refIds with build-toolset."),
            "inputSchema": _schema({"server": {"type": "string", "description": "Only this server's tools."}}),
        },
        {
            "name": BUILD,
            "description": (
                "Build and save a toolset: a named set of tools from any servers. Give each tool as "
                "{namespacedName: 'server.tool'} or {refId}, optionally with an alias (the name clients see). "
                "With autoEquip: true it is equipped at once and configuration mode ends. Example: "
                "{name: 'dev', tools: [{namespacedName: 'git.status'}, {namespacedName: 'git.diff'}], "
                "autoEquip: true}."),
            "inputSchema": _schema({
                "name": {"type": "string", "description": f"Toolset name: {NAME_HELP}."},
                "tools": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "properties": {
                        **_TOOL_REF["properties"],
                        "alias": {"type": "string", "description": "Expose the tool under this name "
                                                                   f"({NAME_HELP})."},
                    },
                    "additionalProperties": False,
                }},
                "description": {"type": "string", "description": "What the toolset is for."},
                "autoEquip": {"type": "boolean", "description": "Equip it now (default false)."},
            }, ["name", "tools"]),
        },
        {
            "name": LIST_SAVED,
            "annotations": {"readOnlyHint": True},
            "description": "List the toolsets: those saved at run time and those declared in the config "
                           "file (read-only), with their tools and which one is equipped.",
            "inputSchema": _schema({}),
        },
        {
            "name": EQUIP,
            "description": (
                "Equip a toolset: clients then see exactly its tools (under flattened names, server_tool) "
                "and configuration mode ends. Tools of servers that are not up yet are reported as pending "
                "and appear when their server comes up. With settings.exposure 'all', equipping narrows the "
                "list to the toolset's tools plus these management tools."),
            "inputSchema": _schema({"name": {"type": "string", "description": "The toolset to equip."}},
                                   ["name"]),
        },
        {
            "name": DELETE,
            "description": "Delete a saved toolset (unequipping it if it is equipped). Toolsets declared in "
                           "the config file are read-only.",
            "inputSchema": _schema({"name": {"type": "string", "description": "The toolset to delete."}},
                                   ["name"]),
        },
        {
            "name": UNEQUIP,
            "description": "Unequip the current toolset and return to the menu (with settings.exposure "
                           "'all': back to every tool).",
            "inputSchema": _schema({}),
        },
        {
            "name": GET_ACTIVE,
            "annotations": {"readOnlyHint": True},
            "description": (
                "Show the equipped toolset: each tool's state (exposed, pending on a server that is not up, "
                "missing upstream, schema changed since the toolset was built), the names clients see, "
                "and an estimate of the tokens the listed tools cost a client against listing every tool."),
            "inputSchema": _schema({}),
        },
        {
            "name": ANNOTATE,
            "description": (
                "Add notes to a tool of the equipped toolset; they are appended to the tool's description "
                "from now on and kept across restarts. A note with an existing name replaces it. Example: "
                "{toolRef: {namespacedName: 'git.commit'}, notes: [{name: 'style', note: 'Use imperative "
                "mood'}]}."),
            "inputSchema": _schema({
                "toolRef": _TOOL_REF,
                "notes": {"type": "array", "minItems": 1, "items": _schema(
                    {"name": {"type": "string"}, "note": {"type": "string"}}, ["name", "note"])},
            }, ["toolRef", "notes"]),
        },
        {
            "name": SERVER_STATUS,
            "annotations": {"readOnlyHint": True},
            "description": "Each server's state, uptime, restarts, circuit breaker, last error and tool count.",
            "inputSchema": _schema({}),
        },
        {
            "name": EXIT_CONFIG,
            "description": "Leave configuration mode: the management tools are hidden and the equipped "
                           "toolset's tools are shown (only enter-configuration-mode if none is equipped).",
            "inputSchema": _schema({}),
        },
        {
            "name": ENTER_CONFIG,
            "description": "Enter configuration mode to build, equip or change toolsets; the toolset's tools "
                           "are hidden until you leave it (equipping a toolset leaves it by itself).",
            "inputSchema": _schema({}),
        },
    )
}
assert tuple(DEFINITIONS) == MANAGEMENT_TOOLS


class MenuBackend(Protocol):
    """What the management tools need from the supervisor."""

    router: Router
    upstreams: Mapping[str, Upstream]
    store: StateStore

    def status(self) -> list[UpstreamStatus]: ...


def ok(text: str, data: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult``: readable text plus the same data as ``structuredContent``."""
    return {"content": [{"type": "text", "text": text}], "structuredContent": data}


def failed(error: ToolsetError) -> dict[str, Any]:
    text = error.message
    for key, label in (("toolsets", "Toolsets"), ("didYouMean", "Did you mean"), ("servers", "Servers"),
                       ("tools", "Its tools"), ("rule", "Rule")):
        value = error.data.get(key)
        if isinstance(value, str):
            value = [value]
        if not value or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            continue
        if not all(v in text for v in value):  # say what exists, once
            text += f"\n{label}: {', '.join(value)}"
    return wire.tool_error_result(text, error.as_dict())


def _unknown_toolset(name: str, known: Sequence[str]) -> ToolsetError:
    listed = ", ".join(known) if known else "none yet (build one with build-toolset)"
    return ToolsetError("unknown_toolset", f"No toolset named {name!r}. Toolsets: {listed}.",
                        toolsets=list(known))


def _args(arguments: Mapping[str, Any], allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    extra = [k for k in arguments if k not in allowed]
    if extra:
        raise ToolsetError("invalid_arguments", f"Unknown argument(s) {', '.join(map(repr, extra))}; this tool "
                           f"takes {', '.join(allowed) if allowed else 'no arguments'}.", accepted=list(allowed))
    missing = [k for k in required if k not in arguments]
    if missing:
        raise ToolsetError("invalid_arguments", f"Missing argument(s) {', '.join(map(repr, missing))}.",
                           accepted=list(allowed))


def _string(arguments: Mapping[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise ToolsetError("invalid_arguments", f"{key!r} must be a non-empty string.")
    return value


def _check_name(name: str, what: str = "toolset name") -> None:
    if not NAME_RE.match(name):
        raise ToolsetError("invalid_name", f"Invalid {what} {name!r}: {NAME_HELP}.", rule=NAME_HELP)


class Menu:
    """The management tools' handlers over a supervisor's router and state directory."""

    def __init__(self, backend: MenuBackend) -> None:
        self.backend = backend
        self._lock = trio.Lock()  # FIFO: changes apply in the order they were asked for
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            LIST_AVAILABLE: self._list_available,
            BUILD: self._build,
            LIST_SAVED: self._list_saved,
            EQUIP: self._equip,
            DELETE: self._delete,
            UNEQUIP: self._unequip,
            GET_ACTIVE: self._get_active,
            ANNOTATE: self._annotate,
            SERVER_STATUS: self._server_status,
            EXIT_CONFIG: self._exit_config,
            ENTER_CONFIG: self._enter_config,
        }

    # --- plumbing ----------------------------------------------------------------------
    @property
    def core(self) -> RegistryCore:
        return self.backend.router.core

    @property
    def exposure(self) -> ToolsetExposure:
        exposure = self.core.exposure
        if not isinstance(exposure, ToolsetExposure):
            raise ToolsetError("no_toolsets", "This proxy's exposure does not support toolsets.")
        return exposure

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Run management tool ``name``; always a ``CallToolResult`` (``isError`` on failure)."""
        handler = self._handlers.get(name)
        if handler is None:
            return failed(ToolsetError("unknown_tool", f"{name!r} is not a management tool.",
                                       didYouMean=list(MANAGEMENT_TOOLS)))
        try:
            return await handler(dict(arguments or {}))
        except ToolsetError as exc:
            return failed(exc)

    def server_state(self, server: str) -> tuple[str, str | None]:
        """A server's state and why, for pending reports."""
        up = self.backend.upstreams.get(server)
        if up is None:
            return self.core.states.get(server, ("starting", None))
        reason = up.reason or up.last_error
        if up.retry_at is not None:
            wait = max(0.0, up.retry_at - trio.current_time())
            reason = f"{reason + '; ' if reason else ''}next try in {wait:.0f}s"
        return up.state.value, reason

    async def _load(self) -> SavedState:
        try:
            return await trio.to_thread.run_sync(self.backend.store.load)
        except CorruptState as exc:
            raise ToolsetError("state_unreadable", str(exc), path=str(exc.path)) from None
        except OSError as exc:
            raise ToolsetError("state_unreadable", f"cannot read {self.backend.store.path}: {exc}") from None

    async def _commit(self, change: Callable[[SavedState], SavedState],
                      apply: Callable[[ToolsetExposure, RegistryCore, SavedState], Any]) -> Any:
        """Write the state file, then apply in the router; both or neither."""
        store = self.backend.store
        with trio.CancelScope(shield=True):  # a cancelled caller must not leave the file changed alone
            try:
                # Bounded by the file lock's own timeout (supervisor._atomic.DEFAULT_LOCK_TIMEOUT_S).
                new = await trio.to_thread.run_sync(store.update, change)
            except UnknownToolset as exc:
                raise _unknown_toolset(exc.name, self._known(exc.known)) from None
            except ToolsetExists as exc:
                raise ToolsetError("toolset_exists", f"A toolset named {exc.name!r} already exists; delete it "
                                   "first or choose another name.", toolsets=self._known()) from None
            except (StateError, LockTimeout, OSError) as exc:
                raise ToolsetError("state_not_saved", f"Could not save to {store.path}: {exc}. Nothing "
                                   "changed.") from None
            with trio.move_on_after(COMMIT_TIMEOUT_S):
                return await self.backend.router.ask(ExposureCall(lambda ex, core: apply(ex, core, new)))
        raise ToolsetError("timeout", f"Saved, but the router did not apply the change within "
                           f"{COMMIT_TIMEOUT_S:g}s (is the proxy shutting down?).")

    def _known(self, saved: Sequence[str] | None = None) -> list[str]:
        ex = self.exposure
        names = list(ex.declared)
        for n in saved if saved is not None else ex.saved:
            if n not in names:
                names.append(n)
        return names

    def load_lazy(self) -> None:
        """Start the lazy servers whose tools the equipped toolset names (idempotent)."""
        for s in self.exposure.resolve(self.core):
            if s.state == PENDING and s.server is not None:
                up = self.backend.upstreams.get(s.server)
                if up is not None and up.state.value == "idle":
                    up.load()

    # --- operations (shared with the embedding API) -----------------------------------
    async def equip(self, name: str) -> dict[str, Any]:
        """Equip toolset ``name`` and leave configuration mode; returns the active report.

        Atomic: on any failure (unknown name, a refused schema change, the state file
        cannot be written) nothing changes and nothing is announced.

        Raises:
            ToolsetError: what went wrong, with the toolsets that exist.
        """
        async with self._lock:
            ex = self.exposure
            declared = set(ex.declared)
            state = await self._load()
            toolset = ex.declared.get(name) or state.toolsets.get(name)
            if toolset is None:
                raise _unknown_toolset(name, self._known(list(state.toolsets)))
            statuses = ex.resolve(self.core, toolset)
            refused = [s for s in statuses if s.state == REFUSED]
            if refused:
                lines = [f"{s.namespaced}: {'; '.join(s.changes)}" for s in refused]
                raise ToolsetError("schema_changed", f"Not equipped: settings.pinSchemas is 'refuse' and "
                                   f"{len(refused)} tool(s) changed since {name!r} was built:\n" + "\n".join(lines)
                                   + "\nRebuild the toolset to accept the new schemas.",
                                   changed=[{"namespacedName": s.namespaced, "changes": list(s.changes)}
                                            for s in refused])

            def change(s: SavedState) -> SavedState:
                if name not in declared and name not in s.toolsets:
                    raise UnknownToolset(name, sorted(s.toolsets))
                return dataclasses.replace(s, equipped=name)

            def apply(ex: ToolsetExposure, core: RegistryCore, new: SavedState) -> None:
                ex.sync(new)
                ex.equip(ex.declared.get(name) or new.toolsets[name])

            await self._commit(change, apply)
            report = self.active_report()
        self.load_lazy()
        return report

    async def unequip(self) -> dict[str, Any]:
        """Unequip; in menu exposure that returns to configuration mode.

        Raises:
            ToolsetError: nothing is equipped, or the state file cannot be written.
        """
        async with self._lock:
            ex = self.exposure
            if ex.equipped is None:
                raise ToolsetError("nothing_equipped", "No toolset is equipped.", toolsets=self._known())
            name = ex.equipped.name

            def apply(ex: ToolsetExposure, core: RegistryCore, new: SavedState) -> None:
                ex.sync(new)
                ex.unequip()

            await self._commit(lambda s: dataclasses.replace(s, equipped=None), apply)
            return {"unequipped": name, **self._mode()}

    async def build(self, name: str, tools: Any, *, description: str | None = None,
                    auto_equip: bool = False) -> dict[str, Any]:
        """Build and save a toolset from catalog tools (pinning their schemas).

        Raises:
            ToolsetError: a bad name, an unknown tool (with close matches), a name taken.
        """
        _check_name(name)
        if description is not None and not isinstance(description, str):
            raise ToolsetError("invalid_arguments", "'description' must be a string.")
        async with self._lock:
            ex = self.exposure
            if name in ex.declared:
                raise ToolsetError("read_only", f"{name!r} is declared in the config file (read-only); choose "
                                   "another name.", toolsets=self._known())
            entries, warnings = self._entries(tools)
            now = now_iso()
            toolset = Toolset(name=name, tools=tuple(entries), description=description, created_at=now,
                              updated_at=now)

            def change(s: SavedState) -> SavedState:
                if name in s.toolsets:
                    raise ToolsetExists(name)
                return dataclasses.replace(s, toolsets={**s.toolsets, name: toolset},
                                           equipped=name if auto_equip else s.equipped)

            def apply(ex: ToolsetExposure, core: RegistryCore, new: SavedState) -> None:
                ex.sync(new)
                if auto_equip:
                    ex.equip(new.toolsets[name])

            await self._commit(change, apply)
            out: dict[str, Any] = {"toolset": self._describe(toolset), "equipped": auto_equip,
                                   "warnings": warnings}
            if auto_equip:
                out["active"] = self.active_report()
        if auto_equip:
            self.load_lazy()
        return out

    def _entries(self, tools: Any) -> tuple[list[ToolEntry], list[str]]:
        """The entries of a new toolset, pinned to the catalog's schemas; every problem at once."""
        if not isinstance(tools, list) or not tools:
            raise ToolsetError("invalid_arguments", "'tools' must be a non-empty array of {namespacedName} or "
                               "{refId} objects.")
        if len(tools) > MAX_TOOLS_PER_TOOLSET:
            raise ToolsetError("invalid_arguments", f"A toolset holds at most {MAX_TOOLS_PER_TOOLSET} tools.")
        cat = Catalog.of(self.core)
        problems: list[str] = []
        suggestions: list[str] = []
        warnings: list[str] = []
        entries: list[ToolEntry] = []
        seen: set[tuple[str, str | None]] = set()
        for i, item in enumerate(tools):
            try:
                entry = self._entry(item, cat, warnings, suggestions)
            except ToolsetError as exc:
                problems.append(f"tools[{i}]: {exc.message}")
                continue
            key = (entry.namespaced_name, entry.alias)
            if key in seen:
                problems.append(f"tools[{i}]: {entry.namespaced_name} is listed twice")
                continue
            seen.add(key)
            entries.append(entry)
        if problems:
            raise ToolsetError("unknown_tool" if suggestions or any("unknown tool" in p for p in problems)
                               else "invalid_arguments",
                               "The toolset was not saved:\n" + "\n".join(problems),
                               problems=problems, didYouMean=sorted(set(suggestions)))
        return entries, warnings

    def _entry(self, item: Any, cat: Catalog, warnings: list[str], suggestions: list[str]) -> ToolEntry:
        """One ``{namespacedName | refId, alias?}`` of build-toolset, resolved and pinned."""
        if not isinstance(item, Mapping):
            raise ToolsetError("invalid_arguments", "expected an object such as {namespacedName: 'server.tool'}")
        extra = [k for k in item if k not in ("namespacedName", "refId", "alias")]
        if extra:
            raise ToolsetError("invalid_arguments", f"unknown key(s) {', '.join(extra)} (namespacedName, refId, "
                               "alias)")
        nn, rid, alias = item.get("namespacedName"), item.get("refId"), item.get("alias")
        if (nn is None) == (rid is None) or not isinstance(nn if rid is None else rid, str):
            raise ToolsetError("invalid_arguments", "give exactly one of namespacedName or refId, as a string")
        if alias is not None:
            if not isinstance(alias, str) or not NAME_RE.match(alias):
                raise ToolsetError("invalid_name", f"invalid alias {alias!r}: {NAME_HELP}")
            if alias in MANAGEMENT_TOOLS:
                raise ToolsetError("invalid_name", f"alias {alias!r} is the name of a management tool")
        if rid is not None:
            hit = cat.by_ref.get(rid)
            if hit is None:
                raise ToolsetError("unknown_tool", f"unknown tool: no tool has refId {rid!r} "
                                   "(see list-available-tools)")
            return ToolEntry(namespaced_name=hit.namespaced, ref_id=hit.ref_id, alias=alias, pinned=pin_of(hit.tool))
        hit = cat.by_name.get(nn)
        if hit is not None:
            return ToolEntry(namespaced_name=hit.namespaced, ref_id=hit.ref_id, alias=alias, pinned=pin_of(hit.tool))
        core = self.core
        server, dot, tool = nn.partition(".")
        if not (server and dot and tool):
            raise ToolsetError("invalid_arguments", f"{nn!r} is not a namespaced name (server.tool)")
        if server in core.order and server not in core.lists:
            # Its server is not up (starting, lazy, circuit open): kept unpinned, pending until it is.
            state, reason = self.server_state(server)
            warnings.append(f"{nn}: not checked, server {server} is {state}" + (f" ({reason})" if reason else "")
                            + "; it is pending until the server is up")
            return ToolEntry(namespaced_name=nn, ref_id=None, alias=alias, pinned=None)
        close = cat.close_matches(nn)
        suggestions += close
        known = "" if server in core.order else f" (no server {server!r}; servers: {', '.join(core.order) or 'none'})"
        raise ToolsetError("unknown_tool", f"unknown tool {nn!r}{known}"
                           + (f"; did you mean {', '.join(close)}?" if close else ""))

    async def delete(self, name: str) -> dict[str, Any]:
        """Delete a saved toolset (unequipping it here if it is equipped).

        Raises:
            ToolsetError: unknown or read-only (declared in the config file).
        """
        async with self._lock:
            ex = self.exposure
            if name in ex.declared:
                raise ToolsetError("read_only", f"{name!r} is declared in the config file and is read-only; "
                                   "remove it there.", toolsets=self._known())

            def apply(ex: ToolsetExposure, core: RegistryCore, new: SavedState) -> bool:
                ex.sync(new)
                return ex.drop(name)

            def change(s: SavedState) -> SavedState:
                if name not in s.toolsets:
                    raise UnknownToolset(name, sorted(s.toolsets))
                return SavedState(equipped=None if s.equipped == name else s.equipped,
                             toolsets={k: v for k, v in s.toolsets.items() if k != name},
                             annotations={k: v for k, v in s.annotations.items() if k != name})

            was_equipped = await self._commit(change, apply)
            return {"deleted": name, "wasEquipped": was_equipped, "toolsets": self._known(), **self._mode()}

    async def annotate(self, tool_ref: Any, notes: Any) -> dict[str, Any]:
        """Add notes to a tool of the equipped toolset (appended to its description).

        Raises:
            ToolsetError: nothing equipped, the tool is not in the toolset, bad notes.
        """
        if not isinstance(tool_ref, Mapping) or (("namespacedName" in tool_ref) == ("refId" in tool_ref)):
            raise ToolsetError("invalid_arguments", "'toolRef' must be {namespacedName: 'server.tool'} or {refId}.")
        ref = tool_ref.get("namespacedName") or tool_ref.get("refId")
        if not isinstance(ref, str) or not ref:
            raise ToolsetError("invalid_arguments", "'toolRef' must name a tool with a non-empty string.")
        parsed = self._notes(notes)
        async with self._lock:
            ex = self.exposure
            if ex.equipped is None:
                raise ToolsetError("nothing_equipped", "No toolset is equipped: notes belong to a tool of the "
                                   "equipped toolset; equip one first.", toolsets=self._known())
            toolset = ex.equipped
            statuses = ex.resolve(self.core)
            by_ref = "refId" in tool_ref
            match = next((s for s in statuses if (
                (s.entry.ref_id == ref or (s.hit is not None and s.hit.ref_id == ref)) if by_ref
                else (s.namespaced == ref or s.entry.namespaced_name == ref))), None)
            if match is None:
                raise ToolsetError("unknown_tool", f"{ref!r} is not a tool of the equipped toolset "
                                   f"{toolset.name!r}.", tools=[s.namespaced for s in statuses])
            key = match.namespaced
            before = {n.name for n in ex.notes_for(toolset.name).get(key, ())}

            def change(s: SavedState) -> SavedState:
                per = dict(s.annotations.get(toolset.name, {}))
                merged = list(per.get(key, ()))
                for note in parsed:
                    idx = next((i for i, old in enumerate(merged) if old.name == note.name), None)
                    if idx is None:
                        merged.append(note)
                    else:
                        merged[idx] = note
                per[key] = tuple(merged)
                return dataclasses.replace(s, annotations={**s.annotations, toolset.name: per})

            await self._commit(change, lambda ex, core, new: ex.sync(new))
            now = ex.notes_for(toolset.name).get(key, ())
            return {"toolset": toolset.name,
                    "tool": {"namespacedName": key, "refId": match.hit.ref_id if match.hit else match.entry.ref_id},
                    "added": [n.name for n in parsed if n.name not in before],
                    "replaced": [n.name for n in parsed if n.name in before],
                    "notes": [{"name": n.name, "note": n.note} for n in now]}

    @staticmethod
    def _notes(notes: Any) -> list[Note]:
        if not isinstance(notes, list) or not notes:
            raise ToolsetError("invalid_arguments", "'notes' must be a non-empty array of {name, note}.")
        out = []
        for i, item in enumerate(notes):
            if not isinstance(item, Mapping) or set(item) != {"name", "note"}:
                raise ToolsetError("invalid_arguments", f"notes[{i}] must be an object with exactly name and note.")
            name, note = item["name"], item["note"]
            if not isinstance(name, str) or not name or not isinstance(note, str) or not note.strip():
                raise ToolsetError("invalid_arguments", f"notes[{i}]: name and note must be non-empty strings.")
            if len(note) > MAX_NOTE_CHARS:
                raise ToolsetError("invalid_arguments", f"notes[{i}]: a note is at most {MAX_NOTE_CHARS} characters.")
            out.append(Note(name=name, note=note))
        return out

    async def set_configuration_mode(self, on: bool) -> dict[str, Any]:
        """Enter (``on``) or leave configuration mode (menu exposure); no-op when already there.

        Raises:
            ToolsetError: the exposure is ``all``.
        """
        async with self._lock:
            await self.backend.router.ask(ExposureCall(lambda ex, core: ex.set_configuring(on)))
            return self._mode()

    # --- reports -------------------------------------------------------------------------
    def _mode(self) -> dict[str, Any]:
        ex = self.exposure
        return {"exposure": ex.mode, "configurationMode": ex.configuring,
                "equipped": ex.equipped.name if ex.equipped else None,
                "visibleTools": self.core.snapshot.exposed_names()}

    @staticmethod
    def _describe(ts: Toolset) -> dict[str, Any]:
        return {"name": ts.name, "description": ts.description, "readOnly": ts.read_only,
                "toolCount": len(ts.tools), "createdAt": ts.created_at or None, "updatedAt": ts.updated_at or None,
                "tools": [{"namespacedName": e.namespaced_name or None, "refId": e.ref_id, "alias": e.alias}
                          for e in ts.tools]}

    def active_report(self) -> dict[str, Any]:
        """The equipped toolset, each tool's state, and what the listed tools cost a client."""
        core = self.core
        ex = self.exposure
        snapshot = core.snapshot
        cat = Catalog.of(core)
        statuses = ex.resolve(core, catalog=cat)
        shown = [s for s in statuses if s.exposed and s.candidate is not None]
        named, _ = assign_names([s.candidate for s in shown if s.candidate is not None], core.namespacing)
        names = {id(s): n.name for s, n in zip(shown, named, strict=True)}
        notes = ex.notes_for(ex.equipped.name) if ex.equipped else {}
        tools = []
        for s in statuses:
            tools.append({
                "namespacedName": s.namespaced if s.hit or s.entry.namespaced_name else None,
                "refId": s.hit.ref_id if s.hit else s.entry.ref_id,
                "alias": s.entry.alias,
                "exposedAs": names.get(id(s)),
                "state": s.state,
                "server": s.server,
                "detail": s.detail,
                "changes": list(s.changes),
                "notes": [{"name": n.name, "note": n.note} for n in notes.get(s.namespaced, ())],
            })
        counts = {k: sum(1 for s in statuses if s.state == k) for k in (EXPOSED, SCHEMA_CHANGED, REFUSED, PENDING,
                                                                          MISSING)}
        listed = estimate_tokens(snapshot.tools_list)
        everything = estimate_tokens(full_list(core, ex.definitions))
        return {
            **self._mode(),
            "toolset": self._describe(ex.equipped) if ex.equipped else None,
            "toolsetVisible": ex.shows_toolset(),
            "tools": tools,
            "counts": counts,
            "tokens": {"listed": listed, "allTools": everything, "saved": max(0, everything - listed),
                       "method": "bytes of the JSON tools list / 4"},
            "problems": list(snapshot.problems),
        }

    def available(self, server: str | None = None) -> dict[str, Any]:
        core = self.core
        if server is not None and server not in core.order:
            raise ToolsetError("unknown_server", f"No server named {server!r}.", servers=list(core.order))
        cat = Catalog.of(core)
        servers = []
        for name in core.order:
            if server is not None and name != server:
                continue
            state, reason = self.server_state(name)
            if state == "ready":
                reason = None
            tools = [{"namespacedName": ct.namespaced, "name": ct.name, "refId": ct.ref_id,
                      "description": one_line(ct.tool.get("description"))}
                     for ct in cat.tools if ct.server == name]
            servers.append({"name": name, "state": state, "reason": reason, "toolCount": len(tools),
                            "tools": tools})
        return {"servers": servers, "toolCount": sum(s["toolCount"] for s in servers)}

    # --- handlers ------------------------------------------------------------------------
    async def _list_available(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ("server",))
        server = args.get("server")
        if server is not None and not isinstance(server, str):
            raise ToolsetError("invalid_arguments", "'server' must be a string.")
        data = self.available(server or None)
        lines = [f"{data['toolCount']} tools from {len(data['servers'])} server(s). Use the namespaced names "
                 "(or refIds) with build-toolset."]
        for s in data["servers"]:
            head = f"\n## {s['name']} ({s['state']}" + (f": {s['reason']}" if s["reason"] else "")
            lines.append(head + f"; {s['toolCount']} tools)")
            for t in s["tools"]:
                lines.append(f"- {t['namespacedName']}  [refId {t['refId']}]"
                             + (f"  {t['description']}" if t["description"] else ""))
        return ok("\n".join(lines), data)

    async def _build(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ("name", "tools", "description", "autoEquip"), ("name", "tools"))
        auto = args.get("autoEquip", False)
        if not isinstance(auto, bool):
            raise ToolsetError("invalid_arguments", "'autoEquip' must be true or false.")
        data = await self.build(_string(args, "name"), args.get("tools"), description=args.get("description"),
                                auto_equip=auto)
        ts = data["toolset"]
        text = f"Saved toolset {ts['name']!r} with {ts['toolCount']} tools."
        if data["warnings"]:
            text += "\nWarnings:\n" + "\n".join(f"- {w}" for w in data["warnings"])
        if data["equipped"]:
            text += "\n" + _render_active(data["active"])
        else:
            text += f"\nEquip it with {EQUIP} {{name: {ts['name']!r}}}."
        return ok(text, data)

    async def _list_saved(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        state = await self._load()
        ex = self.exposure
        toolsets = [self._describe(ts) for ts in ex.declared.values()]
        toolsets += [self._describe(ts) for name, ts in state.toolsets.items() if name not in ex.declared]
        equipped = ex.equipped.name if ex.equipped else None
        for t in toolsets:
            t["equipped"] = t["name"] == equipped
        lines = [f"{len(toolsets)} toolset(s)" + (f"; equipped: {equipped}" if equipped else "; none equipped")]
        for t in toolsets:
            flags = ", ".join(f for f, on in (("equipped", t["equipped"]), ("read-only, from the config file",
                                                                             t["readOnly"])) if on)
            lines.append(f"- {t['name']} ({t['toolCount']} tools{', ' + flags if flags else ''})"
                         + (f": {t['description']}" if t["description"] else ""))
            lines.append("  " + ", ".join(x["namespacedName"] or f"refId {x['refId']}" for x in t["tools"]))
        return ok("\n".join(lines), {"toolsets": toolsets, "equipped": equipped})

    async def _equip(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ("name",), ("name",))
        data = await self.equip(_string(args, "name"))
        return ok(f"Equipped {data['equipped']!r}.\n" + _render_active(data), data)

    async def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ("name",), ("name",))
        data = await self.delete(_string(args, "name"))
        text = f"Deleted toolset {data['deleted']!r}" + (" (it was equipped; now unequipped)."
                                                         if data["wasEquipped"] else ".")
        return ok(text, data)

    async def _unequip(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        data = await self.unequip()
        return ok(f"Unequipped {data['unequipped']!r}. " + _render_mode(data), data)

    async def _get_active(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        data = self.active_report()
        return ok(_render_active(data), data)

    async def _annotate(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ("toolRef", "notes"), ("toolRef", "notes"))
        data = await self.annotate(args["toolRef"], args["notes"])
        text = (f"Notes of {data['tool']['namespacedName']} in {data['toolset']!r} (appended to its description):\n"
                + "\n".join(f"- {n['name']}: {n['note']}" for n in data["notes"]))
        return ok(text, data)

    async def _server_status(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        now = trio.current_time()
        servers = [_status_dict(s, now) for s in self.backend.status()]
        lines = [f"{len(servers)} server(s):"]
        for s in servers:
            extra = []
            if s.get("uptimeSeconds") is not None:
                extra.append(f"up {s['uptimeSeconds']:.0f}s")
            extra.append(f"{s.get('toolCount', 0)} tools")
            extra.append(f"restarts {s.get('restarts', 0)}")
            if s.get("circuit") and s["circuit"] != "closed":
                extra.append(f"circuit {s['circuit']}")
            if s.get("retryInSeconds") is not None:
                extra.append(f"next try in {s['retryInSeconds']:.0f}s")
            if s.get("reason"):
                extra.append(f"reason: {s['reason']}")
            if s.get("lastError") and s.get("lastError") != s.get("reason"):
                extra.append(f"last error: {s['lastError']}")
            lines.append(f"- {s['name']}: {s['state']} ({', '.join(extra)})")
        return ok("\n".join(lines), {"servers": servers})

    async def _exit_config(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        data = await self.set_configuration_mode(False)
        return ok("Left configuration mode. " + _render_mode(data), data)

    async def _enter_config(self, args: dict[str, Any]) -> dict[str, Any]:
        _args(args, ())
        data = await self.set_configuration_mode(True)
        return ok("Entered configuration mode. " + _render_mode(data), data)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def _status_dict(status: Any, now: float) -> dict[str, Any]:
    """An `UpstreamStatus` as JSON-able camelCase; trio-clock times become relative seconds."""
    raw = dataclasses.asdict(status) if dataclasses.is_dataclass(status) else dict(vars(status))
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "retry_at":
            out["retryInSeconds"] = None if value is None else max(0.0, value - now)
        elif key == "since":
            out["sinceSecondsAgo"] = None if value is None else max(0.0, now - value)
        elif key == "uptime":
            out["uptimeSeconds"] = value
        else:
            out[_camel(key)] = getattr(value, "value", value)
    return out


def _render_mode(data: Mapping[str, Any]) -> str:
    visible = data["visibleTools"]
    where = "configuration mode" if data["configurationMode"] else "normal mode"
    equipped = f"toolset {data['equipped']!r} equipped" if data["equipped"] else "no toolset equipped"
    return (f"Now in {where}, {equipped}; clients see {len(visible)} tools: {', '.join(visible)}.")


def _render_active(data: Mapping[str, Any]) -> str:
    lines = []
    if data["toolset"] is None:
        lines.append("No toolset is equipped.")
    else:
        ts = data["toolset"]
        c = data["counts"]
        lines.append(f"Toolset {ts['name']!r}" + (" (read-only, from the config file)" if ts["readOnly"] else "")
                     + f": {c[EXPOSED] + c[SCHEMA_CHANGED]} of {len(data['tools'])} tools exposed"
                     + "".join(f", {c[k]} {k.replace('_', ' ')}" for k in (SCHEMA_CHANGED, REFUSED, PENDING, MISSING)
                               if c[k]) + ".")
        if not data["toolsetVisible"]:
            lines.append("(configuration mode: its tools are hidden until exit-configuration-mode)")
        for t in data["tools"]:
            name = t["namespacedName"] or f"refId {t['refId']}"
            line = f"- {name}"
            if t["exposedAs"]:
                line += f" -> {t['exposedAs']}"
            line += f": {t['state'].replace('_', ' ')}"
            if t["detail"] and t["state"] != EXPOSED:
                line += f" ({t['detail']})"
            lines.append(line)
            for change in t["changes"]:
                lines.append(f"    changed: {change}")
            for n in t["notes"]:
                lines.append(f"    note {n['name']}: {n['note']}")
    lines.append(_render_mode(data))
    tok = data["tokens"]
    lines.append(f"Estimated tokens for the tools list: {tok['listed']} now, {tok['allTools']} with every tool "
                 f"listed (saves ~{tok['saved']}; {tok['method']}).")
    for p in data["problems"]:
        lines.append(f"Note: {p}")
    return "\n".join(lines)


__all__ = ["CONFIG_TOOLS", "DEFINITIONS", "Menu", "MenuBackend", "failed", "ok"]
