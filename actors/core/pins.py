"""A tool's definition as toolsets remember it and weigh it (sans-IO).

A saved toolset entry names a tool by a refId and keeps a pin of its schemas, so a
server that changes a tool under a saved toolset is noticed and described in words.
This module owns those pieces, each a pure function of a tool's definition:

* refIds (`ref_id`): a stable hash of a tool's server, name and schemas;
* schema pins (`pin_of`) and what changed since a pin, one line per change
  (`describe_changes`);
* what a tools list costs a client (`estimate_tokens`) and a description's listing line
  (`one_line`).

`mcpvisor.actors.core.toolsets` resolves entries with them; the management tools build
entries and reports with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mcpvisor.actors.core.model import PinnedSchema

REF_ID_LEN: Final = 16
"""Hex digits of a refId: 64 bits, so two tools of one catalog never share one by chance."""

BYTES_PER_TOKEN: Final = 4
"""The usual rough rate of English-and-JSON text in current tokenizers (OpenAI's and
Anthropic's guidance both say about four characters per token)."""
def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def ref_id(server: str, original: str, tool: Mapping[str, Any]) -> str:
    """A stable hash of a tool's server, name and schemas (docs/design.md "refId").

    The description is not part of it (a reworded description keeps the refId; pins
    notice it separately).
    """
    blob = canonical_json({"server": server, "tool": original, "inputSchema": tool.get("inputSchema") or {},
                           "outputSchema": tool.get("outputSchema")})
    return hashlib.sha256(blob.encode()).hexdigest()[:REF_ID_LEN]


def pin_of(tool: Mapping[str, Any]) -> PinnedSchema:
    """A tool's description and schemas as they are now, to store with a toolset entry."""
    out = tool.get("outputSchema")
    return PinnedSchema(description=tool.get("description"), input_schema=dict(tool.get("inputSchema") or {}),
                        output_schema=dict(out) if isinstance(out, Mapping) else None)


def _type_of(schema: Any) -> str:
    if isinstance(schema, Mapping):
        kind = schema.get("type")
        if kind is not None:
            return "|".join(kind) if isinstance(kind, list) else str(kind)
    return "any"


def _properties_of(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A JSON schema's ``properties`` when it is a mapping, else an empty one."""
    props = schema.get("properties")
    return props if isinstance(props, Mapping) else {}


def _schema_changes(what: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    if old == new or (not old and not new):
        return []
    if old is None or not old:
        return [f"{what} schema added"]
    if new is None or not new:
        return [f"{what} schema removed"]
    out: list[str] = []
    label = "parameter" if what == "input" else "output field"
    old_props = _properties_of(old)
    new_props = _properties_of(new)
    for name in new_props:
        if name not in old_props:
            out.append(f"{what} {label} {name!r} added ({_type_of(new_props[name])})")
    for name in old_props:
        if name not in new_props:
            out.append(f"{what} {label} {name!r} removed")
        elif old_props[name] != new_props[name]:
            before, after = _type_of(old_props[name]), _type_of(new_props[name])
            how = f"type {before} -> {after}" if before != after else "definition changed"
            out.append(f"{what} {label} {name!r} changed ({how})")
    old_req = set(old.get("required") or ())
    new_req = set(new.get("required") or ())
    for name in sorted(new_req - old_req):
        out.append(f"{what} {label} {name!r} is now required")
    for name in sorted(old_req - new_req):
        out.append(f"{what} {label} {name!r} is no longer required")
    rest_old = {k: v for k, v in old.items() if k not in ("properties", "required")}
    rest_new = {k: v for k, v in new.items() if k not in ("properties", "required")}
    if rest_old != rest_new:
        keys = sorted(k for k in set(rest_old) | set(rest_new) if rest_old.get(k) != rest_new.get(k))
        out.append(f"{what} schema changed ({', '.join(keys)})")
    return out


def describe_changes(pinned: PinnedSchema, tool: Mapping[str, Any]) -> list[str]:
    """What changed in ``tool`` since it was pinned, one readable line per change."""
    out: list[str] = []
    desc = tool.get("description")
    if (pinned.description or None) != (desc or None):
        out.append(f"description changed (was {_clip(pinned.description)!r}, now {_clip(desc)!r})")
    out += _schema_changes("input", pinned.input_schema, tool.get("inputSchema") or {})
    out_schema = tool.get("outputSchema")
    out += _schema_changes("output", pinned.output_schema,
                           out_schema if isinstance(out_schema, Mapping) else None)
    return out


def _clip(text: str | None, limit: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str | None, limit: int = 120) -> str:
    """The first line of a description, clipped for listings."""
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def estimate_tokens(tools: Sequence[Mapping[str, Any]]) -> int:
    """Rough tokens a client pays for a tools list: bytes of its JSON / `BYTES_PER_TOKEN`."""
    return len(canonical_json(list(tools)).encode()) // BYTES_PER_TOKEN
