"""What the ``mcpvisor mcp`` subcommands share: names, the ``--timeout`` option, error reporting."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Final

from mcpvisor.cli.config_cmd import (
    CommandError,
    Target,
    exit_code_of,
    locate,
    nothing_found,
    reporting,
    store_errors,
)

SCOPE_CHOICES: Final = ("local", "project", "user")
"""Claude Code's ``-s/--scope`` names (see `mcpvisor.cli.config_cmd.locate_for_write`)."""
STATUS_CHOICES: Final = ("online", "offline", "disabled")
DEFAULT_TIMEOUT_S: Final = 15.0
"""`mcpvisor.probe.DEFAULT_PROBE_TIMEOUT_S`, repeated so that `--help` does not import trio."""
MAX_TIMEOUT_S: Final = 3600.0
"""Upper bound of ``--timeout``: an hour is already far past any server's start-up."""
DESCRIPTION_WIDTH: Final = 60
"""Descriptions in tables are cut to one line of this many characters."""


def timeout_option(parser: argparse.ArgumentParser, *, startup_timeout: bool = False) -> None:
    """``--timeout SECONDS``: the bound on connecting to each server (list, test, info).

    With ``startup_timeout`` the default is None: the server's own ``startupTimeout``,
    the bound the proxy gives it (``mcp test``)."""
    default = "the server's startupTimeout" if startup_timeout else f"{DEFAULT_TIMEOUT_S:g}s"
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=None if startup_timeout else DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f'bound on connecting to each server (default {default}; accepts "30s", "500ms")',
    )


def _seconds(text: str) -> float:
    from mcpvisor.config import parse_duration

    try:
        value = parse_duration(text, field="--timeout", max_s=MAX_TIMEOUT_S, min_s=0.001)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _code_of(err: Exception) -> int | None:
    """A store error's exit code (None: not ours to report)."""
    return exit_code_of(err) if isinstance(err, store_errors()) else None


fails = reporting(_code_of)
"""Report a `CommandError` or store error as one line on stderr and its exit code."""


def unknown(name: str, known: Sequence[str], target: Target) -> str:
    """The message for a server name that is not configured, with close matches."""
    close = difflib.get_close_matches(name, list(known), n=3)
    if close:
        hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        hint = "configured: " + ", ".join(known) if known else "no servers are configured"
    return f"no server named {name!r} in {target.path}; {hint}"


def server_target(args: argparse.Namespace) -> Target:
    """The existing config file a command about one server works on."""
    target = locate(args)
    if target is None:
        raise CommandError(nothing_found())
    if not target.exists:
        raise CommandError(f"{target.path}: no such file ({target.why})")
    return target
