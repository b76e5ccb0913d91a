"""Compound tools: one exposed tool offering chosen tools of several servers (sans-IO).

The config's top-level ``tools`` section, in MCP Coordinator's shape (docs/design.md
"Compound tools")::

    "tools": {"research": {"description": "...",
                           "subtools": {"web": {"tools": [{"name": "search"}]}}}}

Owns:

* the declarations (`CompoundDecl`, `SubtoolDecl`) the config builds;
* `resolve_compound`: a declaration against the catalog now, each subtool available
  (the upstream's tool, hidden or not) or not and why;
* the tool clients see (`CompoundTool.wire`): a description listing every subtool
  (``server.tool`` and the declared description, else the upstream's; unavailable ones
  say why) and an exact ``inputSchema``, a ``oneOf`` with one branch per subtool whose
  ``args`` is that tool's real input schema;
* `CompoundTool.prepare`: a call ``{"server", "tool", "args"}`` checked before anything
  is sent (a declared, available subtool; ``args`` valid against its schema) and turned
  into the direct call it stands for (`SubCall`), or an ``isError`` result naming the
  field.

No I/O and no trio: the router's core builds these on every rebuild; the front and the
fast path call ``prepare`` on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from mcpvisor.actors.core.arguments import Checker, checker_of
from mcpvisor.actors.core.catalog import tool_hints

__all__ = [
    "COMPOUND_SERVER",
    "CompoundDecl",
    "CompoundTool",
    "SubCall",
    "SubtoolDecl",
    "SubtoolState",
    "resolve_compound",
]

COMPOUND_SERVER: Final = ""
"""The ``server`` of a compound tool's catalog entry: it belongs to no one server."""

CALL_KEYS: Final = ("server", "tool", "args")
"""The arguments of a compound tool (MCP Coordinator's call shape)."""

DESCRIPTION_LINE: Final = 160
"""Longest subtool description line in a compound tool's description (an upstream's
first line; the declared one is used whole up to this)."""

ANY_ARGS: Final[Mapping[str, Any]] = {"type": "object"}
"""``args`` of a subtool whose schema is not known (its server has not listed it)."""


class SubtoolDecl(msgspec.Struct, frozen=True):
    """One declared subtool: the upstream's own tool name (hidden or not) and, optionally,
    the description clients see for it instead of the upstream's."""

    server: str
    tool: str
    description: str | None = None

    @property
    def key(self) -> str:
        return f"{self.server}.{self.tool}"


class CompoundDecl(msgspec.Struct, frozen=True):
    """A compound tool of the config's ``tools`` section, subtools in file order."""

    name: str
    description: str | None
    subtools: tuple[SubtoolDecl, ...]


@dataclass(frozen=True, slots=True)
class SubtoolState:
    """A subtool against the catalog: ``tool`` when available, else ``reason``."""

    decl: SubtoolDecl
    tool: Mapping[str, Any] | None
    reason: str | None = None
    warning: bool = False
    """The server is up but does not list the tool: worth a warning (config or server
    changed), not just a state."""
    checker: Checker | None = field(default=None, compare=False, repr=False)
    """The compiled checker of the tool's input schema (None: not checked here),
    made once per rebuild so a call pays only the validation."""

    @property
    def available(self) -> bool:
        return self.tool is not None

    @property
    def retry_safe(self) -> bool:
        read_only, idempotent = tool_hints(self.tool or {})
        return read_only or idempotent

    def description(self) -> str:
        """The line describing this subtool in the compound tool's description."""
        text = self.decl.description
        if not text and self.tool is not None:
            text = _first_line(self.tool.get("description"))
        text = _clip(text or "")
        if self.reason is not None:
            return f"{self.decl.key}: unavailable ({self.reason})" + (f"; {text}" if text else "")
        return f"{self.decl.key}: {text}" if text else self.decl.key

    def schema(self) -> Mapping[str, Any]:
        """The input schema of this subtool's ``args`` (any object when unknown)."""
        schema = (self.tool or {}).get("inputSchema")
        return schema if isinstance(schema, Mapping) else ANY_ARGS


class SubCall(msgspec.Struct, frozen=True):
    """A compound call turned into the direct call it stands for."""

    server: str
    tool: str
    args: dict[str, Any]
    retry_safe: bool


