"""Making a saved toolset: one set of rules for every way of making one.

``mcpvisor toolset create`` (the CLI, `mcpvisor.cli.toolset`) and the ``build-toolset``
management tool (`mcpvisor.menu.operations`) both make a toolset through these
functions, so a name, a tool list or an alias refused by one is refused by the other
with the same words:

1. `check_new_toolset`: every rule that needs no tools, at once (the name, the
   description, a name the config file declares, the list's shape and size, each
   entry's shape and alias) -> the tools asked for (`Wanted`);
2. `resolve_all`: each `Wanted` to a `ToolEntry` by the caller's own lookup (the CLI
   asks the servers, the management tool its running catalog), every problem at once,
   the same tool twice refused; `unknown_server` and `unknown_tool` are the lookups'
   refusals;
3. `new_toolset`: the `Toolset` to save.

Each step raises `ToolsetError` (its ``message`` the sentence a user reads) before
anything is saved.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

import msgspec

from mcpvisor._config_types import NAME_RE, NAME_RULE
from mcpvisor.actors.core.model import ToolEntry, Toolset
from mcpvisor.actors.core.toolsets import MANAGEMENT_TOOLS, ToolsetError
from mcpvisor.state import now_iso

MAX_TOOLS_PER_TOOLSET: Final = 500
"""More is not a toolset; HyperTool caps at 100, a catalog of 20 servers has ~500."""

NAME_HELP: Final = NAME_RULE.split(" (")[0]
"""The naming rule for toolsets and aliases, as error messages and tool schemas say it."""

ENTRY_KEYS: Final = ("namespacedName", "refId", "alias")
"""What one entry of a new toolset's tool list may say."""


class Wanted(msgspec.Struct, frozen=True):
    """One tool a new toolset asks for, its shape checked: exactly one of
    ``namespaced_name`` (``server.tool``, or a compound tool's bare name) and ``ref_id``,
    and maybe an ``alias``."""

    index: int
    namespaced_name: str | None
    ref_id: str | None
    alias: str | None

    @property
    def server(self) -> str | None:
        return self.namespaced_name.partition(".")[0] if self.namespaced_name else None


def check_name(name: Any, what: str = "toolset name") -> None:
    """Refuse a toolset (or alias) name outside the naming rule."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolsetError("invalid_name", f"Invalid {what} {name!r}: {NAME_HELP}.", rule=NAME_HELP)


def check_new_toolset(name: Any, tools: Any, *, description: Any = None,
                      declared: Collection[str] = (), known: Sequence[str] = ()) -> list[Wanted]:
    """Every rule of a new toolset that needs no tool looked up; the tools it asks for.

    Args:
        name: the toolset's name.
        tools: its entries, each ``{namespacedName | refId, alias?}``.
        description: its description (a string, or None).
        declared: the toolsets the config file declares (their names are read-only).
        known: every toolset name there is, to say what exists when refusing one.

    Raises:
        ToolsetError: the first rule broken; for the entries, every broken one at once.
    """
    check_name(name)
    if description is not None and not isinstance(description, str):
        raise ToolsetError("invalid_arguments", "'description' must be a string.")
    if name in declared:
        raise ToolsetError("read_only", f"{name!r} is declared in the config file (read-only); choose "
                           "another name.", toolsets=list(known))
    if not isinstance(tools, list) or not tools:
        raise ToolsetError("invalid_arguments",
                           "'tools' must be a non-empty array of {namespacedName} or {refId} objects.")
    if len(tools) > MAX_TOOLS_PER_TOOLSET:
        raise ToolsetError("invalid_arguments", f"A toolset holds at most {MAX_TOOLS_PER_TOOLSET} tools; "
                           f"this one has {len(tools)}.")
    wanted: list[Wanted] = []
    problems: list[str] = []
    for i, item in enumerate(tools):
        try:
            wanted.append(_wanted(i, item))
        except ToolsetError as exc:
            problems.append(f"tools[{i}]: {exc.message}")
    if problems:
        raise ToolsetError("invalid_arguments", "The toolset was not saved:\n" + "\n".join(problems),
                           problems=problems)
    return wanted


def _wanted(index: int, item: Any) -> Wanted:
    if not isinstance(item, Mapping):
        raise ToolsetError("invalid_arguments", "expected an object such as {namespacedName: 'server.tool'}")
    extra = [k for k in item if k not in ENTRY_KEYS]
    if extra:
        raise ToolsetError("invalid_arguments",
                           f"unknown key(s) {', '.join(extra)} ({', '.join(ENTRY_KEYS)})")
    nn, rid, alias = item.get("namespacedName"), item.get("refId"), item.get("alias")
    if (nn is None) == (rid is None) or not isinstance(nn if rid is None else rid, str):
        raise ToolsetError("invalid_arguments", "give exactly one of namespacedName or refId, as a string")
    if alias is not None:
        if not isinstance(alias, str) or not NAME_RE.match(alias):
            raise ToolsetError("invalid_name", f"invalid alias {alias!r}: {NAME_HELP}")
        if alias in MANAGEMENT_TOOLS:
            raise ToolsetError("invalid_name", f"alias {alias!r} is the name of a management tool")
    return Wanted(index, nn, rid, alias)


def require_namespaced(wanted: Wanted) -> str:
    """``wanted``'s server: refused unless its name reads ``server.tool`` (a bare name is
    only a compound tool's, found by name before this is asked)."""
    server, dot, tool = (wanted.namespaced_name or "").partition(".")
    if not (server and dot and tool):
        raise ToolsetError("invalid_arguments", f"{wanted.namespaced_name!r} is not a namespaced name "
                           "(server.tool)")
    return server


