"""What ``mcpvisor toolset`` does: each subcommand's run, on the state the proxy uses.

`mcpvisor.cli.toolset` builds the command line; the ``run_*`` functions here carry it
out. Saved toolsets and the equipped one live in the state directory
(`mcpvisor.state.StateStore`, locked and atomic) or in the replicas' shared store;
toolsets declared in the config file are listed as read-only. ``equip`` and ``unequip``
reach every running proxy of that state directory through its control socket
(`mcpvisor.control`); with none running, the choice is recorded for the next one.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor.cli import _output as out
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from mcpvisor.cli.config_cmd import CommandError, load_lenient, locate, reporting

if TYPE_CHECKING:
    from mcpvisor.actors.core.model import SavedState, ToolEntry, Toolset
    from mcpvisor.config import Config
    from mcpvisor.state import StateStore
    from mcpvisor.toolset_create import Wanted

CONTROL_TIMEOUT_S: Final = 10.0
"""Bound on one request to a running proxy's control socket (an equip is one router step
and one write of state.json: milliseconds; ten seconds means the proxy is stuck)."""


def _code_of(err: Exception) -> int | None:
    """A state error's exit code: 1 for a corrupt file, a lock or the disk, 2 for bad input."""
    from mcpvisor._atomic import LockTimeout
    from mcpvisor.state import CorruptState, StateError

    if isinstance(err, (CorruptState, LockTimeout, OSError)):
        return EXIT_FAILED
    if isinstance(err, StateError):
        return EXIT_USAGE
    return None


_fails = reporting(_code_of)
"""Report a `CommandError` or a state error as one line on stderr and its exit code."""


# --- where things are ---------------------------------------------------------------------


class _Context:
    """The config (if any), the state directory and its store, for one command."""

    def __init__(self, args: argparse.Namespace) -> None:
        from mcpvisor.config import Settings

        self.config: Config | None = None
        target = locate(args)
        if target is not None and target.exists:
            try:
                self.config, _ = load_lenient(target)
            except CommandError as err:
                out.note(f"warning: {err}; toolsets declared there are not shown")
        settings = self.config.settings if self.config is not None else Settings()
        self.state_dir = _state_dir(getattr(args, "state_dir", None), settings)
        self.store, self.shared = _store(settings, self.state_dir)
        self.where = str(self.store.path) if self.shared else str(self.state_dir)
        """What messages name: the state directory, or the shared store (no password)."""

    def declared(self) -> dict[str, Toolset]:
        from mcpvisor.actors.core.model import ToolEntry, Toolset

        if self.config is None:
            return {}
        return {
            name: Toolset(
                name=name,
                tools=tuple(
                    ToolEntry(t.namespaced_name or f"refId:{t.ref_id}", t.ref_id, t.alias, None)
                    for t in decl.tools
                ),
                description=decl.description,
                created_at="",
                updated_at="",
                read_only=True,
            )
            for name, decl in self.config.toolsets.items()
        }

    def every(self, state: SavedState) -> dict[str, Toolset]:
        found = self.declared()
        for name, ts in state.toolsets.items():
            found.setdefault(name, ts)
        return found


def _store(settings: Any, directory: Path) -> tuple[StateStore, bool]:
    """The state the proxy uses, and whether it is shared: the replicas' store
    (``settings.store``, ``$MCPVISOR_STORE``; they hear of each change), else
    ``state.json`` in ``directory``."""
    from mcpvisor.settings import with_env_overrides
    from mcpvisor.state import StateStore

    url = with_env_overrides(settings).store
    if url is None:
        return StateStore(directory), False
    from mcpvisor.pgstore.store import PgStore

    shared = PgStore(url, state_dir=directory)
    shared.migrate()  # a store no replica has started on yet
    return shared.state, True


def _state_dir(explicit: str | None, settings: Any) -> Path:
    """The proxy's own rule (`mcpvisor.settings.state_dir`)."""
    from mcpvisor.settings import state_dir

    return state_dir(explicit, configured=settings.state_dir)


