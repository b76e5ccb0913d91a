"""The management tools: toolsets, configuration mode, server status.

Owns `MenuOperations`: the changes the management tools and the embedding API share
(`equip`, `unequip`, `build`, `delete`, `annotate`, configuration mode). The reports
they answer with (`active_report`, `available`) are its base, `mcpvisor.menu.reports`.

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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor._atomic import LockTimeout
from mcpvisor.actors import telemetry
from mcpvisor.actors.core.model import Note, SavedState, ToolEntry
from mcpvisor.actors.core.pins import pin_of
from mcpvisor.actors.core.toolsets import (
    PENDING,
    REFUSED,
    Catalog,
    ToolsetError,
    ToolsetExposure,
)
from mcpvisor.actors.router import ExposureCall
from mcpvisor.menu.checks import unknown_toolset
from mcpvisor.menu.definitions import MAX_NOTE_CHARS
from mcpvisor.menu.reports import MenuBackend, MenuReports
from mcpvisor.pgstore import StoreError
from mcpvisor.state import CorruptState, StateError, ToolsetExists, UnknownToolset
from mcpvisor.toolset_create import (
    Wanted,
    check_new_toolset,
    new_toolset,
    require_namespaced,
    resolve_all,
    unknown_server,
    unknown_tool,
)

if TYPE_CHECKING:
    from mcpvisor.actors.core.registry import RegistryCore


COMMIT_TIMEOUT_S: Final = 30.0
"""Bound on the router applying a change once the state file has it (shielded from
cancellation, docs/style.md rule 16): the router applies in microseconds behind at most a
mailbox of upstream events; 30 s means it is gone (shutting down)."""


async def _load_quietly(loader: Any, server: str) -> None:
    """Load ``server`` for an equipped toolset; a failure is the loader's to log and count."""
    from mcpvisor.actors.lazy import LoadFailed

    try:
        await loader.load(server)
    except LoadFailed:
        pass


