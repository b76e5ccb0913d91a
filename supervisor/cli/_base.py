"""What every subcommand module shares: the exit codes, the help formatter and the quiet
ending of a command the user stopped (Ctrl-C, a closed pipe).

Kept apart from the package's ``__init__`` (which builds the parser from the subcommand
modules) so a subcommand never imports the module that imports it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
"""Exit codes: 0 ok, 1 a failed check, 2 bad usage or a bad config."""
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
"""Ctrl-C: what a shell reports for a command killed by SIGINT."""
EXIT_CLOSED_PIPE: Final = 128 + signal.SIGPIPE
"""The reader of stdout went away (``mcpvisor ... | head``): what a shell reports for a
command killed by SIGPIPE, the C default Python replaces with `BrokenPipeError`."""


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in epilogs as written."""


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
