"""``mcpvisor mcp list|test|info|get``: what is configured, and does it answer.

These commands connect to servers with the proxy's own code (`mcpvisor.probe`),
concurrently, each bounded by ``--timeout``, and stop and reap whatever they start.
``get`` is Claude Code's name for ``info``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, Formatter
from mcpvisor.cli.config_cmd import CommandError, Target, load_lenient, locate, nothing_found, require
from mcpvisor.cli.mcp._common import (
    DESCRIPTION_WIDTH,
    STATUS_CHOICES,
    fails,
    timeout_option,
    unknown,
)
from mcpvisor.entries import mask_entry

if TYPE_CHECKING:
    from mcpvisor.config import Config, ServerSpec
    from mcpvisor.probe import ProbeResult


def register(cmds: Any, parent: argparse.ArgumentParser) -> None:
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
    timeout_option(ls)
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
    timeout_option(test, startup_timeout=True)
    test.set_defaults(func=run_test)

    for verb in ("info", "get"):
        info = cmds.add_parser(
            verb,
            help="show a server's config (secrets masked) and its tools"
            + ("" if verb == "info" else " (Claude Code's name for info)"),
            parents=[parent],
            formatter_class=Formatter,
            description="Show one server's config, literal header and env values masked as "
            "***, and its tools with one-line descriptions.",
            epilog=f"examples:\n  mcpvisor mcp {verb} git\n  mcpvisor mcp {verb} docs --no-probe\n"
            f"  mcpvisor mcp {verb} git --format json\n",
        )
        info.add_argument("name", metavar="NAME")
        info.add_argument(
            "--no-probe", action="store_true", help="only the config; do not connect for the tools"
        )
        out.add_format(info, ("text", "json"))
        timeout_option(info)
        info.set_defaults(func=run_info)


def _spec(config: Config, name: str, target: Target) -> ServerSpec:
    spec = config.servers.get(name)
    if spec is None:
        raise CommandError(unknown(name, list(config.servers), target))
    return spec


def _probe(specs: Sequence[ServerSpec], timeout: float, what: str) -> dict[str, ProbeResult]:
    """Probe ``specs`` concurrently under trio, with a spinner on a terminal."""
    import logging

    import trio

    from mcpvisor.probe import load_connection_code, probe_all

    logging.getLogger().addHandler(logging.NullHandler())  # servers' stderr is for the proxy's log
    if not specs:
        return {}
    with out.spinner(f"{what} ({len(specs)} server{'s' if len(specs) != 1 else ''})...") as update:
        load_connection_code(specs)
        finished: list[str] = []

        def progress(result: ProbeResult) -> None:
            finished.append(result.server)
            waiting = [s.name for s in specs if s.name not in finished]
            pending = f"; waiting for {', '.join(waiting[:5])}" if waiting else ""
            update(f"{what}: {len(finished)}/{len(specs)} done{pending}")

        return trio.run(lambda: probe_all(specs, limit=timeout, on_result=progress))


def target_of(spec: ServerSpec) -> str:
    """The command line or URL of a server, as one string, keys masked (`mcpvisor.redact`)."""
    import shlex

    from mcpvisor.redact import redact_args, redact_url

    if spec.transport == "stdio":
        return shlex.join([spec.command or "", *redact_args(spec.args)])
    if spec.transport == "stdio-docker":
        return shlex.join(["docker", "run", spec.image or "", *redact_args(spec.args)])
    return redact_url(spec.url or "")


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


@fails
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


@fails
def run_test(args: argparse.Namespace) -> int:
    target = require(args)
    config, missing = load_lenient(target)
    spec = _spec(config, args.name, target)
    if spec.name in missing:
        raise CommandError(f"{spec.name}: cannot start it from this shell: {missing[spec.name]}", EXIT_FAILED)
    from mcpvisor.actors.upstream.preflight import self_reason

    itself = self_reason(spec)
    if itself is not None:  # what the proxy refuses, never spawned here either
        return _never_starts(args, spec, itself)
    limit = spec.startup_timeout if args.timeout is None else args.timeout
    result = _probe([spec], limit, f"Testing {spec.name}")[spec.name]
    result = _within_startup_timeout(result, spec, given=args.timeout is not None)
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


def _never_starts(args: argparse.Namespace, spec: ServerSpec, reason: str) -> int:
    """``mcp test`` of a server the proxy refuses to start: FAILED, exit 1, nothing spawned."""
    if args.format == "json":
        out.print_json({"server": spec.name, "transport": spec.transport, "ok": False, "steps": [],
                        "failure": {"kind": "misconfigured", "message": reason, "step": None},
                        "enabled": spec.enabled, "target": target_of(spec)})
    else:
        out.say(f"Testing {spec.name} ({spec.transport}: {target_of(spec)})")
        out.say(f"FAILED: {spec.name}: the proxy never starts it: {reason}", style="bold red")
    return EXIT_FAILED


def _within_startup_timeout(result: ProbeResult, spec: ServerSpec, *, given: bool) -> ProbeResult:
    """A probe judged by the proxy's own bound: a start slower than ``startupTimeout`` fails
    (the proxy would stop it before it is ready, however long ``--timeout`` waited), and a
    probe cut off at ``startupTimeout`` says which setting to raise."""
    import dataclasses

    from mcpvisor.probe_failures import Failure

    setting = (f'raise "startupTimeout" in its entry (now {spec.startup_timeout:g}s) '
               'if it is just slow to start')
    if result.ok and result.seconds > spec.startup_timeout:
        failure = Failure("timeout", f"started in {result.seconds:.1f}s, past its startupTimeout of "
                                     f"{spec.startup_timeout:g}s: the proxy stops it before it is ready",
                          "tools/list", hint=setting)
        return dataclasses.replace(result, ok=False, tools=(), failure=failure)
    if not given and result.failure is not None and result.failure.kind == "timeout":
        return dataclasses.replace(result, failure=dataclasses.replace(result.failure, hint=setting))
    return result


@fails
def run_info(args: argparse.Namespace) -> int:
    target = require(args)
    config, missing = load_lenient(target)
    if args.name not in config.servers and args.name in config.compound_tools:
        return _compound_info(args, config, target)
    spec = _spec(config, args.name, target)
    entry = mask_entry(dict(spec.raw))
    probe = spec.enabled and not args.no_probe and spec.name not in missing
    result = _probe([spec], args.timeout, f"Listing {spec.name}'s tools")[spec.name] if probe else None
    memory = remembered_note(config, spec)
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
                "protocol": spec.protocol,
                "protocolVersion": result.protocol_version if result is not None and result.ok else None,
                "remembered": memory,
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
    if memory is not None:
        out.say(f"remembered: {memory['text']}")
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
    out.say(f"opened in: {out.era(result.protocol_version)} (config protocol: {spec.protocol})")
    out.say(f"tools ({len(result.tools)}):")
    rows = [[str(t.get("name", "")), _one_line(t.get("description"), 100)] for t in result.tools]
    out.table(["Tool", "Description"], rows)
    listed = {str(t.get("name")) for t in result.tools}
    for decl in config.compound_tools.values():
        subs = [d for d in decl.subtools if d.server == spec.name]
        if subs:
            states = ", ".join(f"{d.tool} ({'listed' if d.tool in listed else 'NOT listed'})" for d in subs)
            out.say(f"subtools of compound tool {decl.name}: {states}")
    return EXIT_OK


def remembered_note(config: Config, spec: ServerSpec) -> dict[str, Any] | None:
    """What the state directory remembers of ``spec``'s lists (what a proxy lists while the
    server starts), for ``mcp info``; None when nothing is remembered."""
    from mcpvisor.remembered import CatalogFile, catalog_fingerprint
    from mcpvisor.settings import state_dir, with_env_overrides

    directory = state_dir(configured=with_env_overrides(config.settings).state_dir)
    entry = CatalogFile(directory).load().get(spec.name)
    if entry is None:
        return None
    usable = entry.fingerprint == catalog_fingerprint(spec)
    count = len(entry.lists.tools)
    text = (f"{count} tools remembered from {entry.seen} (listed while the server starts)" if usable
            else f"{count} tools remembered from {entry.seen}, for an earlier command, args, env or url: "
                 "not listed until the server starts")
    return {"seen": entry.seen, "toolCount": count, "usable": usable, "file": str(directory / "catalog.json"),
            "text": text}


def _compound_info(args: argparse.Namespace, config: Config, target: Target) -> int:
    """``mcp info NAME`` for a compound tool: its subtools, each checked on its server."""
    from mcpvisor.actors.core.compound import resolve_compound

    decl = config.compound_tools[args.name]
    names = list(dict.fromkeys(d.server for d in decl.subtools))
    specs = [config.servers[n] for n in names if n in config.servers and config.servers[n].enabled]
    what = f"Listing the tools of {decl.name}'s servers"
    results = {} if args.no_probe else _probe(specs, args.timeout, what)

    def find_tool(server: str, tool: str) -> Any:
        result = results.get(server)
        if result is None or not result.ok:
            return None
        return next((t for t in result.tools if t.get("name") == tool), None)

    def state_of(server: str) -> tuple[str, str | None] | None:
        if server not in [s.name for s in specs]:
            return None
        result = results.get(server)
        if result is None:
            return "not checked", "--no-probe"
        if result.ok:
            return "ready", None
        return "unreachable", result.failure.message if result.failure else None

    def listed(server: str) -> bool:
        result = results.get(server)
        return result is not None and result.ok

    compound = resolve_compound(decl, find_tool=find_tool, listed=listed, state_of=state_of)
    subtools: list[dict[str, Any]] = [
        {"server": s.decl.server, "tool": s.decl.tool, "description": s.decl.description,
         "available": s.available, "reason": s.reason} for s in compound.subtools]
    if args.format == "json":
        out.print_json({"name": decl.name, "kind": "compound tool", "file": str(target.path),
                        "description": decl.description, "subtools": subtools})
        return EXIT_OK
    out.say(f"{decl.name}  (compound tool, {len(subtools)} subtools) in {target.path}", style="bold")
    if decl.description:
        out.say(f"  {decl.description}")
    rows = [[f"{s['server']}.{s['tool']}", "available" if s["available"] else f"unavailable: {s['reason']}",
             _one_line(s["description"], 60)] for s in subtools]
    out.table(["Subtool", "State", "Description"], rows)
    return EXIT_OK
