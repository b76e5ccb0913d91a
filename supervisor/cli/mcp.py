"""``mcpvisor mcp add|list|remove|enable|disable|test|info``: the server registry.

Owns the commands a user builds their setup with, the way they already do with
``claude mcp add``. Every write goes through `supervisor.store.ConfigStore` (locked,
atomic, keeps what mcpvisor does not own, validates before writing); a running proxy
watching the file picks each change up by itself (supervisor/reload.py).

``list``, ``test`` and ``info`` connect to servers with the proxy's own code
(`supervisor.probe`), concurrently, each bounded by ``--timeout``, and stop and reap
whatever they start.

Exit codes: 0 ok, 1 a failed check (``mcp test`` of a server that fails), 2 bad usage
or a bad config.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from supervisor.cli import EXIT_FAILED, EXIT_OK, Formatter
from supervisor.cli import _output as out
from supervisor.cli.config_cmd import (
    CommandError,
    Target,
    config_option,
    exit_code_of,
    load_lenient,
    locate,
    locate_for_write,
    nothing_found,
    open_store,
    reporting,
    require,
    store_errors,
    unset_variables,
    usage,
)

if TYPE_CHECKING:
    from supervisor.config import Config, ServerSpec
    from supervisor.probe import ProbeResult

TRANSPORT_CHOICES: Final = ("stdio", "http", "sse", "ws", "stdio-docker")
URL_TRANSPORTS: Final = ("http", "sse", "ws")
STATUS_CHOICES: Final = ("online", "offline", "disabled")
DEFAULT_TIMEOUT_S: Final = 15.0
"""`supervisor.probe.DEFAULT_PROBE_TIMEOUT_S`, repeated so that `--help` does not import trio."""
DESCRIPTION_WIDTH: Final = 60
"""Descriptions in tables are cut to one line of this many characters."""

ADD_EPILOG: Final = """\
examples:
  mcpvisor mcp add git -- uvx mcp-server-git --repository .
  mcpvisor mcp add fs --env ROOT=$HOME/notes -- npx -y @modelcontextprotocol/server-filesystem .
  mcpvisor mcp add docs --transport http --url https://example.com/mcp -H "Authorization=Bearer ${TOKEN}"
  mcpvisor mcp add docs https://example.com/mcp                 # a URL: http is implied
  mcpvisor mcp add old --transport sse --url http://127.0.0.1:9000/sse --disabled
  mcpvisor mcp add box --transport stdio-docker --image mcp/everything --lazy
  mcpvisor mcp add big --description "Large toolbox" --lazy --timeout 30s -- node big.js

