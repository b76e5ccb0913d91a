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
from typing import Any

from mcpvisor._config_schema import close_match
from mcpvisor._config_servers import ServerRules
from mcpvisor._config_settings import SettingsRules
from mcpvisor._config_tools import ToolRules
from mcpvisor._config_types import TOP_KEYS, Config, ConfigError, ServerSpec

__all__ = ["build"]


def build(doc: Mapping[str, Any], *, path: Path | None, label: str, env: Mapping[str, str]) -> Config:
    """Validate and resolve `doc`; raise ConfigError with every problem, or return the Config."""
    return _Builder(doc, path=path, label=label, env=env).run()


class _Builder(SettingsRules, ServerRules, ToolRules):
    """One pass over one document; `problems` fail the load, `warnings` ride along."""

    def run(self) -> Config:
        if "servers" in self.doc:
            self.problem(
                "", '"servers" is VS Code format: use `mcpvisor import vscode` (mcpvisor reads "mcpServers")'
            )
        for key in self.doc:
            if key not in TOP_KEYS and key != "servers":
                self.warn("", f'unknown top-level key "{key}" ignored{close_match(key, TOP_KEYS[1:])}')
        settings = self.settings(self.section("settings"))
        self.interp = self.interpolator(settings.env_mode)
        settings = self.security(settings)
        servers: dict[str, ServerSpec] = {}
        entries = self.section("mcpServers")
        self.server_names = tuple(entries)
        for name, entry in entries.items():
            spec = self.server(name, entry, settings)
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
