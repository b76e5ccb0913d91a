"""Toolsets and configuration mode: which upstream tools clients see (sans-IO).

Owns, as plain synchronous code the router's core calls (docs/style.md rule 2):

* `ToolsetExposure`: the `mcpvisor.actors.router.Exposure` for ``settings.exposure`` ``menu``
  and ``all``: configuration mode on/off, the equipped toolset, the toolsets known
  (declared in the config file, read-only; saved in the state directory) and the
  users' notes. ``select`` is a pure function of that state and the catalog.
* Resolution of a toolset's entries to catalog tools (`resolve`), each with its
  state: exposed, schema changed, refused (``pinSchemas: refuse``), pending on a
  server that is not up, or missing upstream (refIds and pins: `mcpvisor.actors.core.pins`).

What clients see (docs/design.md "Exposure modes"):

==========  ==================  =====================================================
exposure    equipped            tools listed
==========  ==================  =====================================================
menu        none                configuration mode: the management tools, with
                                ``exit-configuration-mode``; after exiting, only
                                ``enter-configuration-mode``
menu        T, normal mode      T's exposed tools + ``enter-configuration-mode``
menu        T, configuration    the management tools, with ``exit-configuration-mode``
all         none                every discovered tool + the management tools
all         T                   T's exposed tools + the management tools (equip narrows)
discovery   none / T            discover_tool, use_tool (+ load_mcp): every tool (or T's)
                                reachable through them, the management tools callable
                                but not listed (`mcpvisor.actors.core.discovery`)
==========  ==================  =====================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor.actors.core.catalog import Candidate, Snapshot, assign_names, close_names, exposed_tool
from mcpvisor.actors.core.discovery import LazyBook, discovery_view
from mcpvisor.actors.core.model import Note, SavedState, ToolEntry, Toolset
from mcpvisor.actors.core.pins import describe_changes, ref_id
from mcpvisor.actors.core.vocabulary import DEFAULT_DISCOVERY_BUDGET, EXPOSURES

if TYPE_CHECKING:
    from mcpvisor.actors.core.registry import RegistryCore

MODES: Final = EXPOSURES
"""The exposures this module implements (``discovery`` reshaped by `mcpvisor.actors.core.discovery`)."""

LIST_AVAILABLE: Final = "list-available-tools"
BUILD: Final = "build-toolset"
LIST_SAVED: Final = "list-saved-toolsets"
EQUIP: Final = "equip-toolset"
DELETE: Final = "delete-toolset"
UNEQUIP: Final = "unequip-toolset"
GET_ACTIVE: Final = "get-active-toolset"
ANNOTATE: Final = "add-tool-annotation"
SERVER_STATUS: Final = "get-server-status"
EXIT_CONFIG: Final = "exit-configuration-mode"
ENTER_CONFIG: Final = "enter-configuration-mode"

CONFIG_TOOLS: Final = (LIST_AVAILABLE, BUILD, LIST_SAVED, EQUIP, DELETE, UNEQUIP, GET_ACTIVE, ANNOTATE,
                       SERVER_STATUS)
"""The management tools (docs/design.md order; HyperTool's names), without the mode switches."""
MANAGEMENT_TOOLS: Final = (*CONFIG_TOOLS, EXIT_CONFIG, ENTER_CONFIG)


# Tool states in reports.
EXPOSED: Final = "exposed"
SCHEMA_CHANGED: Final = "schema_changed"
REFUSED: Final = "refused"
PENDING: Final = "pending"
MISSING: Final = "missing"


class ToolsetError(Exception):
    """A management request that cannot be done; says what exists instead.

    Attributes:
        code: a short machine-readable reason (``unknown_toolset``, ``unknown_tool``,
            ``invalid_name``, ``nothing_equipped``, ...).
        message: the sentence a user or model reads.
        data: what exists (saved names, close matches, the naming rule ...).
    """

    def __init__(self, code: str, message: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.data}


# --------------------------------------------------------------------------------------
# the catalog as toolsets see it
# --------------------------------------------------------------------------------------


class CatalogTool(msgspec.Struct, frozen=True):
    """One discovered tool, under the name toolsets use for it (``server.tool``)."""

    namespaced: str
    server: str
    name: str
    """Its name in the server's namespace (the config's ``exposedTools`` rename, or its own)."""
    candidate: Candidate

    @property
    def tool(self) -> Mapping[str, Any]:
        return self.candidate.tool

    @property
    def ref_id(self) -> str:
        return ref_id(self.server, self.candidate.original, self.candidate.tool)


class Catalog:
    """The tools clients could be given (config filters applied), indexed for toolsets."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self.tools: list[CatalogTool] = []
        self.by_name: dict[str, CatalogTool] = {}
        for c in candidates:
            name = c.rename or c.original
            ct = CatalogTool(c.key if c.compound is not None else f"{c.server}.{name}", c.server, name, c)
            self.tools.append(ct)
            self.by_name.setdefault(ct.namespaced, ct)
        for ct in self.tools:  # a renamed tool is also found by its upstream name
            if ct.candidate.compound is None:
                self.by_name.setdefault(f"{ct.server}.{ct.candidate.original}", ct)
        self._by_ref: dict[str, CatalogTool] | None = None

    @classmethod
    def of(cls, core: RegistryCore) -> Catalog:
        return cls(core.all_candidates())

    @property
    def by_ref(self) -> dict[str, CatalogTool]:
        if self._by_ref is None:
            self._by_ref = {}
            for ct in self.tools:
                self._by_ref.setdefault(ct.ref_id, ct)
        return self._by_ref

    def close_matches(self, name: str) -> list[str]:
        return close_names(name, (ct.namespaced for ct in self.tools))


# --------------------------------------------------------------------------------------
# resolution of a toolset
# --------------------------------------------------------------------------------------


ServerState = Callable[[str], tuple[str, "str | None"]]
"""server -> (state, reason), for the ``pending`` detail."""


class EntryStatus(msgspec.Struct, frozen=True):
    """One toolset entry, resolved against the catalog."""

    entry: ToolEntry
    state: str
    """`EXPOSED`, `SCHEMA_CHANGED`, `REFUSED`, `PENDING` or `MISSING`."""
    server: str | None
    namespaced: str
    detail: str | None = None
    changes: tuple[str, ...] = ()
    hit: CatalogTool | None = None
    candidate: Candidate | None = None
    """What to expose (with alias and notes) when the state is exposed or schema changed."""

    @property
    def exposed(self) -> bool:
        return self.state in (EXPOSED, SCHEMA_CHANGED)

    @property
    def ref(self) -> str:
        return self.entry.namespaced_name or f"refId {self.entry.ref_id}"


def _state_from(core: RegistryCore) -> ServerState:
    def state(server: str) -> tuple[str, str | None]:
        return core.states.get(server, ("starting", None))
    return state


def resolve(
    toolset: Toolset,
    core: RegistryCore,
    *,
    catalog: Catalog | None = None,
    notes: Mapping[str, Sequence[Note]] | None = None,
    pin_schemas: str = "warn",
    server_state: ServerState | None = None,
) -> list[EntryStatus]:
    """Each entry of ``toolset`` against the current catalog, in the toolset's order.

    A pure function of its arguments. An entry listed twice counts once.
    """
    cat = catalog if catalog is not None else Catalog.of(core)
    state_of = server_state or _state_from(core)
    notes = notes or {}
    out: list[EntryStatus] = []
    seen: set[tuple[str, str | None]] = set()
    for entry in toolset.tools:
        status = _resolve_entry(entry, cat, core, pin_schemas, state_of)
        key = (status.namespaced, entry.alias)
        if key in seen:
            continue
        seen.add(key)
        if status.exposed and status.hit is not None:
            note_list = notes.get(status.namespaced, ())
            status = msgspec.structs.replace(status, candidate=msgspec.structs.replace(
                status.hit.candidate, alias=entry.alias,
                notes=tuple(f"{n.name}: {n.note}" for n in note_list)))
        out.append(status)
    return out


def _resolve_entry(entry: ToolEntry, cat: Catalog, core: RegistryCore, pin_schemas: str,
                   state_of: ServerState) -> EntryStatus:
    if entry.namespaced_name:
        name = entry.namespaced_name
        server, _, tool = name.partition(".")
        hit = cat.by_name.get(name)
        if hit is None:
            if server not in core.order:
                known = ", ".join(core.order) or "none"
                return EntryStatus(entry, MISSING, None, name,
                                   f"no server named {server!r} is configured and enabled (servers: {known})")
            if server not in core.lists:
                state, reason = state_of(server)
                return EntryStatus(entry, PENDING, server, name,
                                   f"server {server} is {state.replace('_', ' ')}"
                                   + (f": {reason}" if reason else ""))
            if core.find_tool(server, tool) is not None:
                return EntryStatus(entry, MISSING, server, name,
                                   f"{server} lists {tool!r} but the config hides it "
                                   "(exposedTools/hiddenTools)")
            close = cat.close_matches(name)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            return EntryStatus(entry, MISSING, server, name,
                               f"{server} no longer lists a tool named {tool!r}{hint}")
    else:
        hit = cat.by_ref.get(entry.ref_id or "")
        if hit is None:
            down = [s for s in core.order if s not in core.lists]
            if down:
                return EntryStatus(entry, PENDING, None, f"refId {entry.ref_id}",
                                   f"no tool has refId {entry.ref_id} yet; servers not up: {', '.join(down)}")
            return EntryStatus(entry, MISSING, None, f"refId {entry.ref_id}",
                               f"no tool has refId {entry.ref_id} (its schema changed or it was removed)")
    changes: list[str] = []
    if entry.pinned is not None:
        changes = describe_changes(entry.pinned, hit.tool)
    elif entry.ref_id and entry.namespaced_name and entry.ref_id != hit.ref_id:
        changes = [f"schemas changed since the toolset was built (refId {entry.ref_id} -> {hit.ref_id})"]
    if not changes:
        return EntryStatus(entry, EXPOSED, hit.server, hit.namespaced, hit=hit)
    state = REFUSED if pin_schemas == "refuse" else SCHEMA_CHANGED
    detail = ("not exposed: settings.pinSchemas is 'refuse'" if state == REFUSED
              else "exposed with its new schema (settings.pinSchemas is 'warn')")
    return EntryStatus(entry, state, hit.server, hit.namespaced, detail, tuple(changes), hit=hit)


# --------------------------------------------------------------------------------------
# the exposure
# --------------------------------------------------------------------------------------


def placeholder_definitions() -> dict[str, Mapping[str, Any]]:
    """Bare definitions of the management tools (the real ones live in `mcpvisor.menu`)."""
    return {name: {"name": name, "inputSchema": {"type": "object"}} for name in MANAGEMENT_TOOLS}


class ToolsetExposure(msgspec.Struct):
    """The router's `Exposure` for ``menu`` and ``all``: mutate only inside the router.

    ``equipped`` holds the toolset as it was when equipped, so another proxy deleting
    or rewriting it in a shared state directory does not change this proxy's tools
    until it equips again.
    """

    mode: str = "menu"
    definitions: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=placeholder_definitions)
    declared: dict[str, Toolset] = msgspec.field(default_factory=dict)
    saved: dict[str, Toolset] = msgspec.field(default_factory=dict)
    annotations: dict[str, Mapping[str, tuple[Note, ...]]] = msgspec.field(default_factory=dict)
    equipped: Toolset | None = None
    configuring: bool = True
    """Configuration mode (menu exposure only): global to the proxy, never persisted."""
    pin_schemas: str = "warn"
    server_state: ServerState | None = None
    """Where pending reports get a server's state (default: the core's last known)."""
    lazy: LazyBook | None = None
    """The lazy servers and their loads (every mode; discovery lists them)."""
    discovery_budget: int = DEFAULT_DISCOVERY_BUDGET
    server_descriptions: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Servers' config ``description``s, for discovery's catalog and search."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"exposure {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode != "menu":
            self.configuring = False

    # --- reads ----------------------------------------------------------------------
    def toolsets(self) -> dict[str, Toolset]:
        """Every known toolset: the config file's first, then the saved ones."""
        out = dict(self.declared)
        for name, ts in self.saved.items():
            out.setdefault(name, ts)
        return out

    def find(self, name: str) -> Toolset | None:
        return self.declared.get(name) or self.saved.get(name)

    def notes_for(self, toolset: str) -> Mapping[str, tuple[Note, ...]]:
        return self.annotations.get(toolset, {})

    def visible_local(self) -> tuple[str, ...]:
        """The management tools listed now."""
        if self.mode != "menu":
            return CONFIG_TOOLS
        if self.configuring:
            return (*CONFIG_TOOLS, EXIT_CONFIG)
        return (ENTER_CONFIG,)

    def shows_toolset(self) -> bool:
        """Whether the equipped toolset's tools are listed now."""
        return self.equipped is not None and not self.configuring

    def resolve(self, core: RegistryCore, toolset: Toolset | None = None,
                catalog: Catalog | None = None) -> list[EntryStatus]:
        ts = toolset if toolset is not None else self.equipped
        if ts is None:
            return []
        return resolve(ts, core, catalog=catalog, notes=self.notes_for(ts.name), pin_schemas=self.pin_schemas,
                       server_state=self.server_state)

    def select(self, core: RegistryCore) -> tuple[list[Candidate], list[Mapping[str, Any]]]:
        """(upstream tools to expose, management tools to list first): a pure function
        of this exposure's state and the core's catalog."""
        local = [self.definitions[name] for name in self.visible_local()]
        if self.mode != "menu" and self.equipped is None:
            return core.all_candidates(), local
        if not self.shows_toolset():
            return [], local
        return [s.candidate for s in self.resolve(core) if s.exposed and s.candidate is not None], local

    def finish(self, snapshot: Snapshot, core: RegistryCore) -> Snapshot:
        """The snapshot clients see: the lazy servers not loaded yet noted (a call may load
        one); with discovery, its three tools listed instead."""
        unloaded = self.lazy.unloaded(core) if self.lazy is not None else ()
        if unloaded:
            snapshot = msgspec.structs.replace(snapshot, unloaded=unloaded)
        if self.mode != "discovery":
            return snapshot
        return discovery_view(snapshot, core, self.lazy, self.discovery_budget, self.server_descriptions)

    def view(self, core: RegistryCore, toolset: Toolset) -> Snapshot:
        """What a client sees with ``toolset`` equipped, without equipping it: a harness
        session's own view (`mcpvisor.sessions`).

        Built by the rules of the proxy's own snapshot (the same names, notes, schema pins,
        lazy servers and discovery), over the catalog now, but without the management
        tools: they change the proxy's exposure, not the session's. Pure; changes nothing.
        """
        statuses = self.resolve(core, toolset)
        candidates = [s.candidate for s in statuses if s.exposed and s.candidate is not None]
        return self.finish(core.build(candidates), core)

    # --- writes (inside the router; each either applies fully or raises first) -------
    def restore(self, state: SavedState, equip: str | None = None) -> None:
        """Start-up: take the state directory's toolsets and notes, and equip ``equip``
        (default: the one the state says was equipped) if it exists; normal mode then."""
        self.sync(state)
        name = equip if equip is not None else state.equipped
        self.equipped = self.find(name) if name else None
        self.configuring = self.mode == "menu" and self.equipped is None

    def sync(self, state: SavedState) -> None:
        """Take the saved toolsets and notes of a freshly read or written state."""
        self.saved = dict(state.toolsets)
        self.annotations = {k: dict(v) for k, v in state.annotations.items()}

    def equip(self, toolset: Toolset) -> None:
        """Equip ``toolset`` and return to normal mode."""
        self.equipped = toolset
        self.configuring = False

    def unequip(self) -> Toolset:
        """Unequip; in menu exposure that is back to configuration mode (the menu).

        Raises:
            ToolsetError: nothing is equipped (nothing changes).
        """
        if self.equipped is None:
            raise ToolsetError("nothing_equipped", "No toolset is equipped.",
                               toolsets=sorted(self.toolsets()))
        old = self.equipped
        self.equipped = None
        self.configuring = self.mode == "menu"
        return old

    def drop(self, name: str) -> bool:
        """A saved toolset was deleted: unequip it if it is the equipped one."""
        if self.equipped is not None and self.equipped.name == name and not self.equipped.read_only:
            self.equipped = None
            self.configuring = self.mode == "menu"
            return True
        return False

    def set_configuring(self, on: bool) -> None:
        """Enter (``on``) or leave configuration mode.

        Raises:
            ToolsetError: the exposure is ``all``, which has no configuration mode.
        """
        if self.mode != "menu":
            raise ToolsetError("no_configuration_mode",
                               f"Configuration mode exists only with settings.exposure 'menu' (this proxy "
                               f"uses {self.mode!r}); the management tools are always listed.")
        self.configuring = on

    def checkpoint(self) -> tuple[Any, ...]:
        return (self.saved, self.annotations, self.equipped, self.configuring)

    def rollback(self, saved: tuple[Any, ...]) -> None:
        self.saved, self.annotations, self.equipped, self.configuring = saved


def full_list(core: RegistryCore, definitions: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """What ``exposure: all`` would list: every catalog tool (named as clients would see
    them) plus the management tools."""
    tools: list[Mapping[str, Any]] = [definitions[n] for n in CONFIG_TOOLS if n in definitions]
    named, _ = assign_names(core.all_candidates(), core.namespacing)
    tools.extend(exposed_tool(n.item.tool, n.name, n.item.notes) for n in named)
    return tools