Without --config, the server goes into the file the lookup finds (./mcpvisor.json,
./.mcp.json, ...), else into a new ./mcpvisor.json; --scope user writes the user config.
Missing fields are asked for on a terminal; elsewhere they are an error.
"""


def register(sub: Any) -> None:
    parent = config_option()
    p = sub.add_parser(
        "mcp",
        help="add, list, test and remove servers in the config",
        description="Manage the MCP servers in the config file.",
        formatter_class=Formatter,
        parents=[parent],
        epilog="examples:\n  mcpvisor mcp add git -- uvx mcp-server-git\n  mcpvisor mcp list\n"
        "  mcpvisor mcp test git\n  mcpvisor mcp info git\n  mcpvisor mcp remove git --yes\n",
    )
    p.set_defaults(func=lambda args: usage(p))
    cmds = p.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND")

    add = cmds.add_parser(
        "add",
        help="add a server",
        parents=[parent],
        formatter_class=Formatter,
        description="Add a server to the config file (validated before it is written).",
        epilog=ADD_EPILOG,
    )
    add.add_argument("name", metavar="NAME", nargs="?", help="server name (letters, digits, _ and -)")
    add.add_argument(
        "rest",
        metavar="-- COMMAND ARGS... | URL",
        nargs=argparse.REMAINDER,
        help="after --: the command and its arguments (stdio); or a URL (http, sse, ws)",
    )
    _add_options(add)
    add.set_defaults(func=run_add)

    ls = cmds.add_parser(
        "list",
        help="list servers with their state and tool count",
        parents=[parent],
        formatter_class=Formatter,
        description="List the configured servers, connecting to each (concurrently, each "
        "bounded by --timeout) to show whether it is online and how many tools "
        "it has.",
        epilog="examples:\n  mcpvisor mcp list\n  mcpvisor mcp list --status offline\n"
        "  mcpvisor mcp list --enabled --format json | jq '.[].name'\n",
    )
    out.add_format(ls)
    ls.add_argument("--enabled", action="store_true", help="only enabled servers")
    ls.add_argument("--status", choices=STATUS_CHOICES, help="only servers in this state")
    _timeout_option(ls)
    ls.set_defaults(func=run_list)

    test = cmds.add_parser(
        "test",
        help="connect to a server, initialize, list tools, show timings",
        parents=[parent],
        formatter_class=Formatter,
        description="Connect to one server (start it, for stdio), initialize, list its "
        "tools, and print each step's timing. On failure, say why: command "
        "not found, exit status and stderr, HTTP status, timeout. Exit 1 if it "
        "fails.",
        epilog="examples:\n  mcpvisor mcp test git\n  mcpvisor mcp test docs --timeout 30\n"
        "  mcpvisor mcp test git --format json\n",
    )
    test.add_argument("name", metavar="NAME")
    out.add_format(test, ("text", "json"))
    _timeout_option(test)
    test.set_defaults(func=run_test)

    info = cmds.add_parser(
        "info",
        help="show a server's config (secrets masked) and its tools",
        parents=[parent],
        formatter_class=Formatter,
        description="Show one server's config, literal header and env values masked as "
        "***, and its tools with one-line descriptions.",
        epilog="examples:\n  mcpvisor mcp info git\n  mcpvisor mcp info docs --no-probe\n"
        "  mcpvisor mcp info git --format json\n",
    )
    info.add_argument("name", metavar="NAME")
    info.add_argument("--no-probe", action="store_true", help="only the config; do not connect for the tools")
    out.add_format(info, ("text", "json"))
    _timeout_option(info)
    info.set_defaults(func=run_info)

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


def _add_options(add: argparse.ArgumentParser) -> None:
    """The options of `mcp add` (also parsed again from what follows NAME: see `_reparse`)."""
    add.add_argument(
        "-t",
        "--transport",
        choices=TRANSPORT_CHOICES,
        help="stdio (default with a command), http (default with a URL), sse, ws, stdio-docker",
    )
    add.add_argument("--url", help="the server's URL (http, sse, ws)")
    add.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help='an HTTP header (repeatable); "K: V" works too',
    )
    add.add_argument(
        "-e",
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for the server process (repeatable)",
    )
    add.add_argument("--image", help="the docker image (stdio-docker)")
    add.add_argument(
        "--docker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra `docker run` argument (stdio-docker, repeatable)",
    )
    add.add_argument("--cwd", metavar="DIR", help="working directory of the server process (stdio)")
    add.add_argument("--description", metavar="TEXT", help="what the server is for (shown in `mcp list`)")
    add.add_argument("--disabled", action="store_true", help="add it disabled (the proxy will not start it)")
    add.add_argument("--lazy", action="store_true", help="start it only when one of its tools is needed")
    add.add_argument(
        "--timeout", metavar="DURATION", help='call timeout, e.g. "30s" or "500ms" (default 60s)'
    )
    add.add_argument(
        "-s",
        "--scope",
        choices=("project", "user"),
        help="project: the config the lookup finds, else ./mcpvisor.json; user: the user config",
    )
    add.add_argument("--force", action="store_true", help="replace a server of the same name")
    out.add_format(add, ("text", "json"))


def _reparse(args: argparse.Namespace) -> None:
    """Split what followed NAME at the first ``--``: options (and a URL) before it, the
    command after it. argparse alone cannot take options between NAME and ``--``."""
    rest = list(args.rest or [])
    head, command = (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    args.command = command
    args.target = []
    if head:
        parser = argparse.ArgumentParser(
            prog="mcpvisor mcp add NAME", add_help=False, parents=[config_option()]
        )
        parser.add_argument("target", nargs="*")
        _add_options(parser)
        parser.parse_args(head, namespace=args)
    if args.target:
        if len(args.target) == 1 and _looks_like_url(args.target[0]) and not args.url:
            args.url = args.target[0]
        elif not args.command:
            args.command = list(args.target)
        else:
            raise CommandError(f"mcp add: unexpected {' '.join(args.target)!r} before --")


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f'bound on connecting to each server (default {DEFAULT_TIMEOUT_S:g}s; accepts "30s", "500ms")',
    )


def _seconds(text: str) -> float:
    from supervisor.config import parse_duration

    try:
        value = parse_duration(text, field="--timeout", max_s=3600.0, min_s=0.001)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _code_of(err: Exception) -> int | None:
    """A store error's exit code (None: not ours to report)."""
    return exit_code_of(err) if isinstance(err, store_errors()) else None


