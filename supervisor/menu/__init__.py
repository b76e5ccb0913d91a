"""The management tools: toolsets, configuration mode, server status.

* `supervisor.menu.definitions` — the tools as clients list them (`DEFINITIONS`) and
  their limits;
* `supervisor.menu.checks` — answers (`ok`, `failed`) and argument checks;
* `supervisor.menu.operations` — `MenuOperations`: each change written to the state
  directory, then applied in the router (both or neither), and the reports;
* `supervisor.menu.handlers` — `Menu`: one handler per tool over those operations;
* `supervisor.menu.render` — the text of the answers.
"""

from __future__ import annotations

from actors.core.toolsets import CONFIG_TOOLS
from supervisor.menu.checks import failed, ok
from supervisor.menu.definitions import DEFINITIONS
from supervisor.menu.handlers import Menu
from supervisor.menu.operations import MenuBackend

__all__ = ["CONFIG_TOOLS", "DEFINITIONS", "Menu", "MenuBackend", "failed", "ok"]
