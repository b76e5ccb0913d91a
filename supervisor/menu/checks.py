"""Answers and argument checks shared by the management tools.

`ok` and `failed` shape every answer as a ``CallToolResult`` (readable text plus the same
data as ``structuredContent``; a failure says what exists instead); the checks raise
`ToolsetError` before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcpvisor.actors import wire
from mcpvisor.actors.core.toolsets import ToolsetError
from mcpvisor.toolset_create import check_name

__all__ = ["check_args", "check_name", "failed", "ok", "string_arg", "unknown_toolset"]


def ok(text: str, data: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult``: readable text plus the same data as ``structuredContent``."""
    return {"content": [{"type": "text", "text": text}], "structuredContent": data}


def failed(error: ToolsetError) -> dict[str, Any]:
    text = error.message
    for key, label in (("toolsets", "Toolsets"), ("didYouMean", "Did you mean"), ("servers", "Servers"),
                       ("tools", "Its tools"), ("rule", "Rule")):
        value = error.data.get(key)
        if isinstance(value, str):
            value = [value]
        if not value or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            continue
        if not all(v in text for v in value):  # say what exists, once
            text += f"\n{label}: {', '.join(value)}"
    return wire.tool_error_result(text, error.as_dict())


def unknown_toolset(name: str, known: Sequence[str]) -> ToolsetError:
    listed = ", ".join(known) if known else "none yet (build one with build-toolset)"
    return ToolsetError("unknown_toolset", f"No toolset named {name!r}. Toolsets: {listed}.",
                        toolsets=list(known))


def check_args(arguments: Mapping[str, Any], allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    extra = [k for k in arguments if k not in allowed]
    if extra:
        raise ToolsetError("invalid_arguments",
                           f"Unknown argument(s) {', '.join(map(repr, extra))}; this tool "
                           f"takes {', '.join(allowed) if allowed else 'no arguments'}.",
                           accepted=list(allowed))
    missing = [k for k in required if k not in arguments]
    if missing:
        raise ToolsetError("invalid_arguments", f"Missing argument(s) {', '.join(map(repr, missing))}.",
                           accepted=list(allowed))


def string_arg(arguments: Mapping[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise ToolsetError("invalid_arguments", f"{key!r} must be a non-empty string.")
    return value
