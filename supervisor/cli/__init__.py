"""The ``mcpvisor`` command line.

Each subcommand lives in its own module here and registers itself with
`register(subparsers)`; `main` builds the parser and runs the chosen command.
Exit codes: 0 ok, 1 a failed check, 2 bad usage or a bad config; a command stopped by
Ctrl-C exits 130 and one whose reader went away (``| head``) 141, quietly, as a shell
reports those signals.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Final

from mcpvisor.cli._base import (
    EXIT_CLOSED_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Formatter,
    quiet_exit,
)

COMMAND_MODULES: Final = ("serve", "status", "dashboard", "mcp", "toolset", "importer", "config_cmd",
                          "journal_cmd", "store_cmd", "bench")
"""Subcommand modules, in the order ``--help`` lists them."""

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "Formatter",
           "build_parser", "main", "quiet_exit"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` the one subcommand a command line names:
    each module imports what its command needs, and ``serve`` should not pay for the others'."""
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
        if only is None or name == only:
            importlib.import_module(f"mcpvisor.cli.{name}").register(sub)
    return parser


LEAN_COMMANDS: Final = frozenset({"serve"})
"""Commands whose start time a user waits on (a client launches ``serve`` and waits for
its ``initialize`` answer): their command line is parsed with their own module only."""


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["bench"]:  # the benchmark parses its own flags (`mcpvisor.cli.bench`)
        from mcpvisor.cli.bench import run as run_bench

        return run_bench(words[1:])
    parser = build_parser(words[0] if words[:1] and words[0] in LEAN_COMMANDS else None)
    command = None
    if words[:1] == ["mcp"]:
        from mcpvisor.cli.mcp import COMMAND_DEST, split_argv

        words, command = split_argv(words)  # `mcp add`'s command
    args = parser.parse_args(words)
    if command is not None:
        setattr(args, COMMAND_DEST, command)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except BaseException as exc:
        code = quiet_exit(exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