_fails = reporting(_code_of)
"""Report a `CommandError` or store error as one line on stderr and its exit code."""


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


def _looks_like_url(text: str) -> bool:
    return "://" in text and text.split("://", 1)[0] in ("http", "https", "ws", "wss")


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
            args.transport = out.ask("Transport", choices=TRANSPORT_CHOICES, default="stdio")
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
    """The config entry for `mcp add`: a Claude Code `.mcp.json` entry plus mcpvisor's keys."""
    transport = args.transport
    env = _pairs(args.env, "--env")
    headers = _pairs(args.header, "--header", header=True)
    if headers and transport not in URL_TRANSPORTS:
        raise CommandError(f"--header applies to http, sse and ws servers, not {transport}")
    if env and transport not in ("stdio", "stdio-docker"):
        raise CommandError(f"--env applies to stdio and stdio-docker servers, not {transport}")
    if args.url and transport not in URL_TRANSPORTS:
        raise CommandError(f"--url applies to http, sse and ws servers, not {transport}")
    if args.image and transport != "stdio-docker":
        raise CommandError(f"--image applies to stdio-docker servers, not {transport}")
    if args.docker_arg and transport != "stdio-docker":
        raise CommandError(f"--docker-arg applies to stdio-docker servers, not {transport}")
    if args.cwd and transport != "stdio":
        raise CommandError(f"--cwd applies to stdio servers, not {transport}")
    if args.command and transport in URL_TRANSPORTS:
        raise CommandError(f"a {transport} server takes --url, not a command ({' '.join(args.command)})")
    entry: dict[str, Any]
    if transport == "stdio":
        entry = {"command": args.command[0], "args": list(args.command[1:]), "env": env}
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


@_fails
def run_add(args: argparse.Namespace) -> int:
    from supervisor._config_types import NAME_RE, NAME_RULE

    _reparse(args)
    _ask_missing(args)
    if not NAME_RE.match(args.name):
        raise CommandError(f'server name "{args.name}" is invalid: {NAME_RULE}')
    entry = build_entry(args)
    target = locate_for_write(args, args.scope)
    store = open_store(target.path)
    existed = target.path.is_file()
    try:
        store.add_server(args.name, entry, force=args.force)
    except store_errors() as err:
        raise CommandError(str(err), exit_code_of(err)) from None
    warnings = [w for w in unset_variables(store.read(), target.path) if f'server "{args.name}"' in w]
    where = f"{target.path} ({'created: ' if not existed else ''}{target.why})"
    if args.format == "json":
        out.print_json(
            {
                "added": args.name,
                "file": str(target.path),
                "created": not existed,
                "entry": out.mask_entry(entry),
                "warnings": warnings,
            }
        )
        return EXIT_OK
    kind = args.transport
    out.say(f"Added {kind} server {args.name!r} to {where}", style="green")
    for warning in warnings:
        out.note(f"note: {warning} (the proxy needs it in its environment)")
    return EXIT_OK


# --- remove / enable / disable ------------------------------------------------------------


def _server_target(args: argparse.Namespace) -> Target:
    target = locate(args)
    if target is None:
        raise CommandError(nothing_found())
    if not target.exists:
        raise CommandError(f"{target.path}: no such file ({target.why})")
    return target


@_fails
def run_remove(args: argparse.Namespace) -> int:
    target = _server_target(args)
    store = open_store(target.path)
    known = store.server_names()
    if args.name not in known:
        raise CommandError(_unknown(args.name, known, target))
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
    target = _server_target(args)
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


