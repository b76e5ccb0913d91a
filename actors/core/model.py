"""The records of toolsets and notes, shared by the router's core and the state store.

Plain frozen records with no I/O (the JSON form of ``state.json`` lives in
`mcpvisor.state`): a `Toolset` of `ToolEntry` items, each maybe carrying the
`PinnedSchema` it was built with; a user's `Note` on a tool; `SavedState`, everything
``state.json`` holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["Note", "PinnedSchema", "SavedState", "ToolEntry", "Toolset"]


class PinnedSchema(msgspec.Struct, frozen=True):
    """A tool's description and schemas as they were when it joined a toolset."""

    description: str | None
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None


class ToolEntry(msgspec.Struct, frozen=True):
    """One tool of a toolset, by namespaced name (``server.tool``) and stable ``ref_id``."""

    namespaced_name: str
    ref_id: str | None
    alias: str | None
    pinned: PinnedSchema | None


class Toolset(msgspec.Struct, frozen=True):
    """A named subset of tools. ``read_only`` marks one declared in the config file."""

    name: str
    tools: tuple[ToolEntry, ...]
    description: str | None
    created_at: str
    updated_at: str
    read_only: bool = False


class Note(msgspec.Struct, frozen=True):
    """A user's annotation of a tool, appended to its description when exposed."""

    name: str
    note: str


class SavedState(msgspec.Struct, frozen=True):
    """Everything in ``state.json``.

    ``annotations`` maps toolset name -> namespaced tool name -> notes. ``equipped`` and
    the annotation keys may name toolsets declared in the config file, which are not in
    ``toolsets``.
    """

    equipped: str | None
    toolsets: Mapping[str, Toolset]
    annotations: Mapping[str, Mapping[str, tuple[Note, ...]]]
