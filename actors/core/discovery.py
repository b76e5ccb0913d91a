"""Lazy discovery (``settings.exposure: "discovery"``): three tools instead of three hundred (sans-IO).

Owns, as plain synchronous code (docs/style.md rule 2):

* `LazyBook`: the lazy servers (``"lazy": true``) and what became of their loads:
  loaded, or failed how many times and why; after `MAX_LOAD_FAILURES` a server is no
  longer offered. The router holds it; `mcpvisor.actors.lazy.LazyLoader` feeds it.
* `DiscoveryExposure`-side view (`discovery_view`): turns the snapshot the toolset
  exposure built (routes for every selected tool) into what a discovery client sees:
  ``tools/list`` holds only `DISCOVER_TOOL`, `USE_TOOL` and (while a lazy server can
  still be loaded) `LOAD_MCP`; every route stays in place so `USE_TOOL` (and a direct
  call) reach a tool exactly as a listed one; the management tools stay callable.
* The catalog text in `DISCOVER_TOOL`'s description (tools grouped by server, then an
  ``<mcp_servers>`` block of lazy servers not loaded yet), shrunk to servers and counts
  beyond ``settings.discoveryBudget`` bytes.
* `DiscoveryIndex`: lookup by exposed or namespaced name, and `search` ranking for
  ``discover_tool {query}`` over names, descriptions and server descriptions.

Tool names and arguments are dynmcp's (docs/design.md "Exposure modes"): prompts written
for it name ``discover_tool {tool_name}``, ``use_tool {tool_name, arguments}`` and
``load_mcp {mcp_name}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor.actors.core.catalog import Snapshot, ToolRoute, close_names, flatten

if TYPE_CHECKING:
    from mcpvisor.actors.core.registry import RegistryCore

DISCOVER_TOOL: Final = "discover_tool"
USE_TOOL: Final = "use_tool"
LOAD_MCP: Final = "load_mcp"
DISCOVERY_TOOLS: Final = (DISCOVER_TOOL, USE_TOOL, LOAD_MCP)

MAX_LOAD_FAILURES: Final = 3
"""Failed loads after which a lazy server is no longer offered (the issue; dynmcp gives up
likewise rather than letting a model retry a broken server forever)."""

SEARCH_RESULTS: Final = 8
"""Matches ``discover_tool {query}`` returns: enough to choose from, few enough to read
(a tool's full schema comes with ``{tool_name}``)."""


LAZY_BLOCK_BYTES: Final = 1200
"""Most bytes the ``<mcp_servers>`` block lists servers in; the rest are counted and found
by ``discover_tool {query}``. The issue's target is a start-up ``tools/list`` under 3 KB
whatever the number of servers: the three definitions and the head take ~1.6 KB."""

LINE_CHARS: Final = 100
"""A tool's one-line description in the catalog is clipped to this many characters."""

_WORD: Final = re.compile(r"[a-z0-9]+")

STOP_WORDS: Final = frozenset(
    "a an the of to for and or in on at by with from into is are it its my me i this that "
    "some please".split())
"""Query words that say nothing about a tool ("slugify *a* title"): left out of a search,
since as substrings they would match almost every name and description."""

# Scores of one query word against one tool (`DiscoveryIndex.search`): a whole word of the
# name counts most, then part of the name, then the description, then the server.
_SCORE_NAME_WORD: Final = 4
_SCORE_NAME_PART: Final = 2
_SCORE_DESCRIPTION: Final = 1
_SCORE_SERVER: Final = 1


# --------------------------------------------------------------------------------------
# lazy servers and their loads
# --------------------------------------------------------------------------------------


class LazyServer(msgspec.Struct, frozen=True):
    """One ``"lazy": true`` server and its loads so far."""

    name: str
    description: str | None = None
    loaded: bool = False
    failures: int = 0
    last_error: str | None = None

    @property
    def given_up(self) -> bool:
        return not self.loaded and self.failures >= MAX_LOAD_FAILURES


class LazyBook(msgspec.Struct):
    """The lazy servers, by name; mutate only inside the router (`mcpvisor.actors.lazy`)."""

    servers: dict[str, LazyServer] = msgspec.field(default_factory=dict)

    @classmethod
    def of(cls, lazy: Mapping[str, str | None]) -> LazyBook:
        """A book of the servers ``lazy`` names (name -> config ``description``), none loaded."""
        return cls({name: LazyServer(name, desc) for name, desc in lazy.items()})

    def get(self, name: str) -> LazyServer | None:
        return self.servers.get(name)

    def loaded(self, name: str) -> None:
        """``name`` started: it stays loaded for the life of the proxy."""
        s = self.servers.get(name)
        if s is not None:
            self.servers[name] = msgspec.structs.replace(s, loaded=True)

    def failed(self, name: str, error: str) -> LazyServer | None:
        """A load of ``name`` failed with ``error``; returns the server's record after it."""
        s = self.servers.get(name)
        if s is None:
            return None
        s = msgspec.structs.replace(s, failures=s.failures + 1, last_error=error)
        self.servers[name] = s
        return s

    def offered(self, core: RegistryCore) -> list[LazyServer]:
        """Lazy servers a client may still load, in config order: not loaded (no lists in
        the catalog either) and not given up."""
        out = []
        for name in core.order:
            s = self.servers.get(name)
            if s is not None and not s.loaded and not s.given_up and name not in core.lists:
                out.append(s)
        return out

    def unloaded(self, core: RegistryCore) -> tuple[LazyServer, ...]:
        """Lazy servers not loaded (no lists in the catalog either), given up on or not: a
        first use of a given-up one is answered with its last error, not "unknown tool"."""
        return tuple(s for s in self.servers.values() if not s.loaded and s.name not in core.lists)

    def reconfigure(self, lazy: Mapping[str, str | None]) -> None:
        """A reload: keep what is known of servers still lazy, forget the others."""
        self.servers = {name: msgspec.structs.replace(self.servers[name], description=desc)
                        if name in self.servers else LazyServer(name, desc) for name, desc in lazy.items()}


# --------------------------------------------------------------------------------------
# the index discover_tool and use_tool read
# --------------------------------------------------------------------------------------


class Match(msgspec.Struct, frozen=True):
    """A tool ``discover_tool {query}`` found, with its score (higher is better)."""

    name: str
    server: str
    description: str
    score: int


class DiscoveryIndex(msgspec.Struct, frozen=True):
    """What discovery offers now (part of the `Snapshot`, so as immutable as it)."""

    routes: tuple[ToolRoute, ...] = ()
    """Every tool use_tool may call, in catalog order (config order of servers)."""
    by_namespaced: Mapping[str, str] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    """``server.tool`` -> exposed name, so either name finds a tool."""
    server_descriptions: Mapping[str, str] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    lazy: tuple[LazyServer, ...] = ()
    """Lazy servers that can still be loaded."""
    unavailable: tuple[LazyServer, ...] = ()
    """Lazy servers given up on after `MAX_LOAD_FAILURES` failed loads."""
    management: tuple[str, ...] = ()
    """Management tools reachable through use_tool (or a direct call)."""

    def exposed_name(self, name: str, snapshot: Snapshot) -> str | None:
        """The exposed name ``name`` (exposed or ``server.tool``) stands for, if any."""
        if name in snapshot.tools or name in self.management:
            return name
        return self.by_namespaced.get(name)

    def close_matches(self, name: str) -> list[str]:
        return close_names(name, [r.exposed for r in self.routes] + list(self.management))

    def lazy_owner(self, name: str) -> LazyServer | None:
        """The lazy server not loaded yet whose tools would be named like ``name``."""
        return lazy_owner(name, self.lazy)

    def search(self, query: str, limit: int = SEARCH_RESULTS) -> list[Match]:
        """The tools best matching ``query`` (a few words), best first.

        Each query word (`STOP_WORDS` left out) scores against each tool's name (a whole
        word of it counts most, then any part), and against the start of a word of its
        description and of its server's name and description; ties keep catalog order.
        """
        words = query_words(query)
        if not words:
            return []
        scored: list[tuple[int, int, ToolRoute]] = []
        for pos, route in enumerate(self.routes):
            name_words = set(_WORD.findall(route.exposed.lower()))
            name = route.exposed.lower()
            desc = _WORD.findall(str(route.wire.get("description") or "").lower())
            server = _WORD.findall(f"{route.server} {self.server_descriptions.get(route.server, '')}".lower())
            score = 0
            for w in words:
                if w in name_words:
                    score += _SCORE_NAME_WORD
                elif w in name:
                    score += _SCORE_NAME_PART
                if _starts_a_word(w, desc):
                    score += _SCORE_DESCRIPTION
                if _starts_a_word(w, server):
                    score += _SCORE_SERVER
            if score:
                scored.append((-score, pos, route))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [Match(r.exposed, r.server, one_line(r.wire.get("description")), -s)
                for s, _, r in scored[:limit]]


def match_servers(query: str, servers: Sequence[LazyServer]) -> list[LazyServer]:
    """The servers of ``servers`` with a word of name or description that starts with a word
    of ``query`` (`STOP_WORDS` left out)."""
    words = query_words(query)
    return [s for s in servers
            if any(_starts_a_word(w, _WORD.findall(f"{s.name} {s.description or ''}".lower()))
                   for w in words)]


def query_words(query: str) -> list[str]:
    """The words of a search query that can tell tools apart: lower case, no `STOP_WORDS`."""
    return [w for w in _WORD.findall(query.lower()) if w not in STOP_WORDS]


def _starts_a_word(word: str, words: Sequence[str]) -> bool:
    """Whether some word of ``words`` starts with ``word`` ("slug" finds "slugify")."""
    return any(w.startswith(word) for w in words)


def lazy_owner(name: str, servers: Sequence[LazyServer]) -> LazyServer | None:
    """The server of ``servers`` whose tools would be named like ``name`` (``big_search``
    or ``big.search`` -> ``big``; the longest server name wins), so a first use can load it."""
    best: LazyServer | None = None
    for s in servers:
        named = name.startswith((f"{flatten(s.name)}_", f"{s.name}."))
        if named and (best is None or len(s.name) > len(best.name)):
            best = s
    return best


def one_line(text: Any, limit: int = LINE_CHARS) -> str:
    """The first line of a description, clipped."""
    lines = str(text or "").strip().splitlines()
    first = lines[0].strip() if lines else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# the three tools
# --------------------------------------------------------------------------------------


def _definitions() -> dict[str, dict[str, Any]]:
    return {
        DISCOVER_TOOL: {
            "name": DISCOVER_TOOL,
            "description": "",  # the catalog, filled in by discovery_view
            "inputSchema": {
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string",
                                  "description": "A tool's name from the catalog: returns its full "
                                                 "description and input schema."},
                    "query": {"type": "string",
                              "description": "Instead of tool_name: a few words; returns the "
                                             "best-matching tools."},
                },
            },
            "annotations": {"readOnlyHint": True, "idempotentHint": True},
        },
        USE_TOOL: {
            "name": USE_TOOL,
            "description": "Call a tool from discover_tool's catalog. The arguments are checked against the "
                           "tool's input schema before anything is sent; the result is the tool's own.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string",
                                  "description": "The tool's name as the catalog gives it."},
                    "arguments": {"type": "object", "description": "The tool's arguments."},
                },
                "required": ["tool_name"],
            },
        },
        LOAD_MCP: {
            "name": LOAD_MCP,
            "description": "Start one of the servers listed in discover_tool's <mcp_servers> block; its "
                           "tools then appear in the catalog (the tools list changes).",
            "inputSchema": {
                "type": "object",
                "properties": {"mcp_name": {"type": "string", "description": "The server's name."}},
                "required": ["mcp_name"],
            },
        },
    }