class CompoundTool(msgspec.Struct, frozen=True):
    """A compound tool resolved against the catalog at one rebuild (immutable)."""

    decl: CompoundDecl
    subtools: tuple[SubtoolState, ...]

    @property
    def name(self) -> str:
        return self.decl.name

    def find(self, server: str, tool: str) -> SubtoolState | None:
        for sub in self.subtools:
            if sub.decl.server == server and sub.decl.tool == tool:
                return sub
        return None

    def unavailable(self) -> list[SubtoolState]:
        return [s for s in self.subtools if not s.available]

    def problems(self) -> list[str]:
        """Warnings for status and the log: a running server that lacks a declared tool."""
        return [f"compound tool {self.name!r}: subtool {s.decl.key} unavailable: {s.reason}"
                for s in self.subtools if s.warning]

    def wire(self) -> dict[str, Any]:
        """The tool as clients see it (name, description, inputSchema)."""
        head = (self.decl.description or f"Calls one of {len(self.subtools)} tools.").strip()
        lines = [head, "", 'Call with {"server": ..., "tool": ..., "args": {...}}, '
                           "where server.tool is one of:"]
        lines += [f"- {s.description()}" for s in self.subtools]
        down = self.unavailable()
        if down:
            lines += ["", f"Unavailable now: {', '.join(s.decl.key for s in down)}."]
        branches = []
        for s in self.subtools:
            args = s.schema()
            branch: dict[str, Any] = {
                "type": "object",
                "properties": {"server": {"const": s.decl.server}, "tool": {"const": s.decl.tool},
                               "args": args},
                "required": ["server", "tool", *(["args"] if args.get("required") else [])],
                "additionalProperties": False,
            }
            desc = s.description()
            if desc:
                branch["description"] = desc
            branches.append(branch)
        schema = {
            "type": "object",
            "properties": {
                "server": {"type": "string", "enum": sorted({s.decl.server for s in self.subtools})},
                "tool": {"type": "string", "enum": sorted({s.decl.tool for s in self.subtools})},
                "args": {"type": "object"},
            },
            "required": ["server", "tool"],
            "oneOf": branches,
        }
        return {"name": self.name, "description": "\n".join(lines), "inputSchema": schema}

    def prepare(self, arguments: Any) -> SubCall | dict[str, Any]:
        """Check a call and turn it into its direct call, or an ``isError`` result.

        Nothing is sent for a call that fails here: an unknown key, a subtool that is
        not declared or not available, or ``args`` that fail the subtool's schema (the
        result names the field, e.g. ``args.query``). A subtool schema that is not
        itself valid JSON Schema is not checked here (the upstream judges the args).
        """
        if not isinstance(arguments, Mapping):
            return self._error("arguments", "expected an object {server, tool, args}")
        extra = [k for k in arguments if k not in CALL_KEYS]
        if extra:
            return self._error(extra[0], f"unknown argument {extra[0]!r} (expected server, tool and args)")
        server, tool, args = arguments.get("server"), arguments.get("tool"), arguments.get("args", {})
        for key, value in (("server", server), ("tool", tool)):
            if not isinstance(value, str) or not value:
                return self._error(key, f"{key!r} must be a non-empty string")
        assert isinstance(server, str)
        assert isinstance(tool, str)
        sub = self.find(server, tool)
        if sub is None:
            wrong = "server" if all(s.decl.server != server for s in self.subtools) else "tool"
            return self._error(wrong, f"{server}.{tool} is not a subtool of {self.name}")
        if sub.tool is None:
            return self._error("tool", f"{sub.decl.key} is unavailable: {sub.reason}", unavailable=True)
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            return self._error("args", f"expected an object with the arguments of {sub.decl.key}")
        problem = _check(sub.checker, args)
        if problem is not None:
            where, message = problem
            return self._error(where, f"invalid arguments for {sub.decl.key}: {message}")
        return SubCall(server, tool, dict(args), sub.retry_safe)

    def _error(self, field: str, message: str, *, unavailable: bool = False) -> dict[str, Any]:
        text = f"{self.name}: field {field!r}: {message}."
        if not unavailable:
            text += " Subtools: " + ", ".join(s.decl.key for s in self.subtools) + "."
        structured = {"error": "unavailable" if unavailable else "invalid_arguments", "tool": self.name,
                      "field": field, "message": message,
                      "subtools": [{"server": s.decl.server, "tool": s.decl.tool, "available": s.available}
                                   for s in self.subtools]}
        return {"content": [{"type": "text", "text": text}], "isError": True, "structuredContent": structured}


def resolve_compound(
    decl: CompoundDecl,
    *,
    find_tool: Callable[[str, str], Mapping[str, Any] | None],
    listed: Callable[[str], bool],
    state_of: Callable[[str], tuple[str, str | None] | None],
) -> CompoundTool:
    """``decl`` against the catalog now.

    Args:
        find_tool: (server, original name) -> the tool as its server listed it, hidden or not.
        listed: whether a server's lists are in the catalog (it is up, or restarting briefly).
        state_of: a server's (state, reason), None when it is not configured and enabled.
    """
    subs = []
    for d in decl.subtools:
        state = state_of(d.server)
        if state is None:
            subs.append(SubtoolState(d, None, f"server {d.server} is not enabled"))
        elif not listed(d.server):
            what, why = state
            subs.append(SubtoolState(d, None, f"server {d.server} is {what.replace('_', ' ')}"
                                              + (f": {why}" if why else "")))
        else:
            tool = find_tool(d.server, d.tool)
            if tool is None:
                missing = f"{d.server} does not list a tool named {d.tool!r}"
                subs.append(SubtoolState(d, None, missing, warning=True))
            else:
                schema = tool.get("inputSchema")
                checker = checker_of(schema) if isinstance(schema, Mapping) else None
                subs.append(SubtoolState(d, tool, checker=checker))
    return CompoundTool(decl, tuple(subs))


def _first_line(text: Any) -> str:
    text = text.strip() if isinstance(text, str) else ""
    return text.splitlines()[0] if text else ""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DESCRIPTION_LINE else text[: DESCRIPTION_LINE - 3] + "..."


def _check(checker: Checker | None, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, message) of the most relevant error of ``args`` for ``checker``, or None."""
    if checker is None:
        return None
    error = checker.first_error(args)
    if error is None:
        return None
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = next((r for r in error.validator_value if r not in error.instance), None)
        if missing is not None:
            return f"args{path}.{missing}", f"{missing!r} is required"
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        allowed = set((error.schema or {}).get("properties", {}))
        extra = next((k for k in error.instance if k not in allowed), None)
        if extra is not None:
            return f"args{path}.{extra}", f"{extra!r} is not an argument of this tool"
    return f"args{path}", error.message
