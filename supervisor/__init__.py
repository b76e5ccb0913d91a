"""mcpvisor: one MCP server in front of many.

The embedding API::

    from mcpvisor import open_supervisor, serve

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

from mcpvisor.actors import __version__

_EXPORTS = {
    "Config": "mcpvisor.config",
    "ConfigError": "mcpvisor.config",
    "load_config": "mcpvisor.config",
    "parse_config": "mcpvisor.config",
    "Supervisor": "mcpvisor.proxy",
    "open_supervisor": "mcpvisor.tree",
    "serve": "mcpvisor._serve",
    "serve_http": "mcpvisor._serve",
    "serve_stdio": "mcpvisor._serve",
    "serve_ws": "mcpvisor._serve",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    # Redundant aliases mark re-exports (__all__ is built from _EXPORTS, which ruff cannot read).
    from mcpvisor._serve import serve as serve
    from mcpvisor._serve import serve_http as serve_http
    from mcpvisor._serve import serve_stdio as serve_stdio
    from mcpvisor._serve import serve_ws as serve_ws
    from mcpvisor.config import Config as Config
    from mcpvisor.config import ConfigError as ConfigError
    from mcpvisor.config import load_config as load_config
    from mcpvisor.config import parse_config as parse_config
    from mcpvisor.proxy import Supervisor as Supervisor
    from mcpvisor.tree import open_supervisor as open_supervisor


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpvisor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
