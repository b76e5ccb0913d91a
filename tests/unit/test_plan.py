"""The one plan for a ``tools/call`` (actors/core/plan.py) and the session view's names.

Plain synchronous tests of the sans-IO core: a snapshot built by `RegistryCore` the way the
router builds it, and `plan_call` asked what a call is. A regression shows as a plan of
the wrong kind (a call waiting, loading or refused where it should be routed, or the
other way round), a compound tool or ``use_tool`` reaching the wrong upstream tool or
arguments, an unknown name's hint changing, a plain route costing an allocation, or a
toolset view naming tools unlike the proxy (``calc.add`` instead of ``calc_add``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mcpvisor.actors.core.catalog import Snapshot, UpstreamLists
from mcpvisor.actors.core.compound import CompoundDecl, SubtoolDecl
from mcpvisor.actors.core.discovery import USE_TOOL, LazyBook
from mcpvisor.actors.core.model import ToolEntry, Toolset
from mcpvisor.actors.core.plan import (
    WAIT_FOR_STARTUP,
    CallLocal,
    CallRoute,
    NeedsLoad,
    Refused,
    plan_call,
    unknown_tool,
)
from mcpvisor.actors.core.registration import UpstreamUp
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import CONFIG_TOOLS, ToolsetExposure


def tool(name: str, **props: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "required": list(props),
                                          "properties": {k: {"type": v} for k, v in props.items()}}}


CALC = UpstreamLists(tools=(tool("add", a="number", b="number"), tool("resolve-id", q="string")))
KIT = CompoundDecl("kit", None, (SubtoolDecl("calc", "add"),))


def core(mode: str = "all", *, lazy: bool = True) -> RegistryCore:
    """calc (ready), big (lazy, not loaded), the compound tool ``kit`` over calc's add."""
    book = LazyBook.of({"big": "Big toolbox"} if lazy else {})
    exposure = ToolsetExposure(mode, lazy=book)
    c = RegistryCore(["calc", "big"], exposure=exposure, compounds=(KIT,))
    c.apply(UpstreamUp("calc", CALC))
    return c


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def test_a_routed_name_is_its_route_itself_with_the_arguments_left_alone() -> None:
    snap = core().snapshot
    route = snap.tools["calc_add"]
    plan = plan_call(snap, "calc_add", msgspec.Raw(b'{"a": 1, "b": 2}'))
    assert plan is route  # the fast path's common case allocates nothing
    assert (route.server, route.original) == ("calc", "add")
    assert plan_call(snap, "calc_resolve_id").original == "resolve-id"  # type: ignore[union-attr]


def test_a_compound_call_is_its_subtools_direct_call_or_its_refusal() -> None:
    snap = core().snapshot
    for arguments in ({"server": "calc", "tool": "add", "args": {"a": 1, "b": 2}},
                      msgspec.Raw(b'{"server": "calc", "tool": "add", "args": {"a": 1, "b": 2}}')):
        plan = plan_call(snap, "kit", arguments)
        assert isinstance(plan, CallRoute)
        assert (plan.route.server, plan.route.original, plan.arguments) == ("calc", "add", {"a": 1, "b": 2})
    bad = plan_call(snap, "kit", {"server": "calc", "tool": "add", "args": {"a": "x", "b": 2}})
    assert isinstance(bad, Refused)
    assert "field 'args.a'" in text(bad.result)
    assert plan_call(snap, "kit", {"server": "calc", "tool": "nope"}, started=False) is WAIT_FOR_STARTUP


def test_an_unknown_name_waits_for_start_up_then_is_refused_with_the_closest_names() -> None:
    snap = core().snapshot
    assert plan_call(snap, "calc_ad", started=False) is WAIT_FOR_STARTUP
    plan = plan_call(snap, "calc_ad")
    assert plan == Refused(unknown_tool("calc_ad", snap))
    assert text(plan.result).startswith(
        "Unknown tool 'calc_ad': server calc has no such tool. Did you mean: calc_add")
    assert plan.result["structuredContent"]["error"] == "unknown_tool"
    empty = plan_call(Snapshot(), "x")
    assert text(empty.result) == "Unknown tool 'x'. No tools are exposed right now."  # type: ignore[union-attr]