DEFINITIONS: Final = MappingProxyType(_definitions())
"""The three tools as listed (`DISCOVER_TOOL`'s description is the catalog, per snapshot)."""

_HEAD: Final = ("Find the tool you need, then call it with use_tool. Pass {\"tool_name\": NAME} for a tool's "
                "full description and input schema, or {\"query\": \"a few words\"} for the best matches.")


def _servers_block(lazy: Sequence[LazyServer], budget: int) -> list[str]:
    if not lazy:
        return []
    lines = ["", "<mcp_servers>",
             'Servers not loaded yet; load one with load_mcp {"mcp_name": NAME}, then its tools appear here:']
    used = 0
    for i, s in enumerate(lazy):
        line = f"- {s.name}: {one_line(s.description) or '(no description)'}"
        used += len(line.encode()) + 1
        if used > budget:
            more = len(lazy) - i
            lines.append(f'- ... and {more} more servers; find them with discover_tool {{"query": ...}}')
            break
        lines.append(line)
    lines.append("</mcp_servers>")
    return lines


def catalog_text(index: DiscoveryIndex, order: Sequence[str], budget: int) -> str:
    """``discover_tool``'s description: the catalog, within ``budget`` bytes where it can.

    Every tool with a one-line description, grouped by server; when that exceeds the
    budget, servers and tool counts instead, with the advice to search; the
    ``<mcp_servers>`` block of lazy servers follows either way.
    """
    groups: dict[str, list[ToolRoute]] = {}
    for r in index.routes:
        groups.setdefault(r.server, []).append(r)
    servers = [s for s in order if s in groups] + [s for s in groups if s not in order]
    tail = _servers_block(index.lazy, min(LAZY_BLOCK_BYTES, budget // 2))
    if index.management:
        tail += ["", "Management tools (call them with use_tool too): " + ", ".join(index.management)]
    full = [_HEAD]
    for s in servers:
        desc = index.server_descriptions.get(s)
        full.append(f"\n## {s}" + (f" — {one_line(desc)}" if desc else ""))
        for r in groups[s]:
            d = one_line(r.wire.get("description"))
            full.append(f"- {r.exposed}" + (f": {d}" if d else ""))
    text = "\n".join(full + tail)
    if len(text.encode()) <= budget:
        return text
    count = sum(len(g) for g in groups.values())
    short = [_HEAD, f"\n{count} tools on {len(servers)} servers; too many to list here, so search them with "
                    '{"query": "a few words"}:']
    for s in servers:
        desc = index.server_descriptions.get(s)
        short.append(f"- {s}: {len(groups[s])} tools" + (f" — {one_line(desc)}" if desc else ""))
    return "\n".join(short + tail)


def discovery_view(snapshot: Snapshot, core: RegistryCore, book: LazyBook | None, budget: int,
                   descriptions: Mapping[str, str] | None = None) -> Snapshot:
    """What a discovery client sees, from the snapshot the toolset exposure built.

    Routes stay (use_tool and direct calls find every selected tool); ``tools/list`` is
    `DISCOVER_TOOL` (its description the catalog), `USE_TOOL`, and `LOAD_MCP` while a
    lazy server can be loaded; the management tools stay in ``local_tools`` (callable,
    not listed). Pure: the same inputs give an equal snapshot, so a change that does not
    alter the catalog announces nothing.
    """
    routes = tuple(snapshot.tools.values())
    by_ns: dict[str, str] = {}
    for r in routes:
        by_ns.setdefault(f"{r.server}.{r.original}", r.exposed)
    offered = tuple(book.offered(core)) if book is not None else ()
    unavailable = tuple(s for s in book.servers.values() if s.given_up) if book is not None else ()
    management = tuple(n for n in snapshot.local_tools if n not in DISCOVERY_TOOLS)
    index = DiscoveryIndex(routes, MappingProxyType(by_ns), MappingProxyType(dict(descriptions or {})),
                           offered, unavailable, management)
    discover = {**DEFINITIONS[DISCOVER_TOOL], "description": catalog_text(index, core.order, budget)}
    listed: list[Mapping[str, Any]] = [discover, DEFINITIONS[USE_TOOL]]
    if offered:
        listed.append(DEFINITIONS[LOAD_MCP])
    local = {**snapshot.local_tools, DISCOVER_TOOL: discover, USE_TOOL: DEFINITIONS[USE_TOOL],
             LOAD_MCP: DEFINITIONS[LOAD_MCP]}
    return msgspec.structs.replace(snapshot, tools_list=tuple(listed), local_tools=MappingProxyType(local),
                               discovery=index)


def describe_tool(route_wire: Mapping[str, Any], server: str | None) -> dict[str, Any]:
    """``discover_tool {tool_name}``'s data: the tool's full definition, as clients list it."""
    keys = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
    out = {k: route_wire[k] for k in keys if k in route_wire}
    if server is not None:
        out["server"] = server
    return out


def size_of(tools: Sequence[Mapping[str, Any]]) -> int:
    """Bytes of a ``tools/list`` result's tools as JSON (what the bench reports)."""
    return len(json.dumps({"tools": list(tools)}, separators=(",", ":")).encode())
