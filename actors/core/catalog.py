"""What the upstreams offer, the names clients see, and the immutable snapshot the hot path reads.

Owns (sans-IO, no trio):

* `UpstreamLists`: one server's discovered tools, resources, templates and prompts,
  as wire dicts exactly as the server sent them.
* Naming: namespaced names (``server.tool``), flattened exposed names
  (``context7.resolve-library-id`` -> ``context7_resolve_library_id``), the 64-character
  cap with a stable hash suffix, collisions resolved deterministically and reported.
* `Snapshot`: a frozen view (exposed name -> route, the ``tools/list`` payload, prompt
  and resource routing) published by the router after every change. A tool call reads
  the current snapshot and goes straight to its upstream: no lock, no queue.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from mcpvisor.actors.core.compound import CompoundTool
    from mcpvisor.actors.core.discovery import DiscoveryIndex, LazyServer

MAX_NAME: Final = 64
"""Longest exposed name. MCP allows 128, but Claude Code and the OpenAI/Anthropic tool APIs
accept ``^[a-zA-Z0-9_-]{1,64}$``; HyperTool keeps to the same."""

HASH_LEN: Final = 6
"""Hex digits of the stable suffix that disambiguates or shortens a name."""

_FLATTEN: Final = re.compile(r"[^A-Za-z0-9_]")
_BARE: Final = re.compile(r"[^A-Za-z0-9_-]")

CLOSE_MATCHES: Final = 5
"""Suggestions offered for an unknown name (difflib's default count is 3; tool names are
similar to each other, so a few more help)."""
CLOSE_CUTOFF: Final = 0.5
"""Least difflib similarity ratio a suggestion needs (below difflib's default 0.6, so a
misspelt or differently separated name still finds its tool)."""

EMPTY_MAP: Final[Mapping[str, Any]] = MappingProxyType({})


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LEN]


def flatten(name: str) -> str:
    """Every character outside ``[A-Za-z0-9_]`` becomes ``_`` (docs/design.md, "Names")."""
    return _FLATTEN.sub("_", name)


def bare(name: str) -> str:
    """A tool's own name made safe for clients (``[A-Za-z0-9_-]``), dots and all else -> ``_``."""
    return _BARE.sub("_", name)


def fit(name: str, key: str) -> str:
    """Cap ``name`` at `MAX_NAME` characters with a stable hash of ``key`` when it is longer."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - HASH_LEN - 1]}_{short_hash(key)}"


def namespaced(server: str, tool: str) -> str:
    return f"{server}.{tool}"


def close_names(name: str, names: Iterable[str]) -> list[str]:
    """The names most like ``name``, best first: the "did you mean" of every unknown tool,
    prompt or toolset entry the proxy answers."""
    return difflib.get_close_matches(name, list(names), n=CLOSE_MATCHES, cutoff=CLOSE_CUTOFF)


def tool_hints(tool: Mapping[str, Any]) -> tuple[bool, bool]:
    """(readOnlyHint, idempotentHint) from a tool's annotations."""
    ann = tool.get("annotations")
    if not isinstance(ann, Mapping):
        return False, False
    return bool(ann.get("readOnlyHint")), bool(ann.get("idempotentHint"))


class CacheHint(msgspec.Struct, frozen=True):
    """The caching directives of a 2026-07-28 list result (``ttlMs``, ``cacheScope``).

    ``ttl_ms``: how long the list may be served from a cache before it is fetched again
    (0: immediately stale). ``scope``: ``public`` (the list is the same for everyone, so a
    shared cache may keep it) or ``private`` (it may hold what only this authorization
    may see: no cache shared with others keeps it). A handshake-era server sends neither:
    it has no hint, and its lists are cached as they always were.
    """

    ttl_ms: int
    scope: str

    @property
    def private(self) -> bool:
        return self.scope != "public"

    def join(self, other: CacheHint | None) -> CacheHint:
        """The hint of a list made of both (pages of one list, or the lists of several
        servers): the shorter ttl, and private when either part is."""
        if other is None:
            return self
        scope = "private" if self.private or other.private else "public"
        return CacheHint(min(self.ttl_ms, other.ttl_ms), scope)


