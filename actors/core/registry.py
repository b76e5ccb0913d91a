"""The registry core: the router's registration state as plain synchronous code (no trio).

`RegistryCore` holds every server's discovered lists (the catalog) and the exposure
(which of those tools clients see, under which names). ``apply`` takes one registration
message (`mcpvisor.actors.core.registration`) and answers which kinds of lists changed
(`Changes`); ``snapshot`` is the immutable `Snapshot` clients read. The actor shell
around it, with the mailbox, is `mcpvisor.actors.router.Router`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from mcpvisor.actors.core.catalog import Candidate, Snapshot, SnapshotBuilder, UpstreamLists
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamListed, UpstreamState, UpstreamUp

if TYPE_CHECKING:
    from mcpvisor.actors.core.compound import CompoundDecl, CompoundTool

logger = logging.getLogger(__name__)


class Changes(msgspec.Struct, frozen=True):
    """Which lists clients must re-fetch after a mutation."""

    tools: bool = False
    resources: bool = False
    prompts: bool = False
    catalog: bool = False
    """The upstream tools or the toolsets behind the lists may have changed: a fixed view
    of one toolset (``/mcp/toolset/NAME``) may show something new even when the proxy's
    own list, narrowed by another equipped toolset, does not."""

    def __bool__(self) -> bool:
        return self.tools or self.resources or self.prompts or self.catalog

    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in ("tools", "resources", "prompts") if getattr(self, k))


def diff(old: Snapshot, new: Snapshot) -> Changes:
    return Changes(
        tools=old.tools_list != new.tools_list,
        resources=old.resources_list != new.resources_list or old.templates_list != new.templates_list,
        prompts=old.prompts_list != new.prompts_list,
    )


class ServerFilter(msgspec.Struct, frozen=True):
    """A server's config-level tool filter (``exposedTools`` / ``hiddenTools``)."""

    exposed: Mapping[str, str | None] | None = None
    """original -> rename (None keeps the name); None means every tool."""
    hidden: frozenset[str] = frozenset()

    def select(self, server: str, tools: Sequence[Mapping[str, Any]]) -> list[Candidate]:
        out = []
        for tool in tools:
            name = str(tool.get("name", ""))
            if name in self.hidden:
                continue
            if self.exposed is not None:
                if name not in self.exposed:
                    continue
                out.append(Candidate(server, name, tool, rename=self.exposed[name]))
            else:
                out.append(Candidate(server, name, tool))
        return out


class Exposure(Protocol):
    """Decides which tools clients see; the menu/toolset logic plugs in here."""

    def select(self, core: RegistryCore) -> tuple[list[Candidate], list[Mapping[str, Any]]]:
        """(upstream tools to expose, proxy-local tools to list first)."""

    def finish(self, snapshot: Snapshot, core: RegistryCore) -> Snapshot:
        """The snapshot clients see, from the one built of `select` (discovery reshapes
        what is listed: `mcpvisor.actors.core.discovery`)."""


class ExposeAll:
    """``settings.exposure = "all"``: every discovered tool (plus the management tools)."""

    def __init__(self, local_tools: Callable[[], list[Mapping[str, Any]]] | None = None) -> None:
        self._local = local_tools

    def select(self, core: RegistryCore) -> tuple[list[Candidate], list[Mapping[str, Any]]]:
        return core.all_candidates(), (self._local() if self._local else [])

    def finish(self, snapshot: Snapshot, core: RegistryCore) -> Snapshot:
        return snapshot