def _unknown(name: str, known: Sequence[str]) -> CommandError:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = (
        ("did you mean " + " or ".join(repr(c) for c in close) + "?")
        if close
        else (
            "toolsets: " + ", ".join(known)
            if known
            else "no toolsets yet (mcpvisor toolset create NAME --tool s.t)"
        )
    )
    return CommandError(f"no toolset named {name!r}; {hint}")


# --- list / show ------------------------------------------------------------------------------


def _summary(ts: Toolset, equipped: str | None) -> dict[str, Any]:
    return {
        "name": ts.name,
        "source": "config" if ts.read_only else "saved",
        "readOnly": ts.read_only,
        "equipped": ts.name == equipped,
        "toolCount": len(ts.tools),
        "description": ts.description,
        "createdAt": ts.created_at or None,
        "updatedAt": ts.updated_at or None,
    }


@_fails
def run_list(args: argparse.Namespace) -> int:
    ctx = _Context(args)
    state = ctx.store.load()
    rows = [_summary(ts, state.equipped) for ts in ctx.every(state).values()]
    if args.format == "json":
        out.print_json({"stateDir": str(ctx.state_dir), "equipped": state.equipped, "toolsets": rows})
        return EXIT_OK
    if not rows:
        out.note(
            f"no toolsets in {ctx.where} (create one: mcpvisor toolset create NAME --tool server.tool)"
        )
        return EXIT_OK
    out.table(
        ["Name", "Source", "Tools", "Equipped", "Description"],
        [
            [
                r["name"],
                r["source"],
                str(r["toolCount"]),
                "yes" if r["equipped"] else "",
                (r["description"] or "").splitlines()[0] if r["description"] else "",
            ]
            for r in rows
        ],
        styles={"Equipped": lambda cell: "bold green" if cell else None},
    )
    out.note(f"{'store' if ctx.shared else 'state directory'}: {ctx.where}")
    return EXIT_OK


@_fails
def run_show(args: argparse.Namespace) -> int:
    ctx = _Context(args)
    state = ctx.store.load()
    known = ctx.every(state)
    ts = known.get(args.name)
    if ts is None:
        raise _unknown(args.name, list(known))
    tools = [
        {
            "namespacedName": t.namespaced_name,
            "alias": t.alias,
            "refId": t.ref_id,
            "pinned": t.pinned is not None,
        }
        for t in ts.tools
    ]
    if args.format == "json":
        out.print_json({**_summary(ts, state.equipped), "tools": tools})
        return EXIT_OK
    where = "declared in the config file (read-only)" if ts.read_only else f"saved in {ctx.where}"
    out.say(
        f"{ts.name}: {len(ts.tools)} tools, {where}" + ("; equipped" if ts.name == state.equipped else ""),
        style="bold",
    )
    if ts.description:
        out.say(f"  {ts.description}")
    if ts.created_at:
        out.say(f"  created {ts.created_at}, updated {ts.updated_at}")
    out.table(
        ["Tool", "Alias", "refId"],
        [[str(t["namespacedName"]), str(t["alias"] or ""), str(t["refId"] or "")] for t in tools],
    )
    return EXIT_OK


# --- create / delete ----------------------------------------------------------------------------


