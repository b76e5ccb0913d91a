"""One plan for a ``tools/call``: what a call of an exposed name does, before anything is sent (sans-IO).

Owns `plan_call`: from the snapshot a caller reads (the proxy's, or a harness session's
own view), the name called and its arguments, one of

* a `ToolRoute`: the upstream tool the name is routed to, called with the caller's
  arguments exactly as they came (the common case; nothing is allocated for it);
* `CallRoute` (route, arguments): an upstream tool called with these arguments instead:
  a compound tool's subtool and its ``args``, or the tool ``use_tool`` names;
* `CallLocal` (name, arguments): a management tool the proxy answers itself;
* `NeedsLoad` (server, tool name): the name belongs to a lazy server not loaded yet:
  load it, then plan again;
* `WAIT_FOR_STARTUP`: nothing serves the name (or a compound tool's subtool) yet and the
  eager servers' first start is not over: wait for it, then plan again;
* `Refused` (result): the ``isError`` result to answer, nothing sent: an unknown name
  with the names most like it, a compound or ``use_tool`` call whose arguments fail
  their check (naming the field).

and `unknown_tool`, the words of that answer for an unknown name.

The four callers only execute the plan: the embedding API and harness sessions
(`mcpvisor.tree`, `mcpvisor.sessions`), the SDK front (`mcpvisor.actors.fronts.tools`) and the
stdio fast path (`mcpvisor.actors.fronts.fastpath`, which takes a route and hands everything else to
the SDK front, so both answer alike). So they name, load, wait, refuse and route alike
by construction. A later outcome (a call to a starting server that waits for it, one to
a down server refused with its state) is one more variant here and one more case in
each executor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import Snapshot, ToolRoute, close_names
from mcpvisor.actors.core.discovery import USE_TOOL, lazy_owner
from mcpvisor.actors.core.pending import owner_of
from mcpvisor.actors.core.use_tool import CallLocal, CallRoute, NeedsLoad, plan_use

__all__ = [
    "WAIT_FOR_STARTUP",
    "CallLocal",
    "CallRoute",
    "NeedsLoad",
    "Plan",
    "Refused",
    "WaitForStartup",
    "plan_call",
    "unknown_tool",
]


class Refused(msgspec.Struct, frozen=True):
    """Answer ``result`` (a ``CallToolResult`` with ``isError``); nothing is sent upstream."""

    result: dict[str, Any]


class WaitForStartup(msgspec.Struct, frozen=True):
    """Wait until the eager servers made their first start attempt, then plan again."""


WAIT_FOR_STARTUP: Final = WaitForStartup()

Plan = ToolRoute | CallRoute | CallLocal | NeedsLoad | WaitForStartup | Refused
"""What `plan_call` answers."""

_any: Final = msgspec.json.Decoder()


def plan_call(snapshot: Snapshot, name: str, arguments: Any = None, *, started: bool = True,
              may_load: bool = True, servers: Iterable[str] = ()) -> Plan:
    """What a call of ``name`` with ``arguments`` does now, read from ``snapshot``.

    Args:
        snapshot: what the caller sees (the router's, or a session's own view).
        name: the name the client called.
        arguments: the call's arguments: a mapping, None, or (the fast path) the raw JSON
            bytes as a `msgspec.Raw`, decoded only when the plan needs to look inside
            (a compound tool, ``use_tool``).
        started: whether the eager servers' first start is over; before, a name nothing
            serves yet (or a compound call naming a subtool not listed yet) is
            `WAIT_FOR_STARTUP`, not refused.
        may_load: False once the caller loaded a lazy server for this call: a name still
            unknown is then refused rather than loaded again.
        servers: the configured servers, whose namespaces an unknown name's hint keeps to
            (default: the servers with a listed tool).

    Returns:
        A `Plan`; see the module docstring. Pure: the same inputs give an equal plan.
    """
    route = snapshot.tools.get(name)
    if route is not None:
        if route.compound is None:
            return route
        return _subtool(route, _decoded(arguments), started)
    if not started:
        return WAIT_FOR_STARTUP
    if name == USE_TOOL and snapshot.discovery is not None:
        used = plan_use(snapshot, _decoded(arguments))
        if isinstance(used, dict):
            return Refused(used)
        if isinstance(used, NeedsLoad):
            return used if may_load else Refused(unknown_tool(used.tool_name, snapshot, servers))
        if isinstance(used, CallRoute) and used.route.compound is not None:
            return _subtool(used.route, used.arguments, started)
        return used
    if name in snapshot.local_tools:
        args = _decoded(arguments)
        return CallLocal(name, dict(args) if isinstance(args, Mapping) else {})
    owner = lazy_owner(name, snapshot.unloaded) if may_load else None
    if owner is not None:
        return NeedsLoad(owner.name, name)
    return Refused(unknown_tool(name, snapshot, servers))


def _subtool(route: ToolRoute, arguments: Any, started: bool) -> Plan:
    """A compound tool's call as the direct call of its subtool, or its refusal."""
    direct = route.direct(arguments)
    if isinstance(direct, dict):
        # Before start-up is over the subtool's server may not have listed it yet.
        return Refused(direct) if started else WAIT_FOR_STARTUP
    sub, args = direct
    return CallRoute(sub, args)


def _decoded(arguments: Any) -> Any:
    """The arguments as Python values (the fast path passes them as raw JSON); None is ``{}``."""
    if isinstance(arguments, msgspec.Raw):
        arguments = _any.decode(arguments)  # valid JSON: it came out of a decoded frame
    return {} if arguments is None else arguments


def unknown_tool(name: str, snapshot: Snapshot, servers: Iterable[str] = ()) -> dict[str, Any]:
    """The ``isError`` result for a tool nothing serves.

    When the name is in a server's namespace (``servers``: the configured ones; default:
    those with a listed tool), only that server's names are suggested: a misspelt
    ``time_get_curent_time`` finds ``time_get_current_time``, and a tool ``slow`` lacks
    is never "corrected" to another server's. Otherwise the closest exposed names.
    """
    known = set(servers) or {route.server for route in snapshot.tools.values()}
    server = owner_of(name, known, snapshot.namespacing)
    names = snapshot.names_of(server) if server is not None else snapshot.exposed_names()
    close = close_names(name, names)
    text = f"Unknown tool {name!r}" + (f": server {server} has no such tool." if server is not None else ".")
    if close:
        text += " Did you mean: " + ", ".join(close) + "?"
    elif server is not None:
        text += f" It offers {len(names)} tools; list them with tools/list."
    elif names:
        text += f" {len(names)} tools are exposed; list them with tools/list."
    else:
        text += " No tools are exposed right now."
    data: dict[str, Any] = {"error": "unknown_tool", "tool": name, "didYouMean": close}
    if server is not None:
        data["server"] = server
    return wire.tool_error_result(text, data)