@_fails
def run_enable(args: argparse.Namespace) -> int:
    return _switch(args, True)


@_fails
def run_disable(args: argparse.Namespace) -> int:
    return _switch(args, False)


# --- probing: list / test / info ------------------------------------------------------------


def _unknown(name: str, known: Sequence[str], target: Target) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    if close:
        hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        hint = "configured: " + ", ".join(known) if known else "no servers are configured"
    return f"no server named {name!r} in {target.path}; {hint}"


def _spec(config: Config, name: str, target: Target) -> ServerSpec:
    spec = config.servers.get(name)
    if spec is None:
        raise CommandError(_unknown(name, list(config.servers), target))
    return spec


def _probe(specs: Sequence[ServerSpec], timeout: float, what: str) -> dict[str, ProbeResult]:
    """Probe ``specs`` concurrently under trio, with a spinner on a terminal."""
    import logging

    import trio

    from supervisor.probe import load_connection_code, probe_all

    logging.getLogger().addHandler(logging.NullHandler())  # servers' stderr is for the proxy's log
    if not specs:
        return {}
    with out.spinner(f"{what} ({len(specs)} server{'s' if len(specs) != 1 else ''})...") as update:
        load_connection_code()
        finished: list[str] = []

        def progress(result: ProbeResult) -> None:
            finished.append(result.server)
            waiting = [s.name for s in specs if s.name not in finished]
            pending = f"; waiting for {', '.join(waiting[:5])}" if waiting else ""
            update(f"{what}: {len(finished)}/{len(specs)} done{pending}")

        return trio.run(lambda: probe_all(specs, limit=timeout, on_result=progress))


def target_of(spec: ServerSpec) -> str:
    """The command line or URL of a server, as one string."""
    import shlex

    if spec.transport == "stdio":
        return shlex.join([spec.command or "", *spec.args])
    if spec.transport == "stdio-docker":
        return shlex.join(["docker", "run", spec.image or "", *spec.args])
    return spec.url or ""


def _one_line(text: str | None, width: int = DESCRIPTION_WIDTH) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _row(spec: ServerSpec, result: ProbeResult | None, missing: str | None = None) -> dict[str, Any]:
    if not spec.enabled:
        state, reason = "disabled", "disabled in the config"
    elif missing is not None:
        state, reason = "offline", missing
    elif result is None:
        state, reason = "offline", "not probed"
    elif result.ok:
        state, reason = "online", None
    else:
        assert result.failure is not None
        state, reason = "offline", result.failure.message
    return {
        "name": spec.name,
        "transport": spec.transport,
        "target": target_of(spec),
        "enabled": spec.enabled,
        "lazy": spec.lazy,
        "state": state,
        "reason": reason,
        "toolCount": len(result.tools) if result is not None and result.ok else None,
        "seconds": round(result.seconds, 4) if result is not None else None,
        "description": spec.description,
    }


@_fails
def run_list(args: argparse.Namespace) -> int:
    target = locate(args)
    if target is None:
        if args.format == "json":
            out.print_json([])
        out.note(f"no servers: {nothing_found()}")
        return EXIT_OK
    if not target.exists:
        raise CommandError(f"{target.path}: no such file ({target.why})")
    config, missing = load_lenient(target)
    for warning in config.warnings:
        out.note(f"warning: {warning}")
    specs = [s for s in config.servers.values() if s.enabled or not args.enabled]
    to_probe = [s for s in specs if s.enabled and s.name not in missing] if args.status != "disabled" else []
    results = _probe(to_probe, args.timeout, "Connecting")
    rows = [_row(s, results.get(s.name), missing.get(s.name)) for s in specs]
    if args.status:
        rows = [r for r in rows if r["state"] == args.status]
    if args.format == "json":
        out.print_json(rows)
        return EXIT_OK
    if not rows:
        out.note(f"no servers{' in state ' + args.status if args.status else ''} in {target.path}")
        return EXIT_OK

    def state_cell(row: dict[str, Any]) -> str:
        label = row["state"].capitalize()
        return f"{label} ({row['reason']})" if row["state"] == "offline" and row["reason"] else label

    table_rows = [
        [
            r["name"],
            r["transport"],
            state_cell(r),
            str(r["toolCount"]) if r["toolCount"] is not None else "-",
            _one_line(r["description"]),
        ]
        for r in rows
    ]
    colours = {"Online": "green", "Offline": "red", "Disabled": "dim"}
    out.table(
        ["Name", "Transport", "State", "Tools", "Description"],
        table_rows,
        styles={"State": lambda cell: colours.get(cell.split(" ", 1)[0])},
    )
    out.note(f"{target.path}: {len(rows)} server{'s' if len(rows) != 1 else ''}")
    return EXIT_OK


