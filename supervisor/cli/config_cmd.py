"""``mcpvisor config path|validate``, and the config-file plumbing the registry commands share.

Owns:

* the ``--config PATH`` option of the ``mcp``, ``toolset``, ``import`` and ``config``
  commands (accepted before or after the subcommand);
* which file a command reads (`locate`, the proxy's own lookup order) and which one it
  writes (`locate_for_write`: the lookup's file, else ``./mcpvisor.json``, or the user
  config file with ``--scope user``);
* `open_store`: the `ConfigStore` every CLI write goes through, validating each document
  before it is written (a `${VAR}` not set in this shell is not an error here: the
  proxy's environment may have it);
* ``config path``: the file in use and why, with the whole lookup order.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Formatter
from mcpvisor.entries import UNSET_VAR_RE, LenientEnv

if TYPE_CHECKING:
    from mcpvisor.config import Config

DEFAULT_NEW_CONFIG: Final = "mcpvisor.json"
"""Created in the current directory by the first `mcp add` when no config exists."""

PROJECT_CONFIG: Final = ".mcp.json"
"""``--scope project`` writes here, in the current directory: Claude Code's project file."""





EPILOG: Final = """\
examples:
  mcpvisor config path                 # which file the proxy and the CLI use, and why
  mcpvisor config path --format json
  mcpvisor config validate --config ~/work/.mcp.json

lookup order: --config, $MCPVISOR_CONFIG, $MCP_PROXY_CONFIG_PATH, ./mcpvisor.json, ./.mcp.json,
the user config file
"""


class CommandError(Exception):
    """A command cannot go on; ``code`` is its exit status (2 bad usage or config, 1 a failure)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def usage(parser: argparse.ArgumentParser) -> int:
    """A command group run without a subcommand: its help on stderr, exit 2."""
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def reporting(code_of: Callable[[Exception], int | None]) -> Callable[[Any], Any]:
    """Decorate a ``run_*(args)``: an error ``code_of`` maps to an exit code (a `CommandError`
    always maps to its own) is one line on stderr and that code; any other error propagates."""

    def decorate(fn: Any) -> Any:
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return int(fn(args))
            except Exception as err:
                code = err.code if isinstance(err, CommandError) else code_of(err)
                if code is None:
                    raise
                out.error(str(err))
                return code

        wrapper.__doc__ = fn.__doc__
        return wrapper

    return decorate


@dataclass(frozen=True, slots=True)
class Target:
    """A config file a command works on, and why that one."""

    path: Path
    why: str
    exists: bool


def config_option() -> argparse.ArgumentParser:
    """A parent parser with ``--config PATH``, usable at the group and subcommand levels."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="config file (default: the lookup order: $MCPVISOR_CONFIG, $MCP_PROXY_CONFIG_PATH, "
        "./mcpvisor.json, "
        "./.mcp.json, the user config file)",
    )
    return parent


def explicit_config(args: argparse.Namespace) -> str | None:
    value = getattr(args, "config", None)
    return value if value else None


def locate(args: argparse.Namespace) -> Target | None:
    """The config file to read: the proxy's lookup order. None when nothing exists."""
    from mcpvisor.config import find_config

    path, why = find_config(explicit_config(args))
    if path is None:
        return None
    return Target(path, why, path.is_file())


def nothing_found() -> str:
    from mcpvisor.config import find_config

    return find_config(None)[1]


def locate_for_write(args: argparse.Namespace, scope: str | None = None) -> Target:
    """The config file an edit goes to (``--config`` always wins).

    ``--scope`` has Claude Code's meaning: ``user`` the user config file; ``project``
    ``./.mcp.json``, the file a project shares (Claude Code reads it too); ``local`` (the
    default) the file the lookup finds (``--config`` and ``$MCPVISOR_CONFIG`` even when it
    does not exist yet), else a new ``./mcpvisor.json``.
    """
    from mcpvisor.config import user_config_path

    if scope == "user" and explicit_config(args) is None:
        path = user_config_path()
        return Target(path, "the user config file (--scope user)", path.is_file())
    if scope == "project" and explicit_config(args) is None:
        path = Path(PROJECT_CONFIG)
        return Target(path, "./.mcp.json, the project's shared file (--scope project)", path.is_file())
    found = locate(args)
    if found is not None:
        return found
    path = Path(DEFAULT_NEW_CONFIG)
    return Target(path, "no config existed, so a new one in the current directory", False)


def require(args: argparse.Namespace) -> Target:
    """The config file to read, or a `CommandError` explaining the lookup."""
    found = locate(args)
    if found is None:
        raise CommandError(f"{nothing_found()}\nCreate one with `mcpvisor mcp add NAME -- COMMAND ARGS...`.")
    if not found.exists:
        raise CommandError(f"{found.path}: no such file ({found.why})")
    return found


def load(target: Target) -> Config:
    """The parsed config, or a `CommandError` (exit 2) listing every problem."""
    from mcpvisor.config import ConfigError, load_config

    try:
        return load_config(target.path)
    except ConfigError as err:
        raise CommandError(f"invalid config ({target.why}):\n{err}") from None


_SERVER_RE: Final = re.compile(r'server "([^"]+)"')


