"""The ``mcpvisor`` command line.

Each subcommand lives in its own module here and registers itself with
`register(subparsers)`; `main` builds the parser and runs the chosen command.
Exit codes: 0 ok, 1 a failed check, 2 bad usage or a bad config.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

COMMAND_MODULES: Final = ("serve", "status", "dashboard", "mcp", "toolset", "importer", "config_cmd",
                          "journal_cmd", "bench")
"""Subcommand modules, in the order ``--help`` lists them."""


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in epilogs as written."""


def build_parser() -> argparse.ArgumentParser:
    from mcpvisor import __version__

    parser = argparse.ArgumentParser(
        prog="mcpvisor",
        description=("One MCP server in front of many: supervised upstreams, toolsets, "
                     "a lean tool-call path."),
        formatter_class=Formatter,
        epilog=("examples:\n  mcpvisor serve --demo --transport http\n"
                "  mcpvisor serve --config mcpvisor.json\n"),
    )
    parser.add_argument("--version", action="version", version=f"mcpvisor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"mcpvisor.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from mcpvisor.cli.mcp import COMMAND_DEST, split_argv

    parser = build_parser()
    words, command = split_argv(sys.argv[1:] if argv is None else argv)  # `mcp add`'s command
    args = parser.parse_args(words)
    if command is not None:
        setattr(args, COMMAND_DEST, command)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
