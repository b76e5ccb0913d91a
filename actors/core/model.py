"""The records of toolsets and notes, shared by the router's core and the state store.

Plain frozen records with no I/O (the JSON form of ``state.json`` lives in
`mcpvisor.state`): a `Toolset` of `ToolEntry` items, each maybe carrying the
`PinnedSchema` it was built with; a user's `Note` on a tool; `SavedState`, everything
``state.json`` holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Note", "PinnedSchema", "SavedState", "ToolEntry", "Toolset"]


@dataclass(frozen=True, slots=True)
class PinnedSchema:
    """A tool's description and schemas as they were when it joined a toolset."""

    description: str | None
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool of a toolset, by namespaced name (``server.tool``) and stable ``ref_id``."""

    namespaced_name: str
    ref_id: str | None
    alias: str | None
    pinned: PinnedSchema | None


@dataclass(frozen=True, slots=True)
class Toolset:
    """A named subset of tools. ``read_only`` marks one declared in the config file."""

    name: str
    tools: tuple[ToolEntry, ...]
    description: str | None
    created_at: str
    updated_at: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Note:
    """A user's annotation of a tool, appended to its description when exposed."""

    name: str
    note: str


@dataclass(frozen=True, slots=True)
class SavedState:
    """Everything in ``state.json``.

    ``annotations`` maps toolset name -> namespaced tool name -> notes. ``equipped`` and
    the annotation keys may name toolsets declared in the config file, which are not in
    ``toolsets``.
    """

    equipped: str | None
    toolsets: Mapping[str, Toolset]
    annotations: Mapping[str, Mapping[str, tuple[Note, ...]]]
