"""mcpvisor: one MCP server in front of many.

The embedding API::

    from supervisor import open_supervisor, serve

    async with open_supervisor("mcpvisor.json") as sup:
        await sup.wait_ready()
        print([t["name"] for t in sup.tools()])
        result = await sup.call_tool("calc_add", {"a": 1, "b": 2})
        async for event in sup.events():
            ...

Leaving the block stops every server and reaps every child process.

Names are imported lazily, so ``import supervisor.config`` (the CLI's registry
commands) does not pay for importing the MCP SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from actors import __version__

_EXPORTS = {
    "Config": "supervisor.config",
    "ConfigError": "supervisor.config",
    "load_config": "supervisor.config",
    "parse_config": "supervisor.config",
    "Supervisor": "supervisor.tree",
    "open_supervisor": "supervisor.tree",
    "serve": "supervisor._serve",
    "serve_http": "supervisor._serve",
    "serve_stdio": "supervisor._serve",
    "serve_ws": "supervisor._serve",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    # Redundant aliases mark re-exports (__all__ is built from _EXPORTS, which ruff cannot read).
    from supervisor._serve import serve as serve
    from supervisor._serve import serve_http as serve_http
    from supervisor._serve import serve_stdio as serve_stdio
    from supervisor._serve import serve_ws as serve_ws
    from supervisor.config import Config as Config
    from supervisor.config import ConfigError as ConfigError
    from supervisor.config import load_config as load_config
    from supervisor.config import parse_config as parse_config
    from supervisor.tree import Supervisor as Supervisor
    from supervisor.tree import open_supervisor as open_supervisor


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
