"""The ``toolsets`` and ``tools`` (compound tools) sections of a config document.

Owns `ToolRules`: toolset declarations and their members (``"server.tool"``, or an
object with ``namespacedName`` or ``refId`` and an ``alias``), and compound tools
(MCP Coordinator's shape): their names against the management tools and the server
tools the config names, their ``subtools`` per server, duplicates and empty lists.
Whether a running server has a tool is known only at run time (a warning then).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from mcpvisor._config_check import Checker
from mcpvisor._config_schema import (
    CompoundEntry,
    SubtoolEntry,
    SubtoolServerEntry,
    ToolRefEntry,
    ToolsetEntry,
    close_match,
    convert_collecting,
    describe_type,
)
from mcpvisor._config_types import NAME_RE, NAME_RULE, Settings, ToolRef, ToolsetDecl
from mcpvisor.actors.core.spec import ServerSpec

if TYPE_CHECKING:  # imported where a `tools` section is built: it pulls in jsonschema
    from mcpvisor.actors.core.compound import CompoundDecl, SubtoolDecl


class ToolRules(Checker):
    """The ``toolsets`` and ``tools`` rules of `mcpvisor._config_build._Builder`."""

    def toolset(self, name: str, raw: Any) -> ToolsetDecl | None:
        where = f'toolset "{name}"'
        if not NAME_RE.match(name):
            self.problem("", f'toolset name "{name}" is invalid: {NAME_RULE.split(" (")[0]}')
        if isinstance(raw, list):
            raw = {"tools": raw}
        if not isinstance(raw, Mapping):
            self.problem(where, f"expected a list of tools or an object, got {describe_type(raw)}")
            return None
        before = len(self.problems)
        entry, problems, _ = convert_collecting(raw, ToolsetEntry)
        for p in problems:
            self.problem(where, p)
        if entry is None:
            return None
        refs = []
        for i, item in enumerate(entry.tools):
            ref = self.tool_ref(where, i, item)
            if ref is None:
                continue
            refs.append(ref)
            server = (ref.namespaced_name or "").partition(".")[0]
            if server and server not in self.server_names and server not in self.compound_names:
                hint = close_match(server, self.server_names)
                self.warn(where, f'tool "{ref.namespaced_name}": no server "{server}"{hint}')
        if len(self.problems) > before:
            return None
        return ToolsetDecl(name=name, tools=tuple(refs), description=entry.description)

    def tool_ref(self, where: str, i: int, item: Any) -> ToolRef | None:
        """One toolset member: `"server.tool"` or `{namespacedName | refId, alias?}`."""
        at = f'field "tools[{i}]"'
        if isinstance(item, str):
            item = {"namespacedName": item}
        if not isinstance(item, Mapping):
            self.problem(
                where, f'{at}: expected a "server.tool" string or an object, got {describe_type(item)}'
            )
            return None
        ref, problems, _ = convert_collecting(item, ToolRefEntry)
        for p in problems:
            self.problem(where, f"{at}: {p}")
        if ref is None or problems:
            return None
        if (ref.namespaced_name is UNSET) == (ref.ref_id is UNSET):
            self.problem(where, f'{at}: give exactly one of "namespacedName" or "refId"')
            return None
        if ref.namespaced_name is not UNSET:
            server, dot, tool = ref.namespaced_name.partition(".")
            if not (server and dot and tool) and ref.namespaced_name not in self.compound_names:
                self.problem(where, f'{at}: "{ref.namespaced_name}" is not a "server.tool" name')
                return None
        if ref.ref_id == "":
            self.problem(where, f'{at}: "refId" cannot be empty')
            return None
        return ToolRef(
            namespaced_name=None if ref.namespaced_name is UNSET else ref.namespaced_name,
            ref_id=None if ref.ref_id is UNSET else ref.ref_id,
            alias=None if ref.alias is UNSET else ref.alias,
        )

    def compounds(self, servers: Mapping[str, ServerSpec], settings: Settings) -> dict[str, CompoundDecl]:
        """The `tools` section: every problem named by compound tool and field.

        An unknown server, an unknown key, an empty `subtools` or tool list, and a name
        that clashes with a management tool or with a server tool the config names (its
        `exposedTools`, or a declared subtool, as the namespacing exposes it) are problems.
        Whether a running server has the tool is known only at run time (a warning then).
        """
        section = self.section("tools")
        self.compound_names = frozenset(section)
        if not section:
            return {}
        # Imported here: the toolsets module (and what it brings) is needed only to check
        # a compound tool's name, and most configs declare none.
        from mcpvisor.actors.core.toolsets import MANAGEMENT_TOOLS

        taken = self.server_tool_names(servers, settings, section)
        out: dict[str, CompoundDecl] = {}
        for name, raw in section.items():
            where = f'compound tool "{name}"'
            before = len(self.problems)
            if not NAME_RE.match(name):
                self.problem("", f'compound tool name "{name}" (in "tools") is invalid: '
                                 f'{NAME_RULE.split(" (")[0]}')
            elif name in MANAGEMENT_TOOLS:
                self.problem(where, f'the name clashes with the management tool "{name}"; choose another')
            elif name in taken:
                self.problem(where, f'the name clashes with the server tool {taken[name]} '
                                    f'(exposed as "{name}" with namespacing "{settings.namespacing}"); '
                                    'choose another')
            if not isinstance(raw, Mapping):
                self.problem(where, f'expected an object with "subtools", got {describe_type(raw)}')
                continue
            entry, problems, _ = convert_collecting(raw, CompoundEntry)
            for p in problems:
                self.problem(where, p)
            if entry is None:
                continue
            if not entry.subtools:
                self.problem(where, 'field "subtools": is empty; name at least one server and its tools, '
                                    'e.g. {"web": {"tools": [{"name": "search"}]}}')
            subs: list[SubtoolDecl] = []
            for server, sraw in entry.subtools.items():
                subs += self.subtools(where, server, sraw, servers)
            seen: set[str] = set()
            for sub in subs:
                if sub.key in seen:
                    self.problem(where, f'field "subtools.{sub.server}.tools": "{sub.tool}" is listed twice')
                seen.add(sub.key)
            if len(self.problems) == before:
                from mcpvisor.actors.core.compound import CompoundDecl

                out[name] = CompoundDecl(name=name, description=entry.description, subtools=tuple(subs))
        return out

    def subtools(self, where: str, server: str, raw: Any,
                 servers: Mapping[str, ServerSpec]) -> list[SubtoolDecl]:
        """One server's subtools of a compound tool."""
        from mcpvisor.actors.core.compound import SubtoolDecl

        at = f"subtools.{server}"
        if server not in self.server_names:
            self.problem(where, f'field "{at}": no server "{server}" in "mcpServers"'
                                f"{close_match(server, self.server_names)}")
        elif server in servers and not servers[server].enabled:
            self.warn(where, f'field "{at}": server "{server}" is disabled; its subtools stay unavailable '
                             "until it is enabled")
        if not isinstance(raw, Mapping):
            self.problem(where, f'field "{at}": expected an object {{"tools": [...]}}, '
                                f"got {describe_type(raw)}")
            return []
        entry, problems, _ = convert_collecting(raw, SubtoolServerEntry)
        for p in problems:
            self.problem(where, p.replace('field "', f'field "{at}.', 1) if p.startswith('field "')
                         else f'field "{at}": {p}')
        if entry is None:
            return []
        if not entry.tools:
            self.problem(where, f'field "{at}.tools": is empty; name at least one tool, '
                                'e.g. [{"name": "search"}]')
        out = []
        for i, item in enumerate(entry.tools):
            field_at = f"{at}.tools[{i}]"
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, Mapping):
                self.problem(where, f'field "{field_at}": expected an object {{"name": ...}}, '
                                    f"got {describe_type(item)}")
                continue
            sub, sub_problems, _ = convert_collecting(item, SubtoolEntry)
            for p in sub_problems:
                self.problem(where, p.replace('field "', f'field "{field_at}.', 1) if p.startswith('field "')
                             else f'field "{field_at}": {p}')
            if sub is None or sub_problems:
                continue
            if not sub.name:
                self.problem(where, f'field "{field_at}.name": a tool name cannot be empty')
                continue
            out.append(SubtoolDecl(server=server, tool=sub.name, description=sub.description or None))
        return out

    def server_tool_names(self, servers: Mapping[str, ServerSpec], settings: Settings,
                          section: Mapping[str, Any]) -> dict[str, str]:
        """Exposed name -> `server.tool`, for the server tools this config names.

        Those are `exposedTools` entries and declared subtools that are not hidden. Under
        namespacing "auto" a server tool sharing a compound tool's name is prefixed, so
        nothing clashes there.
        """
        if settings.namespacing == "auto":
            return {}
        named: dict[str, set[str]] = {}
        for spec in servers.values():
            if spec.exposed_tools is not None:
                for t in spec.exposed_tools:
                    named.setdefault(spec.name, set()).add(t.exposed or t.original)
        for raw in section.values():
            subtools = raw.get("subtools") if isinstance(raw, Mapping) else None
            for server, sraw in (subtools.items() if isinstance(subtools, Mapping) else ()):
                owner = servers.get(server)
                tools = sraw.get("tools") if isinstance(sraw, Mapping) else None
                for item in tools if isinstance(tools, list) else ():
                    tool = item.get("name") if isinstance(item, Mapping) else item
                    if not isinstance(tool, str) or owner is None or tool in owner.hidden_tools:
                        continue
                    if owner.exposed_tools is None:
                        named.setdefault(server, set()).add(tool)
        if not named:
            return {}
        from mcpvisor.actors.core.catalog import bare, flatten  # here: named tools are rare

        out: dict[str, str] = {}
        for server, tools in named.items():
            for tool in tools:
                prefix = settings.namespacing == "prefix"
                exposed = f"{flatten(server)}_{flatten(tool)}" if prefix else bare(tool)
                out.setdefault(exposed, f"{server}.{tool}")
        return out
