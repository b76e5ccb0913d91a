"""Turn a decoded config document into a `Config`, collecting every problem on the way.

Owns the pass over a document: top-level keys, then the sections in the order their
rules need them (``settings`` first, since its ``envMode`` picks the interpolator and
its knobs are every server's defaults; then ``mcpServers``; then ``tools`` and
``toolsets``, which name servers). The rules of each section live beside it:
`mcpvisor._config_settings`, `mcpvisor._config_servers`, `mcpvisor._config_tools`,
on the shared checks of `mcpvisor._config_check`.
Everything is checked before anything is returned, so a bad file never partially applies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from mcpvisor._config_schema import close_match
from mcpvisor._config_servers import ServerRules
from mcpvisor._config_settings import SettingsRules
from mcpvisor._config_tools import ToolRules
from mcpvisor._config_types import TOP_KEYS, Config, ConfigError
from mcpvisor.actors.core.spec import ServerSpec
from mcpvisor.actors.core.vocabulary import TRANSPORTS

__all__ = ["build"]

SERVERS_KEY: Final = "mcpServers"


def build(doc: Mapping[str, Any], *, path: Path | None, label: str, env: Mapping[str, str],
          isolate_servers: bool = False) -> Config:
    """Validate and resolve `doc`; raise ConfigError with every problem, or return the Config.

    With ``isolate_servers`` a problem inside one server's entry does not fail the load:
    that server comes back with `ServerSpec.misconfigured` set to the problems, in its own
    words (what the proxy shows and never starts); every other problem still fails it.
    """
    builder = _Builder(doc, path=path, label=label, env=env)
    builder.isolate_servers = isolate_servers
    return builder.run()


_TRANSPORT_KEYS: Final = (("command", "stdio"), ("url", "http"), ("image", "stdio-docker"))
"""The transport an entry that cannot be resolved is shown with, from the field it has."""


def misconfigured_spec(name: str, raw: Any, reason: str) -> ServerSpec:
    """A stand-in for an entry that cannot be used: enough to name and show it, never started."""
    entry: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    given = entry.get("type", entry.get("transport"))
    transport = given if isinstance(given, str) and given in TRANSPORTS else next(
        (kind for key, kind in _TRANSPORT_KEYS if key in entry), "stdio")
    enabled = entry.get("enabled") is not False and entry.get("disabled") is not True
    description = entry.get("description")
    return ServerSpec(name=name, transport=transport, enabled=enabled,
                      description=description if isinstance(description, str) else None,
                      raw=MappingProxyType(copy.deepcopy(dict(entry))), misconfigured=reason)


class _Builder(SettingsRules, ServerRules, ToolRules):
    """One pass over one document; `problems` fail the load, `warnings` ride along."""

    isolate_servers = False

    def _own_words(self, name: str, problem: str) -> str:
        """A server's problem without the file and server names in front (the reason of a
        misconfigured server is shown beside its name)."""
        for prefix in (f'{self.label}: server "{name}": ', f"{self.label}: "):
            if problem.startswith(prefix):
                return problem[len(prefix):]
        return problem

    def run(self) -> Config:
        if "servers" in self.doc:
            self.problem(
                "", '"servers" is VS Code format: use `mcpvisor import vscode` (mcpvisor reads "mcpServers")'
            )
        for key in self.doc:
            if key not in TOP_KEYS and key != "servers":
                hint = close_match(key, TOP_KEYS[1:])
                if "mcpServers" not in self.doc and close_match(key, (SERVERS_KEY,)):
                    # The servers are there under a misspelt key: running with none would look
                    # like a working proxy that lost every tool.
                    self.problem("", f'unknown top-level key "{key}" (did you mean "{SERVERS_KEY}"?): '
                                     f'no servers would run; rename it to "{SERVERS_KEY}"')
                    continue
                self.warn("", f'unknown top-level key "{key}" ignored{hint}')
        settings = self.settings(self.section("settings"))
        self.interp = self.interpolator(settings.env_mode)
        settings = self.security(settings)
        servers: dict[str, ServerSpec] = {}
        entries = self.section("mcpServers")
        self.server_names = tuple(entries)
        for name, entry in entries.items():
            before = len(self.problems)
            spec = self.server(name, entry, settings)
            if self.isolate_servers and len(self.problems) > before:
                # One bad entry stays one bad server: it is shown misconfigured, the rest run.
                reason = "; ".join(self._own_words(name, p) for p in self.problems[before:])
                del self.problems[before:]
                spec = misconfigured_spec(name, entry, reason)
            if spec is not None:
                servers[name] = spec
        compounds = self.compounds(servers, settings)
        toolsets = {}
        for name, entry in self.section("toolsets").items():
            decl = self.toolset(name, entry)
            if decl is not None:
                toolsets[name] = decl
        if self.problems:
            raise ConfigError(self.problems, self.path)
        return Config(
            path=self.path,
            servers=MappingProxyType(servers),
            toolsets=MappingProxyType(toolsets),
            settings=settings,
            compound_tools=MappingProxyType(compounds),
            warnings=tuple(self.warnings),
            raw=MappingProxyType(copy.deepcopy(dict(self.doc))),
        )
