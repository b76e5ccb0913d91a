"""A stand-in for `mcpvisor.proxy.Supervisor` with what the control channel and the
status CLI read of it: ``config.path``, ``settings.exposure``, ``toolsets.equipped``,
``status()``, and ``equip`` / ``unequip`` / ``reload``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mcpvisor.actors.upstream import UpstreamStatus


def a_status(name: str = "s", **fields: Any) -> UpstreamStatus:
    values: dict[str, Any] = {
        "name": name, "transport": "stdio", "state": "ready", "reason": "started in 0.10s, 2 tools",
        "since": 100.0, "uptime": 5.0, "restarts": 0, "circuit": "closed", "retry_at": None,
        "last_error": None, "tool_count": 2, "pid": 4242, "protocol_version": "2025-11-25", "in_flight": 0,
        "description": None, "starts": 1, "consecutive_failures": 0,
    }
    values.update(fields)
    return UpstreamStatus(**values)


@dataclass
class StubSupervisor:
    """What the control server reads of a `Supervisor`."""

    statuses: list[UpstreamStatus] = field(default_factory=lambda: [a_status()])
    equipped: str | None = "dev"
    equip_calls: list[str] = field(default_factory=list)
    # Stand-ins for the few fields the control server reads (a `ControlHost` port).
    config: Any = field(init=False)
    settings: Any = field(init=False)
    toolsets: Any = field(init=False)

    def __post_init__(self) -> None:
        self.config = SimpleNamespace(path=Path("/etc/mcpvisor.json"))
        self.settings = SimpleNamespace(exposure="menu")
        equipped = SimpleNamespace(name=self.equipped) if self.equipped else None
        self.toolsets = SimpleNamespace(equipped=equipped)

    def status(self) -> list[UpstreamStatus]:
        return self.statuses

    async def equip(self, name: str) -> dict[str, Any]:
        self.equip_calls.append(name)
        if name == "missing":
            raise LookupError(f"no toolset named {name!r}")
        return {"equipped": name, "tools": ("a", "b")}

    async def unequip(self) -> dict[str, Any]:
        raise NotImplementedError("toolsets arrive with supervisor/menu.py")

    async def reload(self, config: Any = None) -> dict[str, Any]:
        return {"changed": []}