class UpstreamLists(msgspec.Struct, frozen=True):
    """Everything one server listed, as wire dicts (``Tool``, ``Resource``, ``Prompt`` ...)."""

    tools: tuple[Mapping[str, Any], ...] = ()
    resources: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[Mapping[str, Any], ...] = ()
    prompts: tuple[Mapping[str, Any], ...] = ()

    def replace(self, kind: str, items: Sequence[Mapping[str, Any]]) -> UpstreamLists:
        values = {
            "tools": self.tools, "resources": self.resources, "templates": self.templates,
            "prompts": self.prompts,
        }
        values[kind] = tuple(items)
        return UpstreamLists(**values)


class ToolRoute(msgspec.Struct, frozen=True):
    """How an exposed tool name reaches its upstream."""

    exposed: str
    server: str
    original: str
    retry_safe: bool
    """The tool is annotated readOnlyHint or idempotentHint: a call may be retried once
    on a fresh process if the upstream died under it (docs/design.md "Behaviour under failure")."""
    wire: Mapping[str, Any]
    """The tool as listed to clients (exposed name, description with any user notes)."""
    compound: CompoundTool | None = None
    """Set for a compound tool (`mcpvisor.actors.core.compound`): a call is checked and routed to
    one of its subtools by ``compound.prepare``; ``server`` and ``original`` are unused."""

    def direct(self, arguments: Mapping[str, Any]) -> tuple[ToolRoute, dict[str, Any]] | dict[str, Any]:
        """The direct call a call of this tool is: (route to the upstream tool, its arguments).

        For a compound tool that is its subtool's route and ``args``; a call failing the
        compound tool's check gives the ``isError`` result to answer instead (nothing is
        sent). The call plan (`mcpvisor.actors.core.plan`) calls this for every caller.
        """
        if self.compound is None:
            return self, dict(arguments)
        sub = self.compound.prepare(arguments)
        if isinstance(sub, dict):
            return sub
        return ToolRoute(self.exposed, sub.server, sub.tool, sub.retry_safe, self.wire), sub.args


class PromptRoute(msgspec.Struct, frozen=True):
    exposed: str
    server: str
    original: str


class Candidate(msgspec.Struct, frozen=True):
    """A tool selected for exposure, before names are assigned."""

    server: str
    original: str
    tool: Mapping[str, Any]
    rename: str | None = None
    """The config's ``exposedTools`` rename: the tool's name inside its server's namespace."""
    alias: str | None = None
    """A toolset ``alias``: the exposed name outright, no prefix."""
    notes: tuple[str, ...] = ()
    compound: CompoundTool | None = None
    """A compound tool of the config's ``tools`` section: exposed under its own name
    (``original``), whatever the namespacing; ``server`` is ``""``."""

    @property
    def key(self) -> str:
        """The name toolsets use: ``server.tool``, or a compound tool's own name."""
        return self.original if self.compound is not None else namespaced(self.server, self.original)


class Snapshot(msgspec.Struct, frozen=True):
    """An immutable view of what clients see; replaced wholesale on every change."""

    version: int = 0
    tools: Mapping[str, ToolRoute] = msgspec.field(default_factory=lambda: EMPTY_MAP)
    tools_list: tuple[Mapping[str, Any], ...] = ()
    local_tools: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=lambda: EMPTY_MAP)
    """Tools the proxy answers itself (management tools), by exposed name."""
    prompts: Mapping[str, PromptRoute] = msgspec.field(default_factory=lambda: EMPTY_MAP)
    prompts_list: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, str] = msgspec.field(default_factory=lambda: EMPTY_MAP)
    """URI -> server."""
    resources_list: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[tuple[str, str], ...] = ()
    """(literal prefix, server), longest prefix first."""
    templates_list: tuple[Mapping[str, Any], ...] = ()
    template_owners: Mapping[str, str] = msgspec.field(default_factory=lambda: EMPTY_MAP)
    """URI template as listed -> the server that listed it."""
    problems: tuple[str, ...] = ()
    """Collisions and conflicts found while building, for status and logs."""
    discovery: DiscoveryIndex | None = None
    """With ``exposure: discovery``: what discover_tool and use_tool offer
    (`mcpvisor.actors.core.discovery`)."""
    unloaded: tuple[LazyServer, ...] = ()
    """Lazy servers not loaded (given up on or not): a call of a name like one of their
    tools loads the server first (`mcpvisor.actors.core.plan`)."""
    namespacing: str = "prefix"
    """``settings.namespacing`` the names were built with (which server a name belongs to)."""

    def route_resource(self, uri: str) -> str | None:
        server = self.resources.get(uri)
        if server is not None:
            return server
        for prefix, owner in self.templates:
            if uri.startswith(prefix):
                return owner
        return None

    def route_completion_ref(self, uri: str) -> str | None:
        """The server a ``ref/resource`` completion is for: the owner of the template as
        listed, else of the URI (a concrete resource, or one a template's prefix matches)."""
        owner = self.template_owners.get(uri)
        if owner is not None:
            return owner
        return self.route_resource(uri) or self.route_resource(uri.split("{", 1)[0])

    def exposed_names(self) -> list[str]:
        return [t["name"] for t in self.tools_list]

    def names_of(self, server: str) -> list[str]:
        """The exposed tool names of one server."""
        return [name for name, route in self.tools.items() if route.server == server]


