"""The text the management tools answer with, rendered from their structured data."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgspec

from mcpvisor.actors.core.toolsets import EXPOSED, MISSING, PENDING, REFUSED, SCHEMA_CHANGED


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def status_dict(status: Any, now: float) -> dict[str, Any]:
    """An `UpstreamStatus` as JSON-able camelCase; trio-clock times become relative seconds."""
    if isinstance(status, msgspec.Struct):
        raw = msgspec.structs.asdict(status)
    elif dataclasses.is_dataclass(status) and not isinstance(status, type):
        raw = dataclasses.asdict(status)
    else:
        raw = dict(vars(status))
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "retry_at":
            out["retryInSeconds"] = None if value is None else max(0.0, value - now)
        elif key == "since":
            out["sinceSecondsAgo"] = None if value is None else max(0.0, now - value)
        elif key == "uptime":
            out["uptimeSeconds"] = value
        else:
            out[_camel(key)] = getattr(value, "value", value)
    return out


def render_mode(data: Mapping[str, Any]) -> str:
    visible = data["visibleTools"]
    where = "configuration mode" if data["configurationMode"] else "normal mode"
    equipped = f"toolset {data['equipped']!r} equipped" if data["equipped"] else "no toolset equipped"
    return (f"Now in {where}, {equipped}; clients see {len(visible)} tools: {', '.join(visible)}.")


def render_active(data: Mapping[str, Any]) -> str:
    lines = []
    if data["toolset"] is None:
        lines.append("No toolset is equipped.")
    else:
        ts = data["toolset"]
        c = data["counts"]
        lines.append(f"Toolset {ts['name']!r}"
                     + (" (read-only, from the config file)" if ts["readOnly"] else "")
                     + f": {c[EXPOSED] + c[SCHEMA_CHANGED]} of {len(data['tools'])} tools exposed"
                     + "".join(f", {c[k]} {k.replace('_', ' ')}"
                               for k in (SCHEMA_CHANGED, REFUSED, PENDING, MISSING) if c[k])
                     + ".")
        if not data["toolsetVisible"]:
            lines.append("(configuration mode: its tools are hidden until exit-configuration-mode)")
        for t in data["tools"]:
            name = t["namespacedName"] or f"refId {t['refId']}"
            line = f"- {name}"
            if t["exposedAs"]:
                line += f" -> {t['exposedAs']}"
            line += f": {t['state'].replace('_', ' ')}"
            if t["detail"] and t["state"] != EXPOSED:
                line += f" ({t['detail']})"
            lines.append(line)
            for change in t["changes"]:
                lines.append(f"    changed: {change}")
            for n in t["notes"]:
                lines.append(f"    note {n['name']}: {n['note']}")
    lines.append(render_mode(data))
    tok = data["tokens"]
    lines.append(f"Estimated tokens for the tools list: {tok['listed']} now, "
                 f"{tok['allTools']} with every tool listed (saves ~{tok['saved']}; {tok['method']}).")
    for p in data["problems"]:
        lines.append(f"Note: {p}")
    return "\n".join(lines)


def render_compounds(compounds: list[dict[str, Any]]) -> list[str]:
    """Lines for the compound tools of list-available-tools and get-server-status."""
    if not compounds:
        return []
    lines = [f"\n## compound tools ({len(compounds)})"]
    for c in compounds:
        lines.append(f"- {c['name']}" + (f"  {c['description']}" if c["description"] else ""))
        for s in c["subtools"]:
            state = "available" if s["available"] else f"unavailable: {s['reason']}"
            lines.append(f"    - {s['server']}.{s['tool']}: {state}")
    return lines
