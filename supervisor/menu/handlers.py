"""The management tools' handlers: check the arguments, run the operation, answer
readable text plus the same data as ``structuredContent`` (an ``isError`` result saying
what exists instead on failure)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from mcpvisor.actors.core.toolsets import (
    ANNOTATE,
    BUILD,
    DELETE,
    ENTER_CONFIG,
    EQUIP,
    EXIT_CONFIG,
    GET_ACTIVE,
    LIST_AVAILABLE,
    LIST_SAVED,
    MANAGEMENT_TOOLS,
    SERVER_STATUS,
    UNEQUIP,
    ToolsetError,
)
from mcpvisor.menu.checks import check_args, failed, ok, string_arg
from mcpvisor.menu.operations import MenuOperations
from mcpvisor.menu.render import render_active, render_compounds, render_mode, status_dict
from mcpvisor.menu.reports import MenuBackend, compound_report


class Menu(MenuOperations):
    """The management tools' handlers over a supervisor's router and state directory."""

    def __init__(self, backend: MenuBackend) -> None:
        super().__init__(backend)
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            LIST_AVAILABLE: self._list_available,
            BUILD: self._build,
            LIST_SAVED: self._list_saved,
            EQUIP: self._equip,
            DELETE: self._delete,
            UNEQUIP: self._unequip,
            GET_ACTIVE: self._get_active,
            ANNOTATE: self._annotate,
            SERVER_STATUS: self._server_status,
            EXIT_CONFIG: self._exit_config,
            ENTER_CONFIG: self._enter_config,
        }

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Run management tool ``name``; always a ``CallToolResult`` (``isError`` on failure)."""
        handler = self._handlers.get(name)
        if handler is None:
            return failed(ToolsetError("unknown_tool", f"{name!r} is not a management tool.",
                                       didYouMean=list(MANAGEMENT_TOOLS)))
        try:
            return await handler(dict(arguments or {}))
        except ToolsetError as exc:
            return failed(exc)

    async def _list_available(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ("server",))
        server = args.get("server")
        if server is not None and not isinstance(server, str):
            raise ToolsetError("invalid_arguments", "'server' must be a string.")
        data = self.available(server or None)
        lines = [f"{data['toolCount']} tools from {len(data['servers'])} server(s). Use the namespaced names "
                 "(or refIds) with build-toolset."]
        for s in data["servers"]:
            head = f"\n## {s['name']} ({s['state']}" + (f": {s['reason']}" if s["reason"] else "")
            lines.append(head + f"; {s['toolCount']} tools)")
            for t in s["tools"]:
                lines.append(f"- {t['namespacedName']}  [refId {t['refId']}]"
                             + (f"  {t['description']}" if t["description"] else ""))
        lines += render_compounds(data["compoundTools"])
        return ok("\n".join(lines), data)

    async def _build(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ("name", "tools", "description", "autoEquip"), ("name", "tools"))
        auto = args.get("autoEquip", False)
        if not isinstance(auto, bool):
            raise ToolsetError("invalid_arguments", "'autoEquip' must be true or false.")
        data = await self.build(string_arg(args, "name"), args.get("tools"),
                                description=args.get("description"),
                                auto_equip=auto)
        ts = data["toolset"]
        text = f"Saved toolset {ts['name']!r} with {ts['toolCount']} tools."
        if data["warnings"]:
            text += "\nWarnings:\n" + "\n".join(f"- {w}" for w in data["warnings"])
        if data["equipped"]:
            text += "\n" + render_active(data["active"])
        else:
            text += f"\nEquip it with {EQUIP} {{name: {ts['name']!r}}}."
        return ok(text, data)

    async def _list_saved(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        state = await self._load()
        ex = self.exposure
        toolsets = [self._describe(ts) for ts in ex.declared.values()]
        toolsets += [self._describe(ts) for name, ts in state.toolsets.items() if name not in ex.declared]
        equipped = ex.equipped.name if ex.equipped else None
        for t in toolsets:
            t["equipped"] = t["name"] == equipped
        lines = [f"{len(toolsets)} toolset(s)"
                 + (f"; equipped: {equipped}" if equipped else "; none equipped")]
        for t in toolsets:
            flags = ", ".join(f for f, on in (("equipped", t["equipped"]), ("read-only, from the config file",
                                                                             t["readOnly"])) if on)
            lines.append(f"- {t['name']} ({t['toolCount']} tools{', ' + flags if flags else ''})"
                         + (f": {t['description']}" if t["description"] else ""))
            lines.append("  " + ", ".join(x["namespacedName"] or f"refId {x['refId']}" for x in t["tools"]))
        return ok("\n".join(lines), {"toolsets": toolsets, "equipped": equipped})

    async def _equip(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ("name",), ("name",))
        data = await self.equip(string_arg(args, "name"))
        return ok(f"Equipped {data['equipped']!r}.\n" + render_active(data), data)

    async def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ("name",), ("name",))
        data = await self.delete(string_arg(args, "name"))
        text = f"Deleted toolset {data['deleted']!r}" + (" (it was equipped; now unequipped)."
                                                         if data["wasEquipped"] else ".")
        return ok(text, data)

    async def _unequip(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        data = await self.unequip()
        return ok(f"Unequipped {data['unequipped']!r}. " + render_mode(data), data)

    async def _get_active(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        data = self.active_report()
        return ok(render_active(data), data)

    async def _annotate(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ("toolRef", "notes"), ("toolRef", "notes"))
        data = await self.annotate(args["toolRef"], args["notes"])
        text = (f"Notes of {data['tool']['namespacedName']} in {data['toolset']!r} "
                "(appended to its description):\n"
                + "\n".join(f"- {n['name']}: {n['note']}" for n in data["notes"]))
        return ok(text, data)

    async def _server_status(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        now = trio.current_time()
        servers = [status_dict(s, now) for s in self.backend.status()]
        lines = [f"{len(servers)} server(s):"]
        for s in servers:
            extra = []
            if s.get("uptimeSeconds") is not None:
                extra.append(f"up {s['uptimeSeconds']:.0f}s")
            extra.append(f"{s.get('toolCount', 0)} tools")
            if s.get("remembered"):
                extra.append(f"listed from memory of {s['remembered']} until it is up")
            extra.append(f"restarts {s.get('restarts', 0)}")
            if s.get("circuit") and s["circuit"] != "closed":
                extra.append(f"circuit {s['circuit']}")
            if s.get("retryInSeconds") is not None:
                extra.append(f"next try in {s['retryInSeconds']:.0f}s")
            if s.get("restartsLastMinute"):
                extra.append(f"{s['restartsLastMinute']} restarts in the last minute")
            extra.append(f"lives {s.get('healthyLives', 0)} healthy / "
                         f"{s.get('failedStarts', 0)} failed starts")
            if s.get("availability") is not None:
                extra.append(f"answered {100 * s['availability']:.0f}% of {s.get('calls', 0)} calls")
            if s.get("reason"):
                extra.append(f"reason: {s['reason']}")
            if s.get("lastError") and s.get("lastError") != s.get("reason"):
                extra.append(f"last error: {s['lastError']}")
            lines.append(f"- {s['name']}: {s['state']} ({', '.join(extra)})")
        compounds = [compound_report(ct) for ct in self.core.compound_tools()]
        lines += render_compounds(compounds)
        problems = [p for p in self.core.snapshot.problems if p.startswith("compound tool ")]
        lines += [f"Warning: {p}" for p in problems]
        return ok("\n".join(lines), {"servers": servers, "compoundTools": compounds, "warnings": problems})

    async def _exit_config(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        data = await self.set_configuration_mode(False)
        return ok("Left configuration mode. " + render_mode(data), data)

    async def _enter_config(self, args: dict[str, Any]) -> dict[str, Any]:
        check_args(args, ())
        data = await self.set_configuration_mode(True)
        return ok("Entered configuration mode. " + render_mode(data), data)
