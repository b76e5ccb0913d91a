"""What the management tools report: read-only views of the router and the exposure.

Owns `MenuReports`, the base of `mcpvisor.menu.operations.MenuOperations`:

* the plumbing every operation reads through: the router's core, its toolset exposure,
  a server's state and why (`MenuBackend` is what it needs of the supervisor);
* the reports the management tools and the embedding API answer with: the exposure's
  mode, a toolset described, the equipped toolset with each tool's state and what the
  listed tools cost a client (`active_report`), the tools each server offers
  (`available`), a compound tool and its subtools (`compound_report`).

Nothing here changes state or waits; the changes are in `mcpvisor.menu.operations`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from mcpvisor.actors.core.catalog import assign_names
from mcpvisor.actors.core.model import Toolset
from mcpvisor.actors.core.pins import estimate_tokens, one_line
from mcpvisor.actors.core.toolsets import (
    EXPOSED,
    MISSING,
    PENDING,
    REFUSED,
    SCHEMA_CHANGED,
    Catalog,
    ToolsetError,
    ToolsetExposure,
    full_list,
)
from mcpvisor.state import StateStore

if TYPE_CHECKING:
    from mcpvisor.actors.core.compound import CompoundTool
    from mcpvisor.actors.core.registry import RegistryCore
    from mcpvisor.actors.router import Router
    from mcpvisor.actors.upstream import Upstream, UpstreamStatus


class MenuBackend(Protocol):
    """What the management tools need from the supervisor."""

    router: Router
    store: StateStore

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        """The upstream actors by server name (read-only here: the supervisor owns them)."""

    def status(self) -> list[UpstreamStatus]: ...


class MenuReports:
    """The read side of the management tools over a supervisor's router (see the module)."""

    def __init__(self, backend: MenuBackend) -> None:
        self.backend = backend

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

    # --- reports -------------------------------------------------------------------------
    def _mode(self) -> dict[str, Any]:
        ex = self.exposure
        return {"exposure": ex.mode, "configurationMode": ex.configuring,
                "equipped": ex.equipped.name if ex.equipped else None,
                "visibleTools": self.core.snapshot.exposed_names()}

    @staticmethod
    def _describe(ts: Toolset) -> dict[str, Any]:
        return {"name": ts.name, "description": ts.description, "readOnly": ts.read_only,
                "toolCount": len(ts.tools), "createdAt": ts.created_at or None,
                "updatedAt": ts.updated_at or None,
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
        counts = {k: sum(1 for s in statuses if s.state == k)
                  for k in (EXPOSED, SCHEMA_CHANGED, REFUSED, PENDING, MISSING)}
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
            "problems": _about(snapshot.problems, tools),
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
        compounds = [compound_report(ct) for ct in core.compound_tools()
                     if server is None or any(s.decl.server == server for s in ct.subtools)]
        return {"servers": servers, "toolCount": sum(s["toolCount"] for s in servers),
                "compoundTools": compounds}


def _about(problems: Sequence[str], tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """The problems that name a tool of the toolset (a name collision, a hidden name): the
    rest (a resource two servers list, a prompt's name) stays in get-server-status and the
    log, not in every equip answer the model reads."""
    names = {n for t in tools for n in (t["namespacedName"], t["exposedAs"]) if n}
    return [p for p in problems if any(name in p for name in names)]


def compound_report(ct: CompoundTool) -> dict[str, Any]:
    """A compound tool and its subtools' state, for list-available-tools and get-server-status."""
    return {"namespacedName": ct.name, "name": ct.name, "description": one_line(ct.decl.description),
            "subtools": [{"server": s.decl.server, "tool": s.decl.tool, "available": s.available,
                          "reason": s.reason} for s in ct.subtools],
            "unavailable": [s.decl.key for s in ct.unavailable()]}