def load_lenient(target: Target) -> tuple[Config, dict[str, str]]:
    """The parsed config, with `${VAR}`s this shell lacks reported per server, not fatal.

    Returns:
        The config (missing variables hold a placeholder) and, per server that uses a
        missing variable, the first such problem: those servers cannot be probed here.

    Raises:
        CommandError: any other problem (exit 2), listing every one.
    """
    from mcpvisor.config import ConfigError, load_config

    try:
        return load_config(target.path), {}
    except ConfigError as err:
        if any(not UNSET_VAR_RE.search(p) for p in err.problems):
            raise CommandError(f"invalid config ({target.why}):\n{err}") from None
        missing: dict[str, str] = {}
        for problem in err.problems:
            found = _SERVER_RE.search(problem)
            if found:
                missing.setdefault(found[1], problem.split(": ", 2)[-1])
    try:
        return load_config(target.path, env=LenientEnv()), missing
    except ConfigError as err:
        raise CommandError(f"invalid config ({target.why}):\n{err}") from None


def store_errors() -> tuple[type[Exception], ...]:
    """The exceptions a store edit raises that the CLI reports (each is a complete message)."""
    from mcpvisor._atomic import LockTimeout
    from mcpvisor.store import StoreError

    return (StoreError, LockTimeout)


def exit_code_of(exc: Exception) -> int:
    from mcpvisor._atomic import LockTimeout

    return EXIT_FAILED if isinstance(exc, LockTimeout | OSError) else EXIT_USAGE


# --- the `config` command ---------------------------------------------------------------------


def register(sub: Any) -> None:
    parent = config_option()
    p = sub.add_parser(
        "config",
        help="which config file is used, and is it valid",
        description="Show which config file the proxy and the CLI use, or validate it.",
        formatter_class=Formatter,
        epilog=EPILOG,
        parents=[parent],
    )
    p.set_defaults(func=lambda args: usage(p))
    cmds = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    path = cmds.add_parser(
        "path",
        help="print the config file in use and why (the lookup order)",
        description="Print the config file in use, why it was chosen, and the lookup order.",
        formatter_class=Formatter,
        parents=[parent],
        epilog="examples:\n  mcpvisor config path\n  mcpvisor config path --format json\n"
        "  MCPVISOR_CONFIG=~/mcp.json mcpvisor config path\n",
    )
    out.add_format(path, ("text", "json"))
    path.set_defaults(func=run_path)
    check = cmds.add_parser(
        "validate",
        help="check the config file; print every problem",
        description="Validate the config file in use; exit 2 and list every problem if it is not valid.",
        formatter_class=Formatter,
        parents=[parent],
        epilog="examples:\n  mcpvisor config validate\n"
        "  mcpvisor config validate --config .mcp.json --format json\n",
    )
    out.add_format(check, ("text", "json"))
    check.set_defaults(func=run_validate)


def lookup_order(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each place the lookup considers, whether it exists, and which one is used."""
    from mcpvisor.config import CONFIG_ENV_VAR, CONFIG_FILE_NAMES, COORDINATOR_ENV_VAR, user_config_path

    explicit = explicit_config(args)
    places: list[dict[str, Any]] = [{"source": "--config", "path": explicit, "given": explicit is not None}]
    for var in (CONFIG_ENV_VAR, COORDINATOR_ENV_VAR):
        env_value = os.environ.get(var) or None
        places.append({"source": f"${var}", "path": env_value, "given": env_value is not None})
    places += [{"source": f"./{name}", "path": f"./{name}", "given": True} for name in CONFIG_FILE_NAMES]
    places.append({"source": "user config file", "path": str(user_config_path()), "given": True})
    chosen = False
    for place in places:
        place["exists"] = bool(place["path"]) and Path(place["path"]).is_file()
        place["used"] = False
        if (
            not chosen
            and place["given"]
            and (place["exists"]
                 or place["source"] in ("--config", f"${CONFIG_ENV_VAR}", f"${COORDINATOR_ENV_VAR}"))
        ):
            place["used"] = chosen = True
    return places


def run_path(args: argparse.Namespace) -> int:
    found = locate(args)
    places = lookup_order(args)
    if args.format == "json":
        out.print_json(
            {
                "path": str(found.path) if found else None,
                "why": found.why if found else nothing_found(),
                "exists": found.exists if found else False,
                "lookup": places,
            }
        )
        return EXIT_OK if found and found.exists else EXIT_FAILED
    if found is None:
        out.say("none: no config file found")
    else:
        out.say(f"{found.path}" + ("" if found.exists else "  (does not exist)"))
        out.say(f"  chosen because: {found.why}")
    out.say("lookup order:")
    width = max(len(str(place["source"])) for place in places)
    for i, place in enumerate(places, start=1):
        if not place["given"]:
            state = "not given" if place["source"] == "--config" else "not set"
            out.say(f"  {i}. {place['source']:<{width}}  {state}")
            continue
        state = "exists" if place["exists"] else "missing"
        mark = "  <- in use" if place["used"] else ""
        shown = place["path"] if place["path"] != place["source"] else ""
        out.say(f"  {i}. {place['source']:<{width}}  {shown + '  ' if shown else ''}{state}{mark}")
    return EXIT_OK if found and found.exists else EXIT_FAILED


def run_validate(args: argparse.Namespace) -> int:
    try:
        target = require(args)
        config = load(target)
    except CommandError as err:
        if args.format == "json":
            problems = str(err).splitlines()
            out.print_json({"ok": False, "path": None, "problems": problems[1:] or problems, "warnings": []})
        else:
            out.error(str(err))
        return err.code
    if args.format == "json":
        out.print_json(
            {
                "ok": True,
                "path": str(target.path),
                "problems": [],
                "warnings": list(config.warnings),
                "servers": list(config.servers),
            }
        )
        return EXIT_OK
    for warning in config.warnings:
        out.note(f"warning: {warning}")
    enabled = len(config.enabled_servers())
    out.say(
        f"{target.path}: valid ({len(config.servers)} servers, {enabled} enabled, "
        f"{len(config.toolsets)} toolsets)"
    )
    return EXIT_OK