class RegistryCore:
    """Sans-IO registration state: apply a message, get the changes; read `snapshot`."""

    def __init__(
        self,
        order: Sequence[str],
        *,
        namespacing: str = "prefix",
        filters: Mapping[str, ServerFilter] | None = None,
        exposure: Exposure | None = None,
        compounds: Sequence[CompoundDecl] = (),
    ) -> None:
        self.order = list(order)
        self.filters = dict(filters or {})
        self.compounds: tuple[CompoundDecl, ...] = tuple(compounds)
        """The config's compound tools (top-level ``tools``), catalog entries like any tool."""
        self.lists: dict[str, UpstreamLists] = {}
        self.states: dict[str, tuple[str, str | None]] = {}
        self.exposure: Exposure = exposure or ExposeAll()
        self._builder = SnapshotBuilder(namespacing=namespacing)
        self.snapshot = Snapshot()
        self.rebuild()

    # --- reads ---------------------------------------------------------------------
    @property
    def namespacing(self) -> str:
        """``settings.namespacing`` the names are built with (prefix, auto, none)."""
        return self._builder.namespacing

    def available(self) -> list[str]:
        """Servers whose lists are in the catalog, in config order."""
        return [s for s in self.order if s in self.lists]

    def all_candidates(self) -> list[Candidate]:
        """Every tool clients could be given: each server's (config filters applied), then
        the compound tools (which may use hidden tools as subtools)."""
        out: list[Candidate] = []
        for server in self.available():
            out.extend(self.filters.get(server, ServerFilter()).select(server, self.lists[server].tools))
        compounds = self.compound_tools()
        if compounds:
            from mcpvisor.actors.core.compound import COMPOUND_SERVER

            out.extend(Candidate(COMPOUND_SERVER, ct.name, ct.wire(), compound=ct) for ct in compounds)
        return out

    def compound_tools(self) -> list[CompoundTool]:
        """The compound tools resolved against the catalog now, in config order."""
        if not self.compounds:
            return []
        # Imported here, once a config declares compound tools: their module (and the
        # argument checks it brings) costs every other start ~1.5 ms.
        from mcpvisor.actors.core.compound import resolve_compound

        def state_of(server: str) -> tuple[str, str | None] | None:
            if server not in self.order:
                return None
            return self.states.get(server, ("starting", None))

        return [resolve_compound(d, find_tool=self.find_tool, listed=self.lists.__contains__,
                                 state_of=state_of)
                for d in self.compounds]

    def find_tool(self, server: str, original: str) -> Mapping[str, Any] | None:
        ul = self.lists.get(server)
        if ul is None:
            return None
        for tool in ul.tools:
            if tool.get("name") == original:
                return tool
        return None

    def build(self, candidates: Sequence[Candidate], local: Sequence[Mapping[str, Any]] = ()) -> Snapshot:
        """A snapshot exposing ``candidates`` (and ``local`` tools) over the catalog now,
        named by the rules `snapshot` is; changes nothing (a harness session's own view)."""
        return SnapshotBuilder(namespacing=self.namespacing).build(self.order, self._available_lists(),
                                                                   candidates, local)

    def _available_lists(self) -> dict[str, UpstreamLists]:
        return {s: self.lists[s] for s in self.available()}

    # --- writes ----------------------------------------------------------------------
    def rebuild(self) -> Changes:
        candidates, local = self.exposure.select(self)
        old = self.snapshot
        self.snapshot = self._builder.build(self.order, self._available_lists(), candidates, local)
        if self.compounds:  # a declared subtool a running server lacks: a warning, not a refusal
            extra = tuple(p for ct in self.compound_tools() for p in ct.problems())
            self.snapshot = msgspec.structs.replace(self.snapshot, problems=self.snapshot.problems + extra)
        self.snapshot = self.exposure.finish(self.snapshot, self)
        for problem in self.snapshot.problems:
            if problem not in old.problems:
                logger.warning("%s", problem)
        return diff(old, self.snapshot)

    def apply(self, message: object) -> Changes:
        """Apply one registration message; returns what clients must re-fetch."""
        match message:
            case UpstreamUp(server=server, lists=lists):
                self.lists[server] = lists
                self.states[server] = ("ready", None)
            case UpstreamListed(server=server, kind=kind, items=items, announced=announced):
                if server not in self.lists:
                    return Changes()
                self.lists[server] = self.lists[server].replace(kind, items)
                changes = self.rebuild()
                if announced and self._shows(server, kind):
                    field = "resources" if kind == "templates" else kind
                    changes = msgspec.structs.replace(changes, **{field: True})
                if kind == "tools":  # the catalog changed: fixed views re-read theirs
                    changes = msgspec.structs.replace(changes, catalog=True)
                return changes
            case UpstreamDown(server=server, withdraw=withdraw, reason=reason):
                self.states[server] = ("down", reason)
                if not withdraw:
                    return self.rebuild()  # its tools stay listed: no view changes
                self.lists.pop(server, None)
            case UpstreamState(server=server, state=state, reason=reason):
                self.states[server] = (state, reason)
                return Changes()
            case _:
                raise TypeError(f"router core cannot apply {type(message).__name__}")
        return msgspec.structs.replace(self.rebuild(), catalog=True)

    def _shows(self, server: str, kind: str) -> bool:
        """Whether clients see any item of ``server``'s list of ``kind`` (an announcement
        of a list they see none of is not theirs to hear)."""
        snapshot = self.snapshot
        if kind == "tools":
            return any(route.server == server for route in snapshot.tools.values())
        if kind == "prompts":
            return any(route.server == server for route in snapshot.prompts.values())
        return server in snapshot.resources.values() or any(
            owner == server for _, owner in snapshot.templates)

    def remember(self, server: str, lists: UpstreamLists) -> None:
        """List ``server`` from memory (its lists of an earlier run) until it lists its own.

        Call before the first `rebuild` clients see; `UpstreamUp` replaces the lists (no
        change announced when they are the same), a withdrawal removes them.
        """
        if server in self.order and server not in self.lists:
            self.lists[server] = lists
            self.states[server] = ("starting", "listed from memory")

    def reconfigure(self, order: Sequence[str], filters: Mapping[str, ServerFilter], namespacing: str,
                    compounds: Sequence[CompoundDecl] | None = None) -> Changes:
        """Apply a new config (hot reload): server order, filters, naming, compound tools
        (None keeps the current ones)."""
        self.order = list(order)
        self.filters = dict(filters)
        if compounds is not None:
            self.compounds = tuple(compounds)
        for server in list(self.lists):
            if server not in self.order:
                del self.lists[server]
        self._builder.namespacing = namespacing
        return self.rebuild()