def test_a_lazy_servers_tool_is_loaded_once_then_refused() -> None:
    c = core()
    assert [s.name for s in c.snapshot.unloaded] == ["big"]
    assert plan_call(c.snapshot, "big_echo", {}) == NeedsLoad("big", "big_echo")
    assert plan_call(c.snapshot, "big.echo", {}) == NeedsLoad("big", "big.echo")
    assert isinstance(plan_call(c.snapshot, "big_echo", {}, may_load=False), Refused)
    c.apply(UpstreamUp("big", UpstreamLists(tools=(tool("echo"),))))
    assert c.snapshot.unloaded == ()
    assert plan_call(c.snapshot, "big_echo", {}) is c.snapshot.tools["big_echo"]


def test_a_management_tool_is_local() -> None:
    snap = core().snapshot
    assert plan_call(snap, "equip-toolset", {"name": "t"}) == CallLocal("equip-toolset", {"name": "t"})
    assert plan_call(snap, "get-active-toolset", None) == CallLocal("get-active-toolset", {})


def test_use_tool_routes_loads_refuses_and_reaches_a_compound_subtool() -> None:
    snap = core("discovery").snapshot
    plan = plan_call(snap, USE_TOOL, {"tool_name": "calc.add", "arguments": {"a": 1, "b": 2}})
    assert plan == CallRoute(snap.tools["calc_add"], {"a": 1, "b": 2})
    raw = plan_call(snap, USE_TOOL, msgspec.Raw(b'{"tool_name": "calc_add", "arguments": {"a": 1, "b": 2}}'))
    assert raw == plan
    sub = plan_call(snap, USE_TOOL, {"tool_name": "kit", "arguments": {"server": "calc", "tool": "add",
                                                                       "args": {"a": 3, "b": 4}}})
    assert isinstance(sub, CallRoute)
    assert (sub.route.original, sub.arguments) == ("add", {"a": 3, "b": 4})
    assert plan_call(snap, USE_TOOL, {"tool_name": "big_echo"}) == NeedsLoad("big", "big_echo")
    after_load = plan_call(snap, USE_TOOL, {"tool_name": "big_echo"}, may_load=False)
    assert isinstance(after_load, Refused)
    assert text(after_load.result).startswith("Unknown tool 'big_echo'.")
    bad = plan_call(snap, USE_TOOL, {"tool_name": "calc_add", "arguments": {"a": "x", "b": 1}})
    assert isinstance(bad, Refused)
    assert text(bad.result).startswith("Invalid arguments for calc_add: arguments.a:")
    assert plan_call(snap, USE_TOOL, {"tool_name": CONFIG_TOOLS[0]}) == CallLocal(CONFIG_TOOLS[0], {})


def test_a_toolset_view_names_tools_as_the_proxy_does_when_it_equips_the_toolset() -> None:
    """The harness session's view of a toolset ``["calc.add", "calc.resolve-id"]`` lists
    ``calc_add`` and ``calc_resolve_id`` (``^[a-zA-Z0-9_-]{1,64}$``), the names the proxy
    lists once it equips the same toolset, without the management tools."""
    c = core()
    exposure = c.exposure
    assert isinstance(exposure, ToolsetExposure)
    entries = tuple(ToolEntry(name, None, None, None) for name in ("calc.add", "calc.resolve-id"))
    toolset = Toolset("small", entries, None, "", "")
    view = exposure.view(c, toolset)
    assert view.exposed_names() == ["calc_add", "calc_resolve_id"]
    assert [s.name for s in view.unloaded] == ["big"]  # a view's calls load lazy servers too
    assert c.snapshot.exposed_names() != view.exposed_names()  # the proxy's own exposure is untouched
    exposure.equip(toolset)
    c.rebuild()
    assert [n for n in c.snapshot.exposed_names() if n not in CONFIG_TOOLS] == view.exposed_names()
