"""The management tools: toolsets, configuration mode, server status.

* `mcpvisor.menu.definitions` — the tools as clients list them (`DEFINITIONS`) and
  their limits;
* `mcpvisor.menu.checks` — answers (`ok`, `failed`) and argument checks;
* `mcpvisor.menu.reports` — `MenuReports`: the reports (the equipped toolset, the
  tools available, the mode) over what the router holds;
* `mcpvisor.menu.operations` — `MenuOperations` (on `MenuReports`): each change
  written to the state directory, then applied in the router (both or neither);
* `mcpvisor.menu.handlers` — `Menu`: one handler per tool over those operations;
* `mcpvisor.menu.render` — the text of the answers.
"""

from __future__ import annotations

from mcpvisor.actors.core.toolsets import CONFIG_TOOLS
from mcpvisor.menu.checks import failed, ok
from mcpvisor.menu.definitions import DEFINITIONS
from mcpvisor.menu.handlers import Menu
from mcpvisor.menu.reports import MenuBackend

__all__ = ["CONFIG_TOOLS", "DEFINITIONS", "Menu", "MenuBackend", "failed", "ok"]
