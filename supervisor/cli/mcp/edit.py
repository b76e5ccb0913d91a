"""``mcpvisor mcp remove|enable|disable NAME``: edits of one configured server."""

from __future__ import annotations

import argparse
from typing import Any

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, Formatter
from mcpvisor.cli.config_cmd import CommandError
from mcpvisor.cli.mcp._common import fails, server_target, unknown
from mcpvisor.entries import open_store


def register(cmds: Any, parent: argparse.ArgumentParser) -> None:
    rm = cmds.add_parser(
        "remove",
        help="remove a server",
        parents=[parent],
        formatter_class=Formatter,
        description="Remove a server from the config file (asks first on a terminal).",
        epilog="examples:\n  mcpvisor mcp remove git\n  mcpvisor mcp remove git --yes\n",
    )
    rm.add_argument("name", metavar="NAME")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    out.add_format(rm, ("text", "json"))
    rm.set_defaults(func=run_remove)

    for verb, enabled in (("enable", True), ("disable", False)):
        sw = cmds.add_parser(
            verb,
            help=f"{verb} a server",
            parents=[parent],
            formatter_class=Formatter,
            description=f"{verb.capitalize()} a server (a running proxy "
            f"{'starts' if enabled else 'stops'} it on its own).",
            epilog=f"examples:\n  mcpvisor mcp {verb} git\n",
        )
        sw.add_argument("name", metavar="NAME")
        out.add_format(sw, ("text", "json"))
        sw.set_defaults(func=run_enable if enabled else run_disable)


@fails
def run_remove(args: argparse.Namespace) -> int:
    target = server_target(args)
    store = open_store(target.path)
    known = store.server_names()
    if args.name not in known:
        raise CommandError(unknown(args.name, known, target))
    if (
        not args.yes
        and out.interactive()
        and not out.confirm(f"Remove server {args.name!r} from {target.path}?")
    ):
        out.note("not removed")
        return EXIT_FAILED
    store.remove_server(args.name)
    if args.format == "json":
        out.print_json({"removed": args.name, "file": str(target.path)})
    else:
        out.say(f"Removed server {args.name!r} from {target.path}")
    return EXIT_OK


def _switch(args: argparse.Namespace, enabled: bool) -> int:
    target = server_target(args)
    changed = open_store(target.path).set_enabled(args.name, enabled)
    verb = "enabled" if enabled else "disabled"
    if args.format == "json":
        out.print_json(
            {"server": args.name, "enabled": enabled, "changed": changed, "file": str(target.path)}
        )
    elif changed:
        out.say(f"{verb.capitalize()} server {args.name!r} in {target.path}")
    else:
        out.say(f"Server {args.name!r} was already {verb} in {target.path}")
    return EXIT_OK


@fails
def run_enable(args: argparse.Namespace) -> int:
    return _switch(args, True)


@fails
def run_disable(args: argparse.Namespace) -> int:
    return _switch(args, False)