class _Named(msgspec.Struct):
    name: str
    key: str
    item: Candidate


def assign_names(
    candidates: Sequence[Candidate], namespacing: str, *, kind: str = "tool"
) -> tuple[list[_Named], list[str]]:
    """Give each candidate its exposed name; resolve collisions deterministically.

    Tools and prompts are named by the same rules (docs/design.md "Prompts are namespaced and
    flattened like tools"); ``kind`` only words the problems reported.

    ``prefix``: always ``server_tool``; ``auto``: the bare name unless tools of two
    servers would share it, then those are prefixed; ``none``: bare names, a clash
    between servers is reported (and still disambiguated so nothing disappears). An
    alias is used as written. Names that still collide (``a-b`` and ``a_b`` flatten
    alike) all get a stable hash suffix of their namespaced name, so none shadows
    another, whatever the order the servers came up in.
    """
    problems: list[str] = []

    def prefixed(c: Candidate) -> str:
        return f"{flatten(c.server)}_{flatten(c.rename or c.original)}"

    def plain(c: Candidate) -> str:
        return bare(c.rename or c.original)

    owners: dict[str, set[str]] = {}
    if namespacing != "prefix":
        for c in candidates:
            # A compound tool keeps its name; under "auto" a server tool of that name gets prefixed.
            if c.alias is None and (c.compound is None or namespacing == "auto"):
                owners.setdefault(plain(c), set()).add(c.server)
        if namespacing == "none":
            for name, servers in owners.items():
                if len(servers) > 1:
                    problems.append(f"namespacing 'none': servers {', '.join(sorted(servers))} "
                                    f"all expose a {kind} named {name!r}")
    named: list[_Named] = []
    for c in candidates:
        key = c.key
        if c.alias is not None:
            name = bare(c.alias)
        elif c.compound is not None:
            name = bare(c.original)
        elif namespacing == "prefix" or (namespacing == "auto" and len(owners[plain(c)]) > 1):
            name = prefixed(c)
        else:
            name = plain(c)
        named.append(_Named(fit(name, key), key, c))
    by_name: dict[str, list[_Named]] = {}
    for n in named:
        by_name.setdefault(n.name, []).append(n)
    for name, group in by_name.items():
        if len(group) > 1:
            for g in group:
                g.name = fit(f"{name}_{short_hash(g.key)}", g.key + "#")
            problems.append(
                f"name collision: {', '.join(sorted(g.key for g in group))} all map to {name!r}; exposed as "
                + ", ".join(sorted(g.name for g in group))
            )
    return named, problems


def exposed_tool(tool: Mapping[str, Any], name: str, notes: Iterable[str] = ()) -> dict[str, Any]:
    """The wire dict clients see: the upstream's tool with the exposed name and user notes."""
    out = {k: v for k, v in tool.items() if not k.startswith("_mcpvisor")}
    out["name"] = name
    notes = list(notes)
    if notes:
        desc = out.get("description") or ""
        out["description"] = (desc + "\n\n" if desc else "") + "\n".join(f"Note: {n}" for n in notes)
    return out