class MenuOperations(MenuReports):
    """The management operations over a supervisor's router and state directory, shared
    by the tools (`mcpvisor.menu.handlers.Menu`) and the embedding API."""

    def __init__(self, backend: MenuBackend) -> None:
        super().__init__(backend)
        self._lock = trio.Lock()  # FIFO: changes apply in the order they were asked for

    # --- plumbing ----------------------------------------------------------------------
    async def _load(self) -> SavedState:
        try:
            return await trio.to_thread.run_sync(self.backend.store.load)
        except CorruptState as exc:
            raise ToolsetError("state_unreadable", str(exc), path=str(exc.path)) from None
        except StoreError as exc:  # the shared store is down: its message names it, no password
            raise ToolsetError("store_unreachable", f"{exc}. Nothing changed.") from None
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
                raise unknown_toolset(exc.name, self._known(exc.known)) from None
            except ToolsetExists as exc:
                raise ToolsetError("toolset_exists",
                                   f"A toolset named {exc.name!r} already exists; delete it "
                                   "first or choose another name.", toolsets=self._known()) from None
            except StoreError as exc:
                raise ToolsetError("store_unreachable", f"{exc}. Nothing changed.") from None
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
        """Start the lazy servers whose tools the equipped toolset names (idempotent), in
        the background, through the supervisor's loader when it has one (coalesced, with
        its failure budget; `mcpvisor.actors.lazy`)."""
        loader = getattr(self.backend, "loader", None)
        start_soon = getattr(self.backend, "start_soon", None)
        for s in self.exposure.resolve(self.core):
            if s.state == PENDING and s.server is not None:
                up = self.backend.upstreams.get(s.server)
                if up is None or up.state.value != "idle":
                    continue
                if loader is not None and start_soon is not None and loader.is_lazy(s.server):
                    start_soon(_load_quietly, loader, s.server)
                else:
                    up.load()

    async def adopt(self) -> None:
        """The shared state was changed by another replica (`mcpvisor.pgstore.follow`):
        read it and apply it here as if it had been changed here (toolsets, notes, the
        equipped toolset), in turn with local changes; clients get one ``list_changed``
        where what they see changed.

        Raises:
            ToolsetError: the state cannot be read (nothing changes).
        """
        async with self._lock:
            state = await self._load()

            def apply(ex: ToolsetExposure, core: RegistryCore) -> None:
                ex.sync(state)
                wanted = state.equipped
                if wanted is None:
                    if ex.equipped is not None:
                        ex.unequip()
                    return
                toolset = ex.declared.get(wanted) or state.toolsets.get(wanted)
                if toolset is not None and toolset != ex.equipped:
                    ex.equip(toolset)

            await self.backend.router.ask(ExposureCall(apply))
        self.load_lazy()

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
                raise unknown_toolset(name, self._known(list(state.toolsets)))
            statuses = ex.resolve(self.core, toolset)
            refused = [s for s in statuses if s.state == REFUSED]
            if refused:
                lines = [f"{s.namespaced}: {'; '.join(s.changes)}" for s in refused]
                raise ToolsetError("schema_changed", f"Not equipped: settings.pinSchemas is 'refuse' and "
                                   f"{len(refused)} tool(s) changed since {name!r} was built:\n"
                                   + "\n".join(lines)
                                   + "\nRebuild the toolset to accept the new schemas.",
                                   changed=[{"namespacedName": s.namespaced, "changes": list(s.changes)}
                                            for s in refused])

            def change(s: SavedState) -> SavedState:
                if name not in declared and name not in s.toolsets:
                    raise UnknownToolset(name, sorted(s.toolsets))
                return msgspec.structs.replace(s, equipped=name)

            def apply(ex: ToolsetExposure, core: RegistryCore, new: SavedState) -> None:
                ex.sync(new)
                ex.equip(ex.declared.get(name) or new.toolsets[name])

            await self._commit(change, apply)
            report = self.active_report()
        if telemetry.tracer is not None:  # the equip as an event of the call that asked for it
            telemetry.lifecycle("mcpvisor.toolset.equip", toolset=name)
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

            await self._commit(lambda s: msgspec.structs.replace(s, equipped=None), apply)
            return {"unequipped": name, **self._mode()}

    async def build(self, name: str, tools: Any, *, description: str | None = None,
                    auto_equip: bool = False) -> dict[str, Any]:
        """Build and save a toolset from catalog tools (pinning their schemas), by the rules
        ``mcpvisor toolset create`` follows too (`mcpvisor.toolset_create`).

        Raises:
            ToolsetError: a bad name, an unknown tool (with close matches), a name taken.
        """
        async with self._lock:
            ex = self.exposure
            wanted = check_new_toolset(name, tools, description=description, declared=ex.declared,
                                       known=self._known())
            cat = Catalog.of(self.core)
            warnings: list[str] = []
            entries = resolve_all(wanted, lambda w: self._entry(w, cat, warnings))
            toolset = new_toolset(name, entries, description)

            def change(s: SavedState) -> SavedState:
                if name in s.toolsets:
                    raise ToolsetExists(name)
                return msgspec.structs.replace(s, toolsets={**s.toolsets, name: toolset},
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

    def _entry(self, wanted: Wanted, cat: Catalog, warnings: list[str]) -> ToolEntry:
        """One tool of build-toolset, found in the running catalog and pinned."""
        alias = wanted.alias
        if wanted.ref_id is not None:
            hit = cat.by_ref.get(wanted.ref_id)
            if hit is None:
                raise ToolsetError("unknown_tool", f"unknown tool: no tool has refId {wanted.ref_id!r} "
                                   "(see list-available-tools)")
            return ToolEntry(namespaced_name=hit.namespaced, ref_id=hit.ref_id, alias=alias,
                             pinned=pin_of(hit.tool))
        nn = wanted.namespaced_name
        assert nn is not None  # a Wanted has exactly one of the two
        hit = cat.by_name.get(nn)
        if hit is not None and hit.candidate.compound is not None:
            # A compound tool's description follows its subtools' state: nothing to pin.
            return ToolEntry(namespaced_name=hit.namespaced, ref_id=None, alias=alias, pinned=None)
        if hit is not None:
            return ToolEntry(namespaced_name=hit.namespaced, ref_id=hit.ref_id, alias=alias,
                             pinned=pin_of(hit.tool))
        core = self.core
        server = require_namespaced(wanted)
        if server not in core.order:
            raise unknown_server(wanted, core.order)
        if server not in core.lists:
            # Its server is not up (starting, lazy, circuit open): kept unpinned, pending until it is.
            state, reason = self.server_state(server)
            warnings.append(f"{nn}: not checked, server {server} is {state}"
                            + (f" ({reason})" if reason else "")
                            + "; it is pending until the server is up")
            return ToolEntry(namespaced_name=nn, ref_id=None, alias=alias, pinned=None)
        raise unknown_tool(wanted, cat.close_matches(nn))

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
            raise ToolsetError("invalid_arguments",
                               "'toolRef' must be {namespacedName: 'server.tool'} or {refId}.")
        ref = tool_ref.get("namespacedName") or tool_ref.get("refId")
        if not isinstance(ref, str) or not ref:
            raise ToolsetError("invalid_arguments", "'toolRef' must name a tool with a non-empty string.")
        parsed = self._notes(notes)
        async with self._lock:
            ex = self.exposure
            if ex.equipped is None:
                raise ToolsetError("nothing_equipped",
                                   "No toolset is equipped: notes belong to a tool of the "
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
                return msgspec.structs.replace(s, annotations={**s.annotations, toolset.name: per})

            await self._commit(change, lambda ex, core, new: ex.sync(new))
            now = ex.notes_for(toolset.name).get(key, ())
            return {"toolset": toolset.name,
                    "tool": {"namespacedName": key,
                             "refId": match.hit.ref_id if match.hit else match.entry.ref_id},
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
                raise ToolsetError("invalid_arguments",
                                   f"notes[{i}] must be an object with exactly name and note.")
            name, note = item["name"], item["note"]
            if not isinstance(name, str) or not name or not isinstance(note, str) or not note.strip():
                raise ToolsetError("invalid_arguments",
                                   f"notes[{i}]: name and note must be non-empty strings.")
            if len(note) > MAX_NOTE_CHARS:
                raise ToolsetError("invalid_arguments",
                                   f"notes[{i}]: a note is at most {MAX_NOTE_CHARS} characters.")
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