def unknown_server(wanted: Wanted, servers: Sequence[str]) -> ToolsetError:
    """The refusal of a tool whose server is not configured."""
    return ToolsetError("unknown_tool", f"unknown tool {wanted.namespaced_name!r} "
                        f"(no server {wanted.server!r}; servers: {', '.join(servers) or 'none'})")


def unknown_tool(wanted: Wanted, close: Sequence[str]) -> ToolsetError:
    """The refusal of a tool its (configured) server does not have, with close matches."""
    return ToolsetError("unknown_tool", f"unknown tool {wanted.namespaced_name!r}"
                        + (f"; did you mean {', '.join(close)}?" if close else ""), didYouMean=list(close))


def resolve_all(wanted: Sequence[Wanted], resolve: Callable[[Wanted], ToolEntry]) -> list[ToolEntry]:
    """Each tool asked for, as ``resolve`` finds it; every problem at once.

    ``resolve`` raises `ToolsetError` for a tool it cannot find (``didYouMean`` in its
    data: close matches). The same tool under the same alias twice is refused.
    """
    problems: list[str] = []
    suggestions: list[str] = []
    unknown = False
    entries: list[ToolEntry] = []
    seen: set[tuple[str, str | None]] = set()
    for w in wanted:
        try:
            entry = resolve(w)
        except ToolsetError as exc:
            problems.append(f"tools[{w.index}]: {exc.message}")
            suggestions += exc.data.get("didYouMean", ())
            unknown = unknown or exc.code == "unknown_tool"
            continue
        key = (entry.namespaced_name, entry.alias)
        if key in seen:
            problems.append(f"tools[{w.index}]: {entry.namespaced_name} is listed twice")
            continue
        seen.add(key)
        entries.append(entry)
    if problems:
        raise ToolsetError("unknown_tool" if unknown else "invalid_arguments",
                           "The toolset was not saved:\n" + "\n".join(problems),
                           problems=problems, didYouMean=sorted(set(suggestions)))
    return entries


def new_toolset(name: str, entries: Sequence[ToolEntry], description: str | None) -> Toolset:
    """The toolset to save, stamped now."""
    now = now_iso()
    return Toolset(name=name, tools=tuple(entries), description=description, created_at=now, updated_at=now)
