"""``mcpvisor import claude-code|claude-desktop|cursor|vscode [PATH]``: bring existing configs in.

``mcpvisor mcp add-from-claude-desktop`` (Claude Code's name) is ``import claude-desktop``.

Owns the command: find the client's config (its usual places, or PATH), show what the
import will do (add, skip an identical server, skip / rename / replace a different one
of the same name), ask on a terminal, and write everything in one locked, atomic,
validated edit of the config file (`mcpvisor.store.ConfigStore`). Reading and
converting the other clients' formats is `mcpvisor.importers`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, Formatter
from mcpvisor.cli.config_cmd import CommandError, config_option, exit_code_of, locate_for_write, store_errors
from mcpvisor.entries import drop_empty, mask_entry, open_store, validate_document

if TYPE_CHECKING:
    from mcpvisor.importers import Action, Found

EPILOG: Final = """\
examples:
  mcpvisor import claude-code                     # ./.mcp.json and ~/.claude.json (this project, user)
  mcpvisor import claude-desktop --dry-run        # show what would be added
  mcpvisor import cursor ~/work/app/.cursor/mcp.json --on-conflict rename
  mcpvisor import vscode --yes --format json

where each client keeps its servers:
  claude-code     ./.mcp.json, ~/.claude.json (mcpServers, projects.<this dir>.mcpServers)
  claude-desktop  claude_desktop_config.json in ~/.config/Claude (Linux), ~/Library/Application Support/Claude
                  (macOS), %APPDATA%\\Claude (Windows)
  cursor          ./.cursor/mcp.json, ~/.cursor/mcp.json
  vscode          ./.vscode/mcp.json, the user mcp.json and settings.json ("mcp.servers")
"""


CLIENTS: Final = ("claude-code", "claude-desktop", "cursor", "vscode")
CONFLICT_POLICIES: Final = ("skip", "rename", "replace")
"""`mcpvisor.importers.CLIENTS` / `CONFLICT_POLICIES`, repeated so `--help` does not import it."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="import servers from Claude Code, Claude Desktop, Cursor or VS Code",
        description="Import MCP servers from another client's config into the mcpvisor config.",
        formatter_class=Formatter,
        epilog=EPILOG,
        parents=[config_option()],
    )
    p.add_argument("client", metavar="CLIENT", choices=CLIENTS, help=" | ".join(CLIENTS))
    add_import_options(p)
    p.set_defaults(func=run)


def add_import_options(p: argparse.ArgumentParser) -> None:
    """The options after CLIENT (shared with ``mcp add-from-claude-desktop``)."""
    p.add_argument(
        "path", metavar="PATH", nargs="?", help="read this file instead of the client's usual places"
    )
    p.add_argument(
        "--on-conflict",
        choices=CONFLICT_POLICIES,
        default="skip",
        help="a different server of the same name exists: skip it (default), add it as NAME-2, "
        "or replace the configured one",
    )
    p.add_argument(
        "--only", metavar="NAME", action="append", default=[], help="import only this server (repeatable)"
    )
    p.add_argument(
        "-s",
        "--scope",
        choices=("local", "project", "user"),
        help="where to write when --config is not given (as for `mcp add`)",
    )
    p.add_argument("--dry-run", action="store_true", help="show what would be done, write nothing")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    out.add_format(p, ("text", "json"))


def _read(args: argparse.Namespace) -> tuple[list[Found], list[str], list[str]]:
    from mcpvisor.importers import ImportSource, default_sources, read_sources

    if args.path:
        path = Path(args.path).expanduser()
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        sources = [ImportSource(path, "given")]
    else:
        sources = default_sources(args.client)
    try:
        found, warnings, existing = read_sources(args.client, sources)
    except ValueError as err:
        raise CommandError(str(err)) from None
    if args.only:
        found = [f for f in found if f.name in args.only or f.original in args.only]
    found = [_without_empty(f) for f in found]
    looked = list(dict.fromkeys(str(s.path) for s in sources))  # ~/.claude.json is read twice, named once
    if not existing:
        raise CommandError(
            f"no {args.client} config found; looked at: {', '.join(looked)} "
            "(give its path: mcpvisor import CLIENT PATH)",
            EXIT_FAILED,
        )
    return found, warnings, looked


def _without_empty(found: Found) -> Found:
    """An imported entry without empty ``args``, ``env`` or ``headers``, as `mcp add` writes them."""
    import dataclasses


    return found if found.entry is None else dataclasses.replace(found, entry=drop_empty(found.entry))


SELF_SKIP: Final = ("runs mcpvisor itself: skipped (a proxy never runs itself as one of its own servers; "
                    "it would read the same config and start itself again)")


def _runs_mcpvisor(entry: Mapping[str, Any]) -> bool:
    """Whether an imported entry starts ``mcpvisor serve``: directly (this installation's
    script, ``python -m mcpvisor``), or through a launcher or a shell (``uvx mcpvisor
    serve``, ``sh -c "mcpvisor serve"``), as the line our README gives for Claude Code does."""
    import os
    import shlex

    from mcpvisor.actors.upstream.preflight import SCRIPT_NAME, SERVE, runs_mcpvisor

    command = entry.get("command")
    if not isinstance(command, str):
        return False
    args = [a for a in entry.get("args") or () if isinstance(a, str)]
    if runs_mcpvisor([command, *args], path=os.environ.get("PATH")):
        return True
    words: list[str] = []
    for part in [command, *args]:
        try:
            words += shlex.split(part)
        except ValueError:
            words.append(part)
    names = [Path(w).name for w in words]
    return SCRIPT_NAME in names and SERVE in names[names.index(SCRIPT_NAME) + 1 :]


