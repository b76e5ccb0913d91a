"""``use_tool {tool_name, arguments}``: what a call means before anything is sent (sans-IO).

Owns:

* `plan_use`: from use_tool's arguments and the current snapshot, one of `CallRoute`
  (an upstream tool, its arguments checked against its input schema), `CallLocal` (a
  management tool), `NeedsLoad` (the name belongs to a lazy server not loaded yet), or
  a ``CallToolResult`` with ``isError`` (unknown tool with close matches, bad arguments
  naming the field). The front's SDK path, the fast path and the embedding API all use
  it, so they refuse and route alike.
* `check_arguments`: a tool's arguments against its input schema (`mcpvisor.actors.core.arguments`,
  the checker compound tools share), the error worded for use_tool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcpvisor.actors import wire
from mcpvisor.actors.core.arguments import checker_of
from mcpvisor.actors.core.catalog import Snapshot, ToolRoute
from mcpvisor.actors.core.discovery import USE_TOOL, lazy_owner

logger = logging.getLogger(__name__)

USE_TOOL_KEYS: Final = ("tool_name", "arguments")


@dataclass(frozen=True, slots=True)
class CallRoute:
    route: ToolRoute
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallLocal:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NeedsLoad:
    server: str
    tool_name: str


def check_arguments(tool: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """None when ``arguments`` satisfy ``tool``'s ``inputSchema``; else what is wrong,
    naming the field (``arguments.path: 'x' is not of type 'integer'``).

    A schema that is itself invalid is not held against the caller: the upstream decides.
    """
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping):
        return None
    checker = checker_of(schema)
    if checker is None:
        return None
    try:
        error = checker.first_error(arguments)
    except Exception:  # the validator itself failed (an unresolvable $ref ...): the upstream decides
        logger.debug("cannot check arguments against %r", schema, exc_info=True)
        return None
    if error is None:
        return None
    where = "arguments" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where}: {error.message}"


def _error(text: str, **data: Any) -> dict[str, Any]:
    return wire.tool_error_result(text, {"tool": USE_TOOL, **data})


def plan_use(snapshot: Snapshot, arguments: Any) -> CallRoute | CallLocal | NeedsLoad | dict[str, Any]:
    """What ``use_tool`` with ``arguments`` does now; a dict is the ``isError`` answer."""
    index = snapshot.discovery
    if not isinstance(arguments, Mapping):
        return _error('use_tool takes {"tool_name": NAME, "arguments": {...}}.', error="invalid_arguments")
    extra = [k for k in arguments if k not in USE_TOOL_KEYS]
    tool_name = arguments.get("tool_name")
    if extra or not isinstance(tool_name, str) or not tool_name:
        why = (f"unknown argument(s) {', '.join(map(repr, extra))}" if extra
               else "'tool_name' must be a non-empty string")
        return _error(f"use_tool: {why}; it takes tool_name and arguments.", error="invalid_arguments")
    args = arguments.get("arguments")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        return _error(f"use_tool: 'arguments' must be an object (the arguments of {tool_name}).",
                      error="invalid_arguments")
    name = index.exposed_name(tool_name, snapshot) if index is not None else (
        tool_name if tool_name in snapshot.tools else None)
    if name is None:
        owner = lazy_owner(tool_name, (*index.lazy, *index.unavailable)) if index is not None else None
        if owner is not None:
            return NeedsLoad(owner.name, tool_name)
        close = index.close_matches(tool_name) if index is not None else []
        text = f"Unknown tool {tool_name!r}."
        text += (" Did you mean: " + ", ".join(close) + "?") if close else " Find tools with discover_tool."
        return _error(text, error="unknown_tool", toolName=tool_name, didYouMean=close)
    route = snapshot.tools.get(name)
    if route is None:
        return CallLocal(name, dict(args))
    problem = check_arguments(route.wire, args)
    if problem is not None:
        return _error(f"Invalid arguments for {name}: {problem}. Nothing was sent; see its input schema with "
                      f"discover_tool {{\"tool_name\": \"{name}\"}}.", error="invalid_arguments",
                      toolName=name, problem=problem)
    return CallRoute(route, dict(args))
