"""``mcpvisor mcp add`` and ``mcp add-json``: a server into the config, as Claude Code adds one.

Every install line an MCP server's README prints for Claude Code works with ``claude``
replaced by ``mcpvisor``::

    mcpvisor mcp add fs -- npx -y @modelcontextprotocol/server-filesystem /tmp/project
    mcpvisor mcp add playwright npx @playwright/mcp@latest
    mcpvisor mcp add --transport http notion https://mcp.notion.com/mcp
    mcpvisor mcp add -e KEY=v github -- docker run -i --rm -e KEY ghcr.io/github/github-mcp-server

The command line is split before argparse sees it (`.argv.split_argv`): everything after the
first ``--`` is the server's command and arguments, verbatim; without ``--``, the first
word after NAME that is not a URL starts the command. Our own options go before NAME,
between NAME and the command, and after a URL. argparse then parses only our part, once.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from mcpvisor.actors.core.vocabulary import TRANSPORTS, URL_TRANSPORTS
from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Formatter
from mcpvisor.cli.config_cmd import CommandError, exit_code_of, locate_for_write, store_errors
from mcpvisor.cli.mcp._common import fails
from mcpvisor.cli.mcp.argv import COMMAND_DEST, add_options, looks_like_url, scope_option
from mcpvisor.entries import drop_empty, mask_entry, open_store, unset_variables, validate_document

ADD_EPILOG: Final = """\
examples:  (servers' README install lines, with mcpvisor for claude)
  mcpvisor mcp add git -- uvx mcp-server-git --repository .
  mcpvisor mcp add fs -- npx -y @modelcontextprotocol/server-filesystem ~/notes
  mcpvisor mcp add playwright npx @playwright/mcp@latest      # no --: the command starts after NAME
  mcpvisor mcp add github -e GITHUB_PERSONAL_ACCESS_TOKEN=${TOKEN} -- docker run -i --rm \\
      -e GITHUB_PERSONAL_ACCESS_TOKEN ghcr.io/github/github-mcp-server
  mcpvisor mcp add --transport http notion https://mcp.notion.com/mcp
  mcpvisor mcp add --transport sse asana https://mcp.asana.com/sse
  mcpvisor mcp add docs https://example.com/mcp -H "Authorization: Bearer ${TOKEN}"
  mcpvisor mcp add box --transport stdio-docker --image mcp/everything --lazy
  mcpvisor mcp add big --description "Large toolbox" --lazy --timeout 30s -- node big.js

Everything after -- is the server's command and arguments, as written. Our options go
before NAME or between NAME and -- (or after a URL).

--scope (-s), as in Claude Code: local (default) the config the lookup finds (./mcpvisor.json,
./.mcp.json, ...), else a new ./mcpvisor.json; project ./.mcp.json, the file shared with your
team; user the user config. Missing fields are asked for on a terminal; elsewhere they are an
error.
"""

ADD_JSON_EPILOG: Final = """\
examples:
  mcpvisor mcp add-json weather '{"type":"stdio","command":"/path/to/weather-cli","args":["--api-key","abc"]}'
  mcpvisor mcp add-json docs '{"type":"http","url":"https://example.com/mcp"}' --scope user

The JSON is one server entry, as in .mcp.json; it is checked like the whole config (exit 2
with one line per problem, naming the field). Empty "args", "env" and "headers" are dropped.
"""


def register(cmds: Any, parent: argparse.ArgumentParser) -> None:
    add = cmds.add_parser(
        "add",
        help="add a server (Claude Code's `claude mcp add` lines work as they are)",
        parents=[parent],
        formatter_class=Formatter,
        description="Add a server to the config file (validated before it is written).",
        epilog=ADD_EPILOG,
        allow_abbrev=False,  # `split_argv` must know every option by its full name
        usage="mcpvisor mcp add [OPTIONS] NAME [URL | COMMAND ARGS... | -- COMMAND ARGS...]",
    )
    add.add_argument("name", metavar="NAME", nargs="?", help="server name (letters, digits, _ and -)")
    add.add_argument("target", metavar="URL", nargs="?", help="the server's URL (http, sse, ws)")
    add_options(add)
    add.set_defaults(func=run_add, **{COMMAND_DEST: None})

    add_json = cmds.add_parser(
        "add-json",
        help="add a server from a JSON entry (Claude Code's add-json)",
        parents=[parent],
        formatter_class=Formatter,
        description="Add a server given as one JSON entry, as it would appear in .mcp.json.",
        epilog=ADD_JSON_EPILOG,
    )
    add_json.add_argument("name", metavar="NAME", help="server name (letters, digits, _ and -)")
    add_json.add_argument("json", metavar="JSON", help="the server's entry, a JSON object")
    scope_option(add_json)
    add_json.add_argument("--force", action="store_true", help="replace a server of the same name")
    out.add_format(add_json, ("text", "json"))
    add_json.set_defaults(func=run_add_json)


# --- add ------------------------------------------------------------------------------------


def _pairs(values: Sequence[str], flag: str, *, header: bool = False) -> dict[str, str]:
    """``K=V`` (or, for headers, ``K: V``) options into a dict, later ones winning."""
    result: dict[str, str] = {}
    for raw in values:
        colon, equals = raw.find(":"), raw.find("=")
        if header and colon > 0 and (equals < 0 or colon < equals):
            key, value = raw[:colon].strip(), raw[colon + 1 :].strip()
        elif equals > 0:
            key, value = raw[:equals].strip(), raw[equals + 1 :]
        else:
            raise CommandError(f'{flag} "{raw}": expected K=V' + (' or "K: V"' if header else ""))
        if not key:
            raise CommandError(f'{flag} "{raw}": the name before "=" is empty')
        result[key] = value
    return result


def _command_of(args: argparse.Namespace) -> list[str]:
    """The server's command and arguments; a URL positional becomes ``--url``."""
    command: list[str] | None = getattr(args, COMMAND_DEST, None)
    if command is not None and not command:
        raise CommandError(
            f"mcp add {args.name or 'NAME'}: nothing after --; give the server's command "
            "(mcpvisor mcp add NAME -- COMMAND ARGS...)"
        )
    if args.target is not None:
        if not looks_like_url(args.target):
            if command is not None:
                raise CommandError(
                    f"mcp add {args.name}: unexpected {args.target!r} before --; the command and "
                    "its arguments go after -- (mcpvisor mcp add NAME [OPTIONS] -- COMMAND ARGS...)"
                )
            return [args.target]
        if args.url and args.url != args.target:
            raise CommandError(f"mcp add: two URLs, {args.target} and --url {args.url}")
        args.url = args.target
    return list(command or [])


def _ask_missing(args: argparse.Namespace) -> None:
    """Fill what `mcp add` needs and was not given: ask on a terminal, else fail naming it."""
    if args.name is None:
        if not out.interactive():
            raise CommandError("mcp add: missing NAME (usage: mcpvisor mcp add NAME -- COMMAND ARGS...)")
        args.name = out.ask("Server name")
    if args.transport is None:
        if args.url:
            args.transport = "ws" if args.url.startswith(("ws://", "wss://")) else "http"
        elif args.image:
            args.transport = "stdio-docker"
        elif args.command:
            args.transport = "stdio"
        elif out.interactive():
            args.transport = out.ask("Transport", choices=TRANSPORTS, default="stdio")
        else:
            raise CommandError(
                f"mcp add {args.name}: missing what to run: a command after -- (stdio), "
                "--url (http, sse, ws) or --image (stdio-docker)"
            )
    field = {"stdio": "command", "stdio-docker": "image"}.get(args.transport, "url")
    if field == "command" and not args.command:
        if not out.interactive():
            raise CommandError(
                f"mcp add {args.name}: missing the command (stdio): "
                f"mcpvisor mcp add {args.name} -- COMMAND ARGS..."
            )
        import shlex

        args.command = shlex.split(out.ask("Command and arguments"))
    elif field == "url" and not args.url:
        if not out.interactive():
            raise CommandError(f"mcp add {args.name}: missing --url (transport {args.transport})")
        args.url = out.ask("URL")
    elif field == "image" and not args.image:
        if not out.interactive():
            raise CommandError(f"mcp add {args.name}: missing --image (transport stdio-docker)")
        args.image = out.ask("Docker image")


def build_entry(args: argparse.Namespace) -> dict[str, Any]:
    """The config entry for `mcp add`: a Claude Code `.mcp.json` entry plus mcpvisor's keys.

    Empty ``args``, ``env`` and ``headers`` are left out.
    """
    transport = args.transport
    env = _pairs(args.env, "--env")
    headers = _pairs(args.header, "--header", header=True)
    if headers and transport not in URL_TRANSPORTS:
        raise CommandError(f"--header applies to http, sse and ws servers, not {transport}")
    if env and transport not in ("stdio", "stdio-docker"):
        raise CommandError(f"--env applies to stdio and stdio-docker servers, not {transport}")
    if args.url and transport not in URL_TRANSPORTS:
        raise CommandError(
            f"the URL {args.url} needs an http, sse or ws transport, not --transport {transport}"
        )
    if args.image and transport != "stdio-docker":
        raise CommandError(f"--image applies to stdio-docker servers, not {transport}")
    if args.docker_arg and transport != "stdio-docker":
        raise CommandError(f"--docker-arg applies to stdio-docker servers, not {transport}")
    if args.cwd and transport != "stdio":
        raise CommandError(f"--cwd applies to stdio servers, not {transport}")
    if args.command and transport in URL_TRANSPORTS:
        raise CommandError(f"a {transport} server takes a URL, not a command ({' '.join(args.command)})")
    entry: dict[str, Any]
    if transport == "stdio":
        entry = {"command": args.command[0]}
        if args.command[1:]:
            entry["args"] = list(args.command[1:])
        if env:
            entry["env"] = env
        if args.cwd:
            entry["cwd"] = args.cwd
    elif transport == "stdio-docker":
        entry = {"type": "stdio-docker", "image": args.image}
        if args.command:
            entry["args"] = list(args.command)
        if args.docker_arg:
            entry["dockerArgs"] = list(args.docker_arg)
        if env:
            entry["env"] = env
    else:
        entry = {"type": transport, "url": args.url}
        if headers:
            entry["headers"] = headers
    oauth = {key: value for key, value in (("clientId", getattr(args, "client_id", None)),
                                           ("clientSecret", getattr(args, "client_secret", None)),
                                           ("callbackPort", getattr(args, "callback_port", None)))
             if value is not None}
    if oauth and transport not in ("http", "sse"):
        raise CommandError(f"--client-id, --client-secret and --callback-port apply to http and sse servers, "
                           f"not {transport}")
    if oauth:
        entry["oauth"] = oauth
    if args.description:
        entry["description"] = args.description
    if args.disabled:
        entry["enabled"] = False
    if args.lazy:
        entry["lazy"] = True
    if args.timeout:
        entry["timeout"] = _number_or_text(args.timeout)
    return entry


def _number_or_text(text: str) -> float | int | str:
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


def _check_name(name: str) -> None:
    from mcpvisor._config_types import NAME_RE, NAME_RULE

    if not NAME_RE.match(name):
        raise CommandError(f'server name "{name}" is invalid: {NAME_RULE}')


@fails
def run_add(args: argparse.Namespace) -> int:
    args.command = _command_of(args)
    if args.url and args.transport is not None and args.transport not in URL_TRANSPORTS:
        raise CommandError(
            f"mcp add {args.name or 'NAME'}: the URL {args.url} needs --transport http, sse or ws, "
            f"not {args.transport} (a {args.transport} server runs a command: -- COMMAND ARGS...)"
        )
    _ask_missing(args)
    _check_name(args.name)
    return _write(args, build_entry(args))


def disk_problem(err: OSError, path: Path) -> str:
    """Why writing ``path`` failed, in words (the other file involved named when it is not ``path``)."""
    reason = err.strerror or type(err).__name__
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        reason += " (free some space, or write the config elsewhere with --config)"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason += " (the directory is not writable: choose another --config or --scope)"
    if err.filename and os.fspath(err.filename) != os.fspath(path):
        reason += f"; at {os.fsdecode(err.filename)}"
    return reason


def _write(args: argparse.Namespace, entry: dict[str, Any]) -> int:
    """Add ``entry`` as server ``args.name`` to the file ``--scope`` and the lookup choose."""
    target = locate_for_write(args, args.scope)
    store = open_store(target.path)
    existed = target.path.is_file()
    try:
        store.add_server(args.name, entry, force=args.force)
    except store_errors() as err:
        raise CommandError(str(err), exit_code_of(err)) from None
    except OSError as err:  # a full disk, a read-only or missing directory: one line, no traceback
        problem = disk_problem(err, target.path)
        raise CommandError(f"cannot write {target.path}: {problem}", EXIT_FAILED) from None
    warnings = [w for w in unset_variables(store.read(), target.path) if f'server "{args.name}"' in w]
    where = f"{target.path} ({'created: ' if not existed else ''}{target.why})"
    if args.format == "json":
        out.print_json(
            {
                "added": args.name,
                "file": str(target.path),
                "created": not existed,
                "entry": mask_entry(entry),
                "warnings": warnings,
            }
        )
        return EXIT_OK
    kind = entry.get("type", "stdio")
    out.say(f"Added {kind} server {args.name!r} to {where}", style="green")
    for warning in warnings:
        out.note(f"note: {warning} (the proxy needs it in its environment)")
    return EXIT_OK


# --- add-json -------------------------------------------------------------------------------

@fails
def run_add_json(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mcpvisor.config import ConfigError

    _check_name(args.name)
    where = f"mcp add-json {args.name}"
    try:
        entry = json.loads(args.json)
    except json.JSONDecodeError as err:
        raise CommandError(f"{where}: JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    if not isinstance(entry, dict):
        raise CommandError(f"{where}: JSON: expected an object (one server entry), got {args.json[:40]!r}")
    entry = drop_empty(entry)
    label = Path("JSON")
    try:
        validate_document({"mcpServers": {args.name: entry}}, label)
    except ConfigError as err:
        lines = [p.removeprefix(f"{label}: ").removeprefix(f'server "{args.name}": ') for p in err.problems]
        raise CommandError("\n".join(f"{where}: {line}" for line in lines), EXIT_USAGE) from None
    return _write(args, entry)
