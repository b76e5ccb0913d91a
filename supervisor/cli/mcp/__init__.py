"""``mcpvisor mcp ...``: the server registry, with Claude Code's command names.

Owns the commands a user builds their setup with, the way they already do with
``claude mcp add``: ``add`` and ``add-json`` (`.add`, its command line in `.argv`), ``remove``, ``enable`` and
``disable`` (`.edit`), ``list``, ``test``, ``info`` and ``get`` (`.inspect`), and
``add-from-claude-desktop`` (``mcpvisor import claude-desktop``). Every write goes
through `mcpvisor.store.ConfigStore` (locked, atomic, keeps what mcpvisor does not own,
validates before writing); a running proxy watching the file picks each change up by
itself (`mcpvisor.reload_watch`).

Exit codes: 0 ok, 1 a failed check (``mcp test`` of a server that fails), 2 bad usage
or a bad config.
"""

from __future__ import annotations

import argparse
from typing import Any

from mcpvisor.cli import importer
from mcpvisor.cli._base import Formatter
from mcpvisor.cli.config_cmd import config_option, usage
from mcpvisor.cli.mcp import add, edit, inspect, login
from mcpvisor.cli.mcp.argv import COMMAND_DEST, split_argv
from mcpvisor.cli.mcp.inspect import target_of

__all__ = ["COMMAND_DEST", "register", "split_argv", "target_of"]


def register(sub: Any) -> None:
    parent = config_option()
    p = sub.add_parser(
        "mcp",
        help="add, list, test and remove servers in the config",
        description="Manage the MCP servers in the config file. Claude Code's install lines "
        "(`claude mcp add ...`) work with mcpvisor in place of claude.",
        formatter_class=Formatter,
        parents=[parent],
        epilog="examples:\n  mcpvisor mcp add git -- uvx mcp-server-git\n  mcpvisor mcp list\n"
        "  mcpvisor mcp test git\n  mcpvisor mcp get git\n  mcpvisor mcp remove git --yes\n",
    )
    p.set_defaults(func=lambda args: usage(p))
    cmds = p.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND")
    add.register(cmds, parent)
    inspect.register(cmds, parent)
    edit.register(cmds, parent)
    login.register(cmds, parent)
    _register_desktop_import(cmds, parent)


def _register_desktop_import(cmds: Any, parent: argparse.ArgumentParser) -> None:
    """``mcp add-from-claude-desktop``: Claude Code's name for ``import claude-desktop``."""
    desktop = cmds.add_parser(
        "add-from-claude-desktop",
        help="import the servers of Claude Desktop (= mcpvisor import claude-desktop)",
        parents=[parent],
        formatter_class=Formatter,
        description="Import the MCP servers configured in Claude Desktop into the mcpvisor config.",
        epilog="examples:\n  mcpvisor mcp add-from-claude-desktop\n"
        "  mcpvisor mcp add-from-claude-desktop --dry-run --format json\n",
    )
    importer.add_import_options(desktop)
    desktop.set_defaults(func=importer.run, client="claude-desktop")
