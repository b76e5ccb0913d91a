"""The reload plan (sans-IO): what a new config changes in a running supervisor.

`plan_reload` diffs the servers that run against a new `Config`, by server name and
`ServerSpec.fingerprint()`: servers to start, to stop (removed or disabled), to restart
(changed), to leave alone; and the settings that cannot apply live. `live_settings` gives
the settings a reload puts in force. `mcpvisor.reload` applies the plan; this module
only decides it, so it can be read and tested without a running tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mcpvisor.config import Config, ServerSpec, Settings

__all__ = [
    "LIVE_SETTINGS",
    "RESTART_SETTINGS",
    "ReloadPlan",
    "auth_change",
    "live_settings",
    "plan_reload",
]

LIVE_SETTINGS: Final = (
    "namespacing", "startup_wait", "log_level", "env_mode", "server_defaults", "auth_tokens",
    "token_toolsets", "metrics_public", "drain_timeout",
)
"""Settings a reload applies (server knobs through each server's fingerprint)."""

RESTART_SETTINGS: Final = {
    "exposure": "exposure",
    "fast_path": "fastPath",
    "max_message_bytes": "maxMessageBytes",
    "state_dir": "stateDir",
    "pin_schemas": "pinSchemas",
    "auth": "auth",
    "allowed_hosts": "allowedHosts",
    "allowed_origins": "allowedOrigins",
    "max_sessions": "maxSessions",
    "session_idle_timeout": "sessionIdleTimeout",
    "handshake_timeout": "handshakeTimeout",
    "discovery_budget": "discoveryBudget",
    "journal": "journal",
    "journal_payloads": "journalPayloads",
    "store": "store",
}
"""Settings whose change needs a proxy restart (attribute -> key in the file): the
fronts and the exposure were built with them."""


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload does. Names are in the new file's order where they are in it."""

    order: tuple[str, ...]
    """The servers to run after the reload (enabled ones, file order)."""
    added: tuple[str, ...]
    """Start: new in the file, or enabled now."""
    removed: tuple[str, ...]
    """Stop: gone from the file, or disabled now."""
    changed: tuple[str, ...]
    """Restart: their fingerprint changed."""
    unchanged: tuple[str, ...]
    namespacing_changed: bool
    needs_restart: tuple[str, ...]
    """Keys of settings that changed but only apply when the proxy restarts."""

    @property
    def touches_servers(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def summary(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "restarted": list(self.changed),
            "unchanged": list(self.unchanged),
            "needsRestart": list(self.needs_restart),
        }


def plan_reload(running: Mapping[str, ServerSpec], settings: Settings, new: Config) -> ReloadPlan:
    """Diff the servers that run (with the specs they run with) against a new config.

    Args:
        running: server name -> the spec its actor runs now.
        settings: the settings in force.
        new: the validated new config.
    """
    order = tuple(spec.name for spec in new.enabled_servers())
    added = tuple(name for name in order if name not in running)
    removed = tuple(name for name in running if name not in order)
    changed = tuple(
        name
        for name in order
        if name in running and running[name].fingerprint() != new.servers[name].fingerprint()
    )
    unchanged = tuple(name for name in order if name in running and name not in changed)
    needs_restart = tuple(
        key
        for attr, key in RESTART_SETTINGS.items()
        if getattr(settings, attr) != getattr(new.settings, attr)
    )
    return ReloadPlan(
        order=order,
        added=added,
        removed=removed,
        changed=changed,
        unchanged=unchanged,
        namespacing_changed=settings.namespacing != new.settings.namespacing,
        needs_restart=needs_restart,
    )


def auth_change(old: Settings, new: Settings) -> str:
    """The reload log line's note on the bearer tokens (names only, never values), or ""."""
    same_bindings = dict(old.token_toolsets) == dict(new.token_toolsets)
    if dict(old.auth_tokens) == dict(new.auth_tokens) and same_bindings:
        return ""
    names = ", ".join(new.auth_tokens) or "none"
    return f"; auth settings changed: configured tokens now {names} (applied to new requests and handshakes)"


def live_settings(current: Settings, new: Settings) -> Settings:
    """The new settings where they apply live, the current ones where a restart is needed."""
    return msgspec.structs.replace(current, **{attr: getattr(new, attr) for attr in LIVE_SETTINGS})