def _validated(found: list[Found], target: Path) -> list[Found]:
    """Each found entry checked on its own: one that mcpvisor would reject is skipped with why."""
    import dataclasses

    from mcpvisor.config import ConfigError

    checked = []
    for item in found:
        if item.entry is not None and _runs_mcpvisor(item.entry):
            item = dataclasses.replace(item, entry=None, notes=(*item.notes, SELF_SKIP))
        if item.entry is not None:
            try:
                validate_document({"mcpServers": {item.name: dict(item.entry)}}, target)
            except ConfigError as err:
                reason = "; ".join(p.split(": ", 2)[-1] for p in err.problems)
                item = dataclasses.replace(item, entry=None, notes=(*item.notes, f"invalid here: {reason}"))
        checked.append(item)
    return checked


def _describe(action: Action) -> dict[str, Any]:
    from mcpvisor.cli.mcp.inspect import target_of
    from mcpvisor.config import ConfigError, parse_config

    entry = action.found.entry
    transport, what = "?", ""
    if entry is not None:
        transport = entry.get("type", "stdio")
        try:
            spec = parse_config(
                {"mcpServers": {"x": dict(entry)}, "settings": {"envMode": "disable"}}
            ).servers["x"]
            what = target_of(spec)
        except ConfigError:
            what = str(entry.get("url") or entry.get("command") or "")
    return {
        "action": action.kind,
        "name": action.name,
        "original": action.found.original,
        "source": action.found.source,
        "transport": transport,
        "target": what,
        "reason": action.reason,
        "notes": list(action.found.notes),
        "entry": mask_entry(entry) if entry is not None else None,
    }


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except CommandError as err:
        out.error(str(err))
        return err.code
    except store_errors() as err:
        out.error(str(err))
        return exit_code_of(err)


def _run(args: argparse.Namespace) -> int:
    from mcpvisor.importers import plan_import
    from mcpvisor.store import MalformedConfig

    found, warnings, looked = _read(args)
    for warning in warnings:
        out.note(f"warning: {warning}")
    target = locate_for_write(args, args.scope)
    store = open_store(target.path)
    found = _validated(found, target.path)
    current = store.read().get("mcpServers", {})
    if not isinstance(current, dict):
        raise MalformedConfig(target.path, '"mcpServers" must be an object')
    actions = plan_import(current, found, args.on_conflict)
    writes = [a for a in actions if a.kind != "skip"]
    rows = [_describe(a) for a in actions]
    if args.format != "json":
        _show(args, target.path, rows, looked)
    if not writes or args.dry_run:
        if args.format == "json":
            out.print_json(
                {"file": str(target.path), "written": False, "dryRun": args.dry_run, "actions": rows}
            )
        elif not writes:
            out.say(f"Nothing to import into {target.path}")
        else:
            out.say("Dry run: nothing written")
        return EXIT_OK
    if (
        not args.yes
        and out.interactive()
        and not out.confirm(
            f"Write {len(writes)} server{'s' if len(writes) != 1 else ''} to {target.path}?", default=True
        )
    ):
        out.note("nothing written")
        return EXIT_FAILED
    with store.edit() as doc:  # planned again under the lock: a concurrent writer's servers count
        servers = doc.setdefault("mcpServers", {})
        if not isinstance(servers, dict):
            raise MalformedConfig(target.path, '"mcpServers" must be an object')
        actions = plan_import(servers, found, args.on_conflict)
        for action in actions:
            if action.kind != "skip" and action.found.entry is not None:
                servers[action.name] = dict(action.found.entry)
    rows = [_describe(a) for a in actions]
    written = [r for r in rows if r["action"] != "skip"]
    if args.format == "json":
        out.print_json({"file": str(target.path), "written": True, "dryRun": False, "actions": rows})
    else:
        out.say(
            f"Imported {len(written)} server{'s' if len(written) != 1 else ''} into {target.path} "
            f"({target.why})",
            style="green",
        )
    return EXIT_OK


def _show(args: argparse.Namespace, target: Path, rows: list[dict[str, Any]], looked: list[str]) -> None:
    if not rows:
        out.say(f"No servers found in {', '.join(looked)}")
        return
    out.say(f"From {args.client} into {target}:", style="bold")
    out.table(
        ["Action", "Name", "Transport", "Command / URL", "Note"],
        [
            [
                r["action"],
                r["name"] + (f" (was {r['original']})" if r["original"] != r["name"] else ""),
                r["transport"],
                r["target"],
                r["reason"] or "",
            ]
            for r in rows
        ],
        styles={
            "Action": lambda cell: {
                "add": "green",
                "rename": "yellow",
                "replace": "yellow",
                "skip": "dim",
            }.get(cell)
        },
    )
    for r in rows:
        for note in r["notes"]:
            if not note.startswith("renamed from"):
                out.note(f"  {r['name']}: {note}")
