"""What each operation of the control channel does, and the ``status`` report it answers.

Owns `dispatch` (one decoded request to its reply: ``status``, ``ping``, ``equip``,
``unequip``, ``reload``; an unknown op named with the known ones), `OPS`, `status_report`
(the proxy, its exposure and equipped toolset, every server) and `status_dict` (one
server's `UpstreamStatus` as JSON, trio-clock times as ISO 8601 UTC wall times).

Separate from `mcpvisor.control`, which owns the socket (where it lives, who may open it,
the line protocol and its limits, the registration) and the CLI's client: what the
operations mean is the supervisor's business and changes with it, while the channel
stays the same; the dashboard builds its status from `status_report` with no socket.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import trio

if TYPE_CHECKING:
    from mcpvisor.actors.upstream import UpstreamStatus
    from mcpvisor.ports import ControlHost

OPS: Final = ("status", "equip", "unequip", "reload", "ping")
"""The operations a request may name (listed in the answer to an unknown one)."""


def _iso(t: float | None, now: float, wall_now: float) -> str | None:
    """A Trio-clock time as ISO 8601 UTC wall time (for people; timing stays on trio)."""
    if t is None:
        return None
    wall = datetime.fromtimestamp(wall_now + (t - now), UTC)
    return wall.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_dict(status: UpstreamStatus, *, now: float | None = None,
                wall_now: float | None = None) -> dict[str, Any]:
    """One server's `UpstreamStatus` as a JSON object with camelCase keys.

    ``since`` and ``retryAt`` become ISO 8601 UTC wall times; ``retryInSeconds`` and
    ``uptime`` are seconds.
    """
    now = trio.current_time() if now is None else now
    # The one wall-clock read of the control channel: display of trio-clock times.
    wall_now = time.time() if wall_now is None else wall_now
    return {
        "name": status.name,
        "transport": status.transport,
        "state": status.state,
        "reason": status.reason,
        "since": _iso(status.since, now, wall_now),
        "uptime": status.uptime,
        "restarts": status.restarts,
        "starts": status.starts,
        "circuit": status.circuit,
        "consecutiveFailures": status.consecutive_failures,
        "healthyLives": status.healthy_lives,
        "failedStarts": status.failed_starts,
        "restartsLastMinute": status.restarts_last_minute,
        "calls": status.calls,
        "answered": status.answered,
        "availability": status.availability,
        "retryAt": _iso(status.retry_at, now, wall_now),
        "retryInSeconds": None if status.retry_at is None else max(0.0, status.retry_at - now),
        "lastError": status.last_error,
        "remembered": status.remembered,
        "toolCount": status.tool_count,
        "pid": status.pid,
        "protocolVersion": status.protocol_version,
        "protocolVersions": list(status.protocol_versions),
        "inFlight": status.in_flight,
        "description": status.description,
    }


def status_report(sup: ControlHost, *, started_at: str | None = None,
                  transport: str | None = None) -> dict[str, Any]:
    """The ``status`` reply: the proxy, its exposure and equipped toolset, every server."""
    now = trio.current_time()
    wall_now = time.time()
    equipped = sup.toolsets.equipped
    report: dict[str, Any] = {
        "pid": os.getpid(),
        "config": config_path(sup),
        "exposure": sup.settings.exposure,
        "toolset": equipped.name if equipped is not None else None,
        "servers": [status_dict(s, now=now, wall_now=wall_now) for s in sup.status()],
    }
    if started_at is not None:
        report["startedAt"] = started_at
    if transport is not None:
        report["transport"] = transport
    return report


def config_path(sup: ControlHost) -> str | None:
    """The config file the proxy runs, as the status and the registration show it (None: none)."""
    path = sup.config.path
    return str(path) if path is not None else None


async def dispatch(sup: ControlHost, request: dict[str, Any], started_at: str,
                   transport: str) -> dict[str, Any]:
    """One request's reply; what a supervisor method raises is the caller's to answer."""
    op = request.get("op")
    if op == "status":
        return {"ok": True, **status_report(sup, started_at=started_at, transport=transport)}
    if op == "ping":
        return {"ok": True, "pid": os.getpid()}
    if op == "equip":
        name = request.get("name")
        if not isinstance(name, str) or not name:
            return {"ok": False, "error": 'equip needs "name": the toolset to equip'}
        return {"ok": True, "result": await sup.equip(name)}
    if op == "unequip":
        return {"ok": True, "result": await sup.unequip()}
    if op == "reload":
        return {"ok": True, "result": await sup.reload()}
    return {"ok": False, "error": f"unknown op {op!r}; known: {', '.join(OPS)}"}