def _check_tools(ctx: _Context, wanted: Sequence[Wanted],
                 timeout: float) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Contact the configured servers ``wanted`` names: each one's tools by name, or fail
    saying which server could not be reached."""
    import trio

    from mcpvisor.probe import load_connection_code, probe_all

    assert ctx.config is not None
    configured = ctx.config.servers
    servers = [s for s in dict.fromkeys(w.server for w in wanted) if s is not None and s in configured]
    if not servers:
        return {}
    specs = [ctx.config.servers[s] for s in servers]
    with out.spinner(f"Checking tools on {', '.join(servers)}..."):
        load_connection_code(specs)
        results = trio.run(lambda: probe_all(specs, limit=timeout))
    found: dict[str, dict[str, Mapping[str, Any]]] = {}
    for server in servers:
        result = results[server]
        if not result.ok:
            assert result.failure is not None
            raise CommandError(
                f"cannot check the tools of server {server!r}: it is not reachable "
                f"({result.failure.message}); start it, or pass --no-check",
                EXIT_FAILED,
            )
        found[server] = {str(t.get("name")): t for t in result.tools}
    return found


def _entry(wanted: Wanted, config: Config | None, found: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
           ) -> ToolEntry:
    """One ``--tool``: its server in the config, and (unless ``found`` is None: not checked)
    the tool on that server, pinned."""
    from mcpvisor.actors.core.model import ToolEntry
    from mcpvisor.actors.core.pins import pin_of, ref_id
    from mcpvisor.toolset_create import require_namespaced, unknown_server, unknown_tool

    nn, server = wanted.namespaced_name, require_namespaced(wanted)  # the CLI names server.tool only
    assert nn is not None
    if config is not None and server not in config.servers:
        raise unknown_server(wanted, list(config.servers))
    if found is None:
        return ToolEntry(nn, None, None, None)
    tools = found[server]
    tool = nn.partition(".")[2]
    if tool in tools:
        return ToolEntry(nn, ref_id(server, tool, tools[tool]), None, pin_of(tools[tool]))
    raise unknown_tool(wanted, [f"{server}.{c}" for c in difflib.get_close_matches(tool, list(tools), n=3)])


@_fails
def run_create(args: argparse.Namespace) -> int:
    """Save a toolset by the rules the ``build-toolset`` management tool follows too
    (`mcpvisor.toolset_create`), its tools checked on their servers unless --no-check."""
    from mcpvisor.actors.core.toolsets import ToolsetError
    from mcpvisor.state import ToolsetExists
    from mcpvisor.toolset_create import check_new_toolset, new_toolset, resolve_all

    ctx = _Context(args)
    config = ctx.config
    checked = not args.no_check and config is not None
    if config is None and not args.no_check:
        out.note("note: no config found, so the tools were not checked")
    declared = ctx.declared()
    try:
        wanted = check_new_toolset(args.name, [{"namespacedName": ref} for ref in args.tools],
                                   description=args.description, declared=declared, known=list(declared))
        found = _check_tools(ctx, wanted, args.timeout) if checked else None
        entries = resolve_all(wanted, lambda w: _entry(w, config, found))
    except ToolsetError as err:
        raise CommandError(err.message) from None
    toolset = new_toolset(args.name, entries, args.description)
    try:
        ctx.store.save_toolset(toolset, replace=args.force)
    except ToolsetExists:
        raise CommandError(
            f"a toolset named {args.name!r} already exists in {ctx.where}; use --force to replace it"
        ) from None
    refs = [e.namespaced_name for e in entries]
    if args.format == "json":
        out.print_json({"created": args.name, "stateDir": str(ctx.state_dir), "tools": refs,
                        "checked": checked})
    else:
        out.say(f"Saved toolset {args.name!r} ({len(refs)} tools) in {ctx.where}", style="green")
        out.note(f"equip it with: mcpvisor toolset equip {args.name}")
    return EXIT_OK


@_fails
def run_delete(args: argparse.Namespace) -> int:
    from mcpvisor.state import UnknownToolset

    ctx = _Context(args)
    if args.name in ctx.declared():
        raise CommandError(
            f"toolset {args.name!r} is declared in the config file (read-only); remove it there"
        )
    state = ctx.store.load()
    if args.name not in state.toolsets:
        raise _unknown(args.name, list(ctx.every(state)))
    if not args.yes and out.interactive() and not out.confirm(f"Delete toolset {args.name!r}?"):
        out.note("not deleted")
        return EXIT_FAILED
    try:
        ctx.store.delete_toolset(args.name)
    except UnknownToolset as err:
        raise CommandError(str(err)) from None
    if args.format == "json":
        out.print_json({"deleted": args.name, "stateDir": str(ctx.state_dir)})
    else:
        out.say(f"Deleted toolset {args.name!r} from {ctx.where}")
    return EXIT_OK


# --- equip / unequip ----------------------------------------------------------------------------


def _running(args: argparse.Namespace, state_dir: Path) -> list[Any]:
    """The running proxies of ``state_dir`` (none when the control module is not available).

    `mcpvisor serve` registers its control socket under ``--state-dir`` /
    ``$MCPVISOR_STATE_DIR`` / the user state dir even when ``settings.stateDir`` moves the
    toolsets elsewhere, so both places are asked.
    """
    try:
        from mcpvisor.control import list_running
    except ImportError:
        return []
    from mcpvisor.settings import state_dir as registration_dir

    found: dict[int, Any] = {}
    for directory in dict.fromkeys((state_dir, registration_dir(getattr(args, "state_dir", None)))):
        try:
            for proxy in list_running(directory):
                found.setdefault(proxy.pid, proxy)
        except OSError as err:
            out.note(f"warning: cannot look for running proxies in {directory}: {err}")
    return list(found.values())


def _tell(proxies: Sequence[Any], op: str, **fields: Any) -> list[dict[str, Any]]:
    """Send ``op`` to each running proxy; one report per proxy (``ok`` and ``answer`` or ``error``)."""
    from mcpvisor.control import ControlError, request

    reports = []
    for proxy in proxies:
        try:
            answer = request(proxy.socket, op, timeout=CONTROL_TIMEOUT_S, **fields)
            reports.append({"pid": proxy.pid, "ok": True, "answer": answer})
        except (ControlError, OSError) as err:
            reports.append({"pid": proxy.pid, "ok": False, "error": str(err)})
    return reports


def _report(
    args: argparse.Namespace,
    what: str,
    reports: list[dict[str, Any]],
    ctx: _Context,
    extra: Mapping[str, Any],
) -> int:
    failed = [r for r in reports if not r["ok"]]
    if args.format == "json":
        out.print_json({**extra, "stateDir": str(ctx.state_dir), "proxies": reports})
        return EXIT_FAILED if failed else EXIT_OK
    if not reports:
        out.say(f"{what} (no running proxy found; recorded in {ctx.state_dir} for the next one to start)")
        return EXIT_OK
    for r in reports:
        if r["ok"]:
            out.say(f"{what} in the running proxy (pid {r['pid']})", style="green")
        else:
            out.error(f"proxy pid {r['pid']}: {r['error']}")
    return EXIT_FAILED if failed else EXIT_OK


@_fails
def run_equip(args: argparse.Namespace) -> int:
    ctx = _Context(args)
    state = ctx.store.load()
    known = ctx.every(state)
    if args.name not in known:
        raise _unknown(args.name, list(known))
    proxies = _running(args, ctx.state_dir)
    reports = _tell(proxies, "equip", name=args.name) if proxies else []
    if not proxies:
        ctx.store.set_equipped(args.name)
    return _report(args, f"Equipped toolset {args.name!r}", reports, ctx, {"equipped": args.name})


@_fails
def run_unequip(args: argparse.Namespace) -> int:
    ctx = _Context(args)
    proxies = _running(args, ctx.state_dir)
    if not proxies:
        state = ctx.store.load()
        if state.equipped is None:
            if args.format == "json":
                out.print_json({"equipped": None, "stateDir": str(ctx.state_dir), "proxies": []})
            else:
                out.say("Nothing is equipped")
            return EXIT_OK
        ctx.store.set_equipped(None)
    reports = _tell(proxies, "unequip") if proxies else []
    return _report(args, "Unequipped the toolset", reports, ctx, {"equipped": None})
