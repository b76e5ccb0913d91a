"""``discover_tool`` and ``load_mcp``: the proxy-answered half of lazy discovery.

(``use_tool`` is answered by the front, `mcpvisor.actors.fronts.tools.ToolCalls`, so it routes exactly as a
direct call; the catalog and the lookups are `mcpvisor.actors.core.discovery`.)

Each answers readable text plus the same data as ``structuredContent``; a failure is an
``isError`` result that says what exists instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcpvisor.actors import wire
from mcpvisor.actors.core.discovery import DISCOVER_TOOL, LOAD_MCP, describe_tool, match_servers, one_line
from mcpvisor.actors.lazy import LoadFailed
from mcpvisor.menu.checks import ok

if TYPE_CHECKING:
    from mcpvisor.actors.core.catalog import Snapshot
    from mcpvisor.actors.lazy import LazyLoader


def _error(tool: str, text: str, **data: Any) -> dict[str, Any]:
    return wire.tool_error_result(text, {"tool": tool, **data})


def discover(snapshot: Snapshot, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``discover_tool {tool_name}`` (the tool's full definition) or ``{query}`` (best matches)."""
    index = snapshot.discovery
    if index is None:
        return _error(DISCOVER_TOOL, "discover_tool exists only with settings.exposure 'discovery'.",
                      error="not_discovery")
    extra = [k for k in arguments if k not in ("tool_name", "query")]
    tool_name, query = arguments.get("tool_name"), arguments.get("query")
    if extra or (tool_name is None) == (query is None) or not isinstance(tool_name or query, str):
        return _error(DISCOVER_TOOL, 'discover_tool takes exactly one of {"tool_name": NAME} or '
                      '{"query": "a few words"}.', error="invalid_arguments")
    if query is not None:
        matches = index.search(str(query))
        servers = match_servers(str(query), index.lazy)
        data = {"query": query, "matches": [{"name": m.name, "server": m.server, "description": m.description,
                                             "score": m.score} for m in matches],
                "notLoaded": [{"name": s.name, "description": s.description} for s in servers]}
        lines = [f"{len(matches)} best matches for {query!r} (describe one with {{\"tool_name\": NAME}}):"
                 if matches else f"No loaded tool matches {query!r}."]
        lines += [f"- {m.name} ({m.server})" + (f": {m.description}" if m.description else "")
                  for m in matches]
        if servers:
            lines.append('Servers not loaded yet that match (load one with load_mcp {"mcp_name": NAME}):')
            lines += [f"- {s.name}: {one_line(s.description)}" for s in servers]
        return ok("\n".join(lines), data)
    name = index.exposed_name(str(tool_name), snapshot)
    if name is None:
        owner = index.lazy_owner(str(tool_name))
        close = index.close_matches(str(tool_name))
        text = f"Unknown tool {tool_name!r}."
        if owner is not None:
            text += f" It may belong to {owner.name}, which is not loaded yet: load_mcp {{\"mcp_name\": " \
                    f"\"{owner.name}\"}}."
        if close:
            text += " Did you mean: " + ", ".join(close) + "?"
        return _error(DISCOVER_TOOL, text, error="unknown_tool", toolName=tool_name, didYouMean=close,
                      notLoaded=[owner.name] if owner is not None else [])
    route = snapshot.tools.get(name)
    if route is not None:
        data = describe_tool(route.wire, route.server)
    else:
        data = describe_tool(snapshot.local_tools[name], None)
    text = wire.encode(data).decode()
    how = f'call it with use_tool {{"tool_name": "{name}", "arguments": {{...}}}}'
    return ok(f"{name}: {how}.\n{text}", data)


async def load_mcp(loader: LazyLoader | None, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``load_mcp {mcp_name}``: start a lazy server (coalesced; see `mcpvisor.actors.lazy`)."""
    name = arguments.get("mcp_name")
    if loader is None or not isinstance(name, str) or not name or set(arguments) - {"mcp_name"}:
        return _error(LOAD_MCP, 'load_mcp takes {"mcp_name": NAME}, a server from discover_tool\'s '
                      "<mcp_servers> block.", error="invalid_arguments")
    if not loader.is_lazy(name):
        offered = [s.name for s in loader.not_loaded()]
        return _error(LOAD_MCP, f"No server to load named {name!r}. Servers not loaded yet: "
                      f"{', '.join(offered) or 'none'}.", error="unknown_server", servers=offered)
    try:
        loaded = await loader.load(name)
    except LoadFailed as exc:
        return _error(LOAD_MCP, str(exc), error="load_failed", server=name, failures=exc.failures,
                      givenUp=exc.given_up)
    verb = "Loaded" if loaded.started else "Already loaded:"
    return ok(f"{verb} {name} ({loaded.tool_count} tools). Its tools are now in discover_tool's catalog.",
              {"server": name, "loaded": True, "started": loaded.started, "toolCount": loaded.tool_count})