def from_server(item: Mapping[str, Any], server: str) -> Mapping[str, Any]:
    """A listed resource, template or prompt whose description names its server
    (``[server] ...``, as MCP Coordinator shows it); the URI and name are untouched."""
    desc = item.get("description")
    tag = f"[{server}]"
    text = f"{tag} {desc}" if isinstance(desc, str) and desc else tag
    return {**item, "description": text}


class SnapshotBuilder(msgspec.Struct):
    """Turns the catalog plus a selection into the next `Snapshot`."""

    namespacing: str = "prefix"
    version: int = 0
    problems: list[str] = msgspec.field(default_factory=list)

    def build(
        self,
        order: Sequence[str],
        lists: Mapping[str, UpstreamLists],
        selected: Sequence[Candidate],
        local_tools: Sequence[Mapping[str, Any]] = (),
        *,
        expose_prompts: bool = True,
        expose_resources: bool = True,
    ) -> Snapshot:
        """Build a snapshot: ``selected`` tools (plus proxy-local tools first), and the
        prompts/resources of every server in ``lists`` in config ``order``."""
        self.version += 1
        named, problems = assign_names(selected, self.namespacing)
        local = {t["name"]: t for t in local_tools}
        routes: dict[str, ToolRoute] = {}
        tools_list: list[Mapping[str, Any]] = list(local.values())
        for n in named:
            if n.name in local:
                problems.append(f"{n.key} is hidden by the management tool {n.name!r}")
                continue
            c = n.item
            read_only, idempotent = tool_hints(c.tool)
            wire = exposed_tool(c.tool, n.name, c.notes)
            routes[n.name] = ToolRoute(n.name, c.server, c.original, read_only or idempotent, wire,
                                       c.compound)
            tools_list.append(wire)

        prompt_named: list[_Named] = []
        if expose_prompts:
            prompt_candidates = [
                Candidate(server, str(p.get("name", "")), p)
                for server in order
                if (ul := lists.get(server)) is not None
                for p in ul.prompts
            ]
            prompt_named, prompt_problems = assign_names(prompt_candidates, self.namespacing, kind="prompt")
            problems.extend(prompt_problems)
        prompts: dict[str, PromptRoute] = {}
        prompts_list: list[Mapping[str, Any]] = []
        for n in prompt_named:
            c = n.item
            prompts[n.name] = PromptRoute(n.name, c.server, c.original)
            prompts_list.append(from_server({**c.tool, "name": n.name}, c.server))
        resources: dict[str, str] = {}
        resources_list: list[Mapping[str, Any]] = []
        templates: list[tuple[str, str]] = []
        templates_list: list[Mapping[str, Any]] = []
        template_owners: dict[str, str] = {}
        for server in order:
            ul = lists.get(server)
            if ul is None:
                continue
            if expose_resources:
                for r in ul.resources:
                    uri = str(r.get("uri", ""))
                    owner = resources.get(uri)
                    if owner is not None:
                        problems.append(
                            f"resource {uri} is listed by {owner} and {server}; {owner} serves it")
                        continue
                    resources[uri] = server
                    resources_list.append(from_server(r, server))
                for t in ul.templates:
                    uri_template = str(t.get("uriTemplate", ""))
                    prefix = uri_template.split("{", 1)[0]
                    if any(p == prefix for p, _ in templates):
                        owner = next(s for p, s in templates if p == prefix)
                        problems.append(
                            f"template {uri_template} of {server} overlaps {owner}'s; {owner} serves it")
                        continue
                    templates.append((prefix, server))
                    templates_list.append(from_server(t, server))
                    template_owners[uri_template] = server
        templates.sort(key=lambda pair: len(pair[0]), reverse=True)
        self.problems = problems
        return Snapshot(
            version=self.version,
            tools=MappingProxyType(routes),
            tools_list=tuple(tools_list),
            local_tools=MappingProxyType(local),
            prompts=MappingProxyType(prompts),
            prompts_list=tuple(prompts_list),
            resources=MappingProxyType(resources),
            resources_list=tuple(resources_list),
            templates=tuple(templates),
            templates_list=tuple(templates_list),
            template_owners=MappingProxyType(template_owners),
            problems=tuple(problems),
            namespacing=self.namespacing,
        )
