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
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
"""Ctrl-C: what a shell reports for a command killed by SIGINT."""
EXIT_CLOSED_PIPE: Final = 128 + signal.SIGPIPE
"""The reader of stdout went away (``mcpvisor ... | head``): what a shell reports for a
command killed by SIGPIPE, the C default Python replaces with `BrokenPipeError`."""

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
    except BaseException as exc:
        code = quiet_exit(exc)
        if code is None:
            raise
        return code


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc`` once every (nested) group is opened."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def quiet_exit(exc: BaseException) -> int | None:
    """The exit code for an ending the user caused, which needs no traceback, else None.

    Ctrl-C (`KeyboardInterrupt`, also as trio raises it out of a nursery, inside an
    exception group) is `EXIT_INTERRUPTED`; a closed stdout (`BrokenPipeError`) is
    `EXIT_CLOSED_PIPE`, and stdout is pointed at /dev/null so the interpreter's final
    flush cannot fail again on the way out.
    """
    leaves = _leaves(exc)
    if leaves and all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        return EXIT_INTERRUPTED
    if leaves and all(isinstance(leaf, BrokenPipeError) for leaf in leaves):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # no real stdout to redirect: nothing left to flush into
            pass
        return EXIT_CLOSED_PIPE
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