@_fails
def run_test(args: argparse.Namespace) -> int:
    target = require(args)
    config, missing = load_lenient(target)
    spec = _spec(config, args.name, target)
    if spec.name in missing:
        raise CommandError(f"{spec.name}: cannot start it from this shell: {missing[spec.name]}", EXIT_FAILED)
    result = _probe([spec], args.timeout, f"Testing {spec.name}")[spec.name]
    if args.format == "json":
        out.print_json(
            {**result.to_json(with_tools=True), "enabled": spec.enabled, "target": target_of(spec)}
        )
        return EXIT_OK if result.ok else EXIT_FAILED
    out.say(
        f"Testing {spec.name} ({spec.transport}: {target_of(spec)})"
        + ("" if spec.enabled else "  [disabled in the config]")
    )
    for step in result.steps:
        mark, style = ("✓", "green") if step.ok else ("✗", "red")
        out.say(f"  {mark} {step.name:<22} {out.seconds(step.seconds):>9}   {step.detail or ''}", style=style)
    if result.ok:
        out.say(
            f"OK: {spec.name} is online with {len(result.tools)} tools ({out.seconds(result.seconds)})",
            style="bold green",
        )
        return EXIT_OK
    failure = result.failure
    assert failure is not None
    out.say(f"FAILED: {spec.name}: {failure.message}", style="bold red")
    if failure.stderr:
        out.say("  last stderr lines:")
        for line in failure.stderr:
            out.say(f"    {line}")
    if failure.hint:
        out.say(f"  hint: {failure.hint}")
    return EXIT_FAILED


@_fails
def run_info(args: argparse.Namespace) -> int:
    target = require(args)
    config, missing = load_lenient(target)
    spec = _spec(config, args.name, target)
    entry = out.mask_entry(dict(spec.raw))
    probe = spec.enabled and not args.no_probe and spec.name not in missing
    result = _probe([spec], args.timeout, f"Listing {spec.name}'s tools")[spec.name] if probe else None
    if args.format == "json":
        out.print_json(
            {
                "name": spec.name,
                "file": str(target.path),
                "transport": spec.transport,
                "enabled": spec.enabled,
                "lazy": spec.lazy,
                "description": spec.description,
                "config": entry,
                "tools": [
                    {"name": t.get("name"), "description": _one_line(t.get("description"), 200)}
                    for t in result.tools
                ]
                if result is not None and result.ok
                else None,
                "probe": result.to_json() if result is not None else None,
            }
        )
        return EXIT_OK
    import json

    out.say(
        f"{spec.name}  ({spec.transport}, {'enabled' if spec.enabled else 'disabled'}"
        f"{', lazy' if spec.lazy else ''}) in {target.path}",
        style="bold",
    )
    if spec.description:
        out.say(f"  {spec.description}")
    out.say("config:")
    for line in json.dumps(entry, indent=2, ensure_ascii=False).splitlines():
        out.say(f"  {line}")
    if result is None:
        if spec.name in missing:
            out.say(f"tools: not listed: {missing[spec.name]}")
        else:
            why = "disabled" if not spec.enabled else "--no-probe"
            out.say(f"tools: not listed ({why}; `mcpvisor mcp test {spec.name}` connects anyway)")
        return EXIT_OK
    if not result.ok:
        assert result.failure is not None
        out.say(f"tools: unavailable: {result.failure.message}", style="red")
        return EXIT_OK
    out.say(f"tools ({len(result.tools)}):")
    rows = [[str(t.get("name", "")), _one_line(t.get("description"), 100)] for t in result.tools]
    out.table(["Tool", "Description"], rows)
    return EXIT_OK
