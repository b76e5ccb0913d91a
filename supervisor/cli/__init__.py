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
                          "journal_cmd", "bench")
"""Subcommand modules, in the order ``--help`` lists them."""

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "Formatter",
           "build_parser", "main", "quiet_exit"]


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

    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["bench"]:  # the benchmark parses its own flags (`mcpvisor.cli.bench`)
        from mcpvisor.cli.bench import run as run_bench

        return run_bench(words[1:])
    parser = build_parser()
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
