"""The management tools as clients list them: names, arguments and their limits.

Names and arguments are compatible with HyperTool's (docs/design.md "Exposure modes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from mcpvisor.actors.core.toolsets import (
    ANNOTATE,
    BUILD,
    DELETE,
    ENTER_CONFIG,
    EQUIP,
    EXIT_CONFIG,
    GET_ACTIVE,
    LIST_AVAILABLE,
    LIST_SAVED,
    MANAGEMENT_TOOLS,
    SERVER_STATUS,
    UNEQUIP,
)
from mcpvisor.toolset_create import NAME_HELP

MAX_NOTE_CHARS: Final = 2000
"""A note is appended to a description every client reads: keep it a note."""

_OBJ: Final = {"type": "object"}


def _schema(properties: Mapping[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return out


_TOOL_REF: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "namespacedName": {"type": "string", "description": "The tool as server.tool, e.g. 'git.status'."},
        "refId": {"type": "string", "description": "The tool's refId from list-available-tools."},
    },
    "additionalProperties": False,
}

_TOOLS: Final[tuple[Mapping[str, Any], ...]] = (
    {
        "name": LIST_AVAILABLE,
        "annotations": {"readOnlyHint": True},
        "description": (
            "List every tool the proxy's servers offer, grouped by server, with namespaced names "
            "(server.tool), one-line descriptions, each server's state and each tool's refId. "
            "Use the namespaced names or refIds with build-toolset."),
        "inputSchema": _schema({"server": {"type": "string", "description": "Only this server's tools."}}),
    },
    {
        "name": BUILD,
        "description": (
            "Build and save a toolset: a named set of tools from any servers. Give each tool as "
            "{namespacedName: 'server.tool'} or {refId}, optionally with an alias (the name clients see). "
            "With autoEquip: true it is equipped at once and configuration mode ends. Example: "
            "{name: 'dev', tools: [{namespacedName: 'git.status'}, {namespacedName: 'git.diff'}], "
            "autoEquip: true}."),
        "inputSchema": _schema({
            "name": {"type": "string", "description": f"Toolset name: {NAME_HELP}."},
            "tools": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "properties": {
                    **_TOOL_REF["properties"],
                    "alias": {"type": "string", "description": "Expose the tool under this name "
                                                               f"({NAME_HELP})."},
                },
                "additionalProperties": False,
            }},
            "description": {"type": "string", "description": "What the toolset is for."},
            "autoEquip": {"type": "boolean", "description": "Equip it now (default false)."},
        }, ["name", "tools"]),
    },
    {
        "name": LIST_SAVED,
        "annotations": {"readOnlyHint": True},
        "description": "List the toolsets: those saved at run time and those declared in the config "
                       "file (read-only), with their tools and which one is equipped.",
        "inputSchema": _schema({}),
    },
    {
        "name": EQUIP,
        "description": (
            "Equip a toolset: clients then see exactly its tools (under flattened names, server_tool) "
            "and configuration mode ends. Tools of servers that are not up yet are reported as pending "
            "and appear when their server comes up. With settings.exposure 'all', equipping narrows the "
            "list to the toolset's tools plus these management tools."),
        "inputSchema": _schema({"name": {"type": "string", "description": "The toolset to equip."}},
                               ["name"]),
    },
    {
        "name": DELETE,
        "description": "Delete a saved toolset (unequipping it if it is equipped). Toolsets declared in "
                       "the config file are read-only.",
        "inputSchema": _schema({"name": {"type": "string", "description": "The toolset to delete."}},
                               ["name"]),
    },
    {
        "name": UNEQUIP,
        "description": "Unequip the current toolset and return to the menu (with settings.exposure "
                       "'all': back to every tool).",
        "inputSchema": _schema({}),
    },
    {
        "name": GET_ACTIVE,
        "annotations": {"readOnlyHint": True},
        "description": (
            "Show the equipped toolset: each tool's state (exposed, pending on a server that is not up, "
            "missing upstream, schema changed since the toolset was built), the names clients see, "
            "and an estimate of the tokens the listed tools cost a client against listing every tool."),
        "inputSchema": _schema({}),
    },
    {
        "name": ANNOTATE,
        "description": (
            "Add notes to a tool of the equipped toolset; they are appended to the tool's description "
            "from now on and kept across restarts. A note with an existing name replaces it. Example: "
            "{toolRef: {namespacedName: 'git.commit'}, notes: [{name: 'style', note: 'Use imperative "
            "mood'}]}."),
        "inputSchema": _schema({
            "toolRef": _TOOL_REF,
            "notes": {"type": "array", "minItems": 1, "items": _schema(
                {"name": {"type": "string"}, "note": {"type": "string"}}, ["name", "note"])},
        }, ["toolRef", "notes"]),
    },
    {
        "name": SERVER_STATUS,
        "annotations": {"readOnlyHint": True},
        "description": "Each server's state, uptime, restarts, circuit breaker, last error and tool count.",
        "inputSchema": _schema({}),
    },
    {
        "name": EXIT_CONFIG,
        "description": "Leave configuration mode: the management tools are hidden and the equipped "
                       "toolset's tools are shown (only enter-configuration-mode if none is equipped).",
        "inputSchema": _schema({}),
    },
    {
        "name": ENTER_CONFIG,
        "description": "Enter configuration mode to build, equip or change toolsets; the toolset's tools "
                       "are hidden until you leave it (equipping a toolset leaves it by itself).",
        "inputSchema": _schema({}),
    },
)

DEFINITIONS: Final[Mapping[str, Mapping[str, Any]]] = {d["name"]: d for d in _TOOLS}
assert tuple(DEFINITIONS) == MANAGEMENT_TOOLS
