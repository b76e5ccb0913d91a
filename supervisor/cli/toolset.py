"""``mcpvisor toolset list|show|create|delete|equip|unequip``: toolsets from the command line.

Owns the toolset command line: its subcommands, their arguments, help and examples.
What each one does (on the state a running proxy uses, and through the control socket
of every running proxy for ``equip`` and ``unequip``) is `mcpvisor.cli.toolset_commands`.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import Formatter
from mcpvisor.cli.config_cmd import config_option, usage
from mcpvisor.cli.toolset_commands import run_create, run_delete, run_equip, run_list, run_show, run_unequip

DEFAULT_CHECK_TIMEOUT_S: Final = 15.0
"""Bound on connecting to the servers a new toolset names, to check its tools exist."""

EPILOG: Final = """\
examples:
  mcpvisor toolset create dev --tool git.status --tool git.commit --tool fs.read_file
  mcpvisor toolset list
  mcpvisor toolset show dev
  mcpvisor toolset equip dev            # a running proxy switches at once (one list_changed)
  mcpvisor toolset unequip
  mcpvisor toolset delete dev --yes

state directory: --state-dir, else $MCPVISOR_STATE_DIR, else settings.stateDir, else ~/.local/state/mcpvisor
"""


def register(sub: Any) -> None:
    parent = config_option()
    parent.add_argument(
        "--state-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="state directory (default: $MCPVISOR_STATE_DIR, settings.stateDir, ~/.local/state/mcpvisor)",
    )
    p = sub.add_parser(
        "toolset",
        help="build, list and equip toolsets",
        formatter_class=Formatter,
        description="Manage toolsets: named subsets of tools from several servers.",
        epilog=EPILOG,
        parents=[parent],
    )
    p.set_defaults(func=lambda args: usage(p))
    cmds = p.add_subparsers(dest="toolset_command", metavar="SUBCOMMAND")

    ls = cmds.add_parser(
        "list",
        help="list toolsets (saved and declared in the config)",
        parents=[parent],
        formatter_class=Formatter,
        description="List every toolset and which one is equipped.",
        epilog="examples:\n  mcpvisor toolset list\n  mcpvisor toolset list --format json\n",
    )
    out.add_format(ls)
    ls.set_defaults(func=run_list)

    show = cmds.add_parser(
        "show",
        help="show a toolset's tools",
        parents=[parent],
        formatter_class=Formatter,
        description="Show one toolset: its tools, where it comes from, when it was built.",
        epilog="examples:\n  mcpvisor toolset show dev\n  mcpvisor toolset show dev --format json\n",
    )
    show.add_argument("name", metavar="NAME")
    out.add_format(show, ("text", "json"))
    show.set_defaults(func=run_show)

    create = cmds.add_parser(
        "create",
        help="save a new toolset",
        parents=[parent],
        formatter_class=Formatter,
        description="Save a toolset in the state directory. Each tool is server.tool; "
        "by default the servers are contacted to check the tools exist and "
        "to pin their schemas (so a later change is noticed on equip).",
        epilog="examples:\n  mcpvisor toolset create dev --tool git.status --tool fs.read_file\n"
        "  mcpvisor toolset create ops --tool k8s.get_pods k8s.logs --description "
        "'cluster triage'\n  mcpvisor toolset create offline --tool git.status --no-check\n",
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--tool",
        dest="tools",
        action="extend",
        nargs="+",
        default=[],
        metavar="SERVER.TOOL",
        required=True,
        help="a tool, as server.tool (repeatable)",
    )
    create.add_argument("--description", metavar="TEXT")
    create.add_argument("--force", action="store_true", help="replace a saved toolset of the same name")
    create.add_argument("--no-check", action="store_true", help="do not contact the servers (no schema pins)")
    create.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_CHECK_TIMEOUT_S,
        metavar="SECONDS",
        help=f"bound on contacting the servers (default {DEFAULT_CHECK_TIMEOUT_S:g})",
    )
    out.add_format(create, ("text", "json"))
    create.set_defaults(func=run_create)

    delete = cmds.add_parser(
        "delete",
        help="delete a saved toolset",
        parents=[parent],
        formatter_class=Formatter,
        description="Delete a saved toolset (asks first on a terminal).",
        epilog="examples:\n  mcpvisor toolset delete dev\n  mcpvisor toolset delete dev --yes\n",
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    out.add_format(delete, ("text", "json"))
    delete.set_defaults(func=run_delete)

    equip = cmds.add_parser(
        "equip",
        help="equip a toolset (running proxies switch at once)",
        parents=[parent],
        formatter_class=Formatter,
        description="Equip a toolset: clients of every running proxy of this state "
        "directory see exactly its tools. With no proxy running, the next one "
        "starts with it.",
        epilog="examples:\n  mcpvisor toolset equip dev\n",
    )
    equip.add_argument("name", metavar="NAME")
    out.add_format(equip, ("text", "json"))
    equip.set_defaults(func=run_equip)

    unequip = cmds.add_parser(
        "unequip",
        help="unequip the current toolset",
        parents=[parent],
        formatter_class=Formatter,
        description="Unequip the current toolset (running proxies go back to the menu).",
        epilog="examples:\n  mcpvisor toolset unequip\n",
    )
    out.add_format(unequip, ("text", "json"))
    unequip.set_defaults(func=run_unequip)
