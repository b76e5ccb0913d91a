"""The sans-IO toolset exposure: what clients see in each mode, resolution, refIds, pins.

Everything here is synchronous: a `RegistryCore` with a `ToolsetExposure`, fed the
same registration messages the upstream actors send. Each test names the rule of
docs/design.md ("Exposure modes", "Names exposed to clients") it pins down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from mcpvisor.actors.core.catalog import MAX_NAME, UpstreamLists
from mcpvisor.actors.core.model import Note, SavedState, ToolEntry, Toolset
from mcpvisor.actors.core.pins import describe_changes, estimate_tokens, pin_of, ref_id
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamListed, UpstreamUp
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import (
    CONFIG_TOOLS,
    ENTER_CONFIG,
    EXIT_CONFIG,
    EXPOSED,
    MISSING,
    PENDING,
    REFUSED,
    SCHEMA_CHANGED,
    ToolsetError,
    ToolsetExposure,
)
from mcpvisor.actors.router import ExposureCall
from mcpvisor.config import ToolRef, ToolsetDecl, declared_toolset

NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


def tool(name: str, *, kind: str = "string", desc: str | None = None, out: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "description": desc or f"The {name} tool.",
                         "inputSchema": {"type": "object", "properties": {"x": {"type": kind}},
                                         "required": ["x"]}}
    if out:
        t["outputSchema"] = {"type": "object", "properties": {"y": {"type": "number"}}}
    return t


def lists(*tools: Mapping[str, Any]) -> UpstreamLists:
    return UpstreamLists(tools=tuple(tools))


def make(mode: str = "menu", servers: Sequence[str] = ("a", "b"), *, pin: str = "warn",
         namespacing: str = "prefix") -> tuple[RegistryCore, ToolsetExposure]:
    ex = ToolsetExposure(mode, pin_schemas=pin)
    core = RegistryCore(list(servers), namespacing=namespacing, exposure=ex)
    return core, ex


def entry(name: str, core: RegistryCore | None = None, alias: str | None = None) -> ToolEntry:
    """A toolset entry, pinned to the tool as the core lists it now (as build-toolset does)."""
    if core is not None:
        server, _, original = name.partition(".")
        t = core.find_tool(server, original)
        assert t is not None
        return ToolEntry(name, ref_id(server, original, t), alias, pin_of(t))
    return ToolEntry(name, None, alias, None)


def toolset(name: str, *entries: ToolEntry) -> Toolset:
    return Toolset(name=name, tools=entries, description=None, created_at="t", updated_at="t")


def names(core: RegistryCore) -> list[str]:
    return core.snapshot.exposed_names()


def equip(core: RegistryCore, ts: Toolset) -> Any:
    return ExposureCall(lambda ex, c: ex.equip(ts)).run(core)


def test_menu_mode_with_nothing_equipped_lists_only_the_management_tools() -> None:
    """Menu exposure, nothing equipped: configuration mode, the ten management tools, no
    upstream tool even when servers are up."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("add"))))
    assert names(core) == [*CONFIG_TOOLS, EXIT_CONFIG]


def test_equip_shows_the_toolset_and_enter_configuration_mode_under_flattened_names() -> None:
    """Equipped, normal mode: exactly the toolset's tools (``server_tool``) plus
    enter-configuration-mode; entering hides them again, exiting shows them."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("add"), tool("resolve-id"))))
    _, changes = equip(core, toolset("dev", entry("a.echo"), entry("a.resolve-id")))
    assert changes.tools
    assert names(core) == [ENTER_CONFIG, "a_echo", "a_resolve_id"]
    route = core.snapshot.tools["a_resolve_id"]
    assert (route.server, route.original) == ("a", "resolve-id")
    _, changes = ExposureCall(lambda ex, c: ex.set_configuring(True)).run(core)
    assert changes.tools
    assert names(core) == [*CONFIG_TOOLS, EXIT_CONFIG]
    ExposureCall(lambda ex, c: ex.set_configuring(False)).run(core)
    assert names(core) == [ENTER_CONFIG, "a_echo", "a_resolve_id"]


def test_exit_configuration_mode_with_nothing_equipped_leaves_only_the_way_back() -> None:
    """As in HyperTool: normal mode without a toolset lists only enter-configuration-mode."""
    core, _ = make()
    ExposureCall(lambda ex, c: ex.set_configuring(False)).run(core)
    assert names(core) == [ENTER_CONFIG]


def test_unequip_returns_to_the_menu_and_unequip_of_nothing_is_a_typed_error_without_change() -> None:
    """R2: unequip with nothing equipped raises, changes nothing and announces nothing."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    equip(core, toolset("dev", entry("a.echo")))
    _, changes = ExposureCall(lambda ex, c: ex.unequip()).run(core)
    assert changes.tools
    assert names(core) == [*CONFIG_TOOLS, EXIT_CONFIG]
    before = core.snapshot
    with pytest.raises(ToolsetError) as err:
        ExposureCall(lambda ex, c: ex.unequip()).run(core)
    assert err.value.code == "nothing_equipped"
    assert core.snapshot is before


def test_a_failing_call_rolls_the_exposure_back() -> None:
    """An ExposureCall applies fully or not at all, even when its function fails midway."""
    core, ex = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))

    def half(ex: ToolsetExposure, c: RegistryCore) -> None:
        ex.equip(toolset("dev", entry("a.echo")))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        ExposureCall(half).run(core)
    assert ex.equipped is None
    assert ex.configuring
    assert names(core) == [*CONFIG_TOOLS, EXIT_CONFIG]


def test_equip_twice_changes_nothing_the_second_time() -> None:
    """R1: the second identical equip leaves the snapshot's list as it was (no announcement)."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    ts = toolset("dev", entry("a.echo"))
    assert equip(core, ts)[1].tools
    assert not equip(core, ts)[1]


def test_all_mode_lists_every_tool_plus_management_tools_and_equip_narrows() -> None:
    """``all``: every discovered tool after the nine management tools; equipping narrows
    to the toolset (management tools stay), unequipping widens again; no configuration mode."""
    core, _ = make("all")
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("add"))))
    core.apply(UpstreamUp("b", lists(tool("echo"))))
    assert names(core) == [*CONFIG_TOOLS, "a_echo", "a_add", "b_echo"]
    equip(core, toolset("dev", entry("b.echo")))
    assert names(core) == [*CONFIG_TOOLS, "b_echo"]
    ExposureCall(lambda ex, c: ex.unequip()).run(core)
    assert names(core) == [*CONFIG_TOOLS, "a_echo", "a_add", "b_echo"]
    with pytest.raises(ToolsetError) as err:
        ExposureCall(lambda ex, c: ex.set_configuring(True)).run(core)
    assert err.value.code == "no_configuration_mode"


def test_pending_tools_appear_when_their_server_comes_up_in_one_change() -> None:
    """A toolset naming a server that is not up: the rest is exposed, its tools are pending
    with the server's state, and they appear with one change when it comes up."""
    core, ex = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    ts = toolset("dev", entry("a.echo"), entry("b.add"))
    equip(core, ts)
    assert names(core) == [ENTER_CONFIG, "a_echo"]
    statuses = ex.resolve(core)
    assert [s.state for s in statuses] == [EXPOSED, PENDING]
    assert "server b is starting" in (statuses[1].detail or "")
    changes = core.apply(UpstreamUp("b", lists(tool("add"))))
    assert changes.tools
    assert names(core) == [ENTER_CONFIG, "a_echo", "b_add"]


def test_a_withdrawn_server_makes_its_tools_pending_and_a_brief_restart_does_not() -> None:
    """R7: circuit open (withdraw) removes the tools with one change; a restart that keeps
    the lists (withdraw=False) changes nothing clients see."""
    core, ex = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    equip(core, toolset("dev", entry("a.echo")))
    assert not core.apply(UpstreamDown("a", withdraw=False, reason="crashed"))
    assert names(core) == [ENTER_CONFIG, "a_echo"]
    assert core.apply(UpstreamDown("a", withdraw=True, reason="circuit open")).tools
    assert names(core) == [ENTER_CONFIG]
    assert ex.resolve(core)[0].detail == "server a is down: circuit open"


def test_tools_gone_upstream_are_reported_missing_with_close_matches() -> None:
    """R8: a tool the toolset names that its server no longer lists is reported, not dropped."""
    core, ex = make()
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("echo2"))))
    equip(core, toolset("dev", entry("a.echo"), entry("a.echo2"), entry("zz.top")))
    core.apply(UpstreamListed("a", "tools", (tool("echo2"),)))
    statuses = ex.resolve(core)
    assert [s.state for s in statuses] == [MISSING, EXPOSED, MISSING]
    assert "a no longer lists a tool named 'echo'" in (statuses[0].detail or "")
    assert "a.echo2" in (statuses[0].detail or "")
    assert "no server named 'zz'" in (statuses[2].detail or "")
    assert names(core) == [ENTER_CONFIG, "a_echo2"]


def test_schema_change_is_described_and_warn_keeps_the_new_schema() -> None:
    """pinSchemas 'warn': a changed tool stays exposed with its new schema; the change says how."""
    core, ex = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    equip(core, toolset("dev", entry("a.echo", core)))
    core.apply(UpstreamListed("a", "tools", (tool("echo", kind="number", desc="Now louder."),)))
    (status,) = ex.resolve(core)
    assert status.state == SCHEMA_CHANGED
    assert "input parameter 'x' changed (type string -> number)" in status.changes
    assert any(c.startswith("description changed") for c in status.changes)
    schema = core.snapshot.tools["a_echo"].wire["inputSchema"]
    assert schema["properties"]["x"]["type"] == "number"


def test_schema_change_with_refuse_withdraws_the_tool() -> None:
    """pinSchemas 'refuse': a changed tool is not exposed (and comes back if the schema does)."""
    core, ex = make(pin="refuse")
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("add"))))
    equip(core, toolset("dev", entry("a.echo", core), entry("a.add", core)))
    assert core.apply(UpstreamListed("a", "tools", (tool("echo", kind="number"), tool("add")))).tools
    assert [s.state for s in ex.resolve(core)] == [REFUSED, EXPOSED]
    assert names(core) == [ENTER_CONFIG, "a_add"]
    core.apply(UpstreamListed("a", "tools", (tool("echo"), tool("add"))))
    assert names(core) == [ENTER_CONFIG, "a_echo", "a_add"]


def test_describe_changes_covers_parameters_required_and_output() -> None:
    old = {"name": "t", "description": "d",
           "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}
    new = {"name": "t", "description": "d",
           "inputSchema": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
           "outputSchema": {"type": "object"}}
    changes = describe_changes(pin_of(old), new)
    assert changes == ["input parameter 'b' added (integer)", "input parameter 'a' removed",
                       "input parameter 'b' is now required", "input parameter 'a' is no longer required",
                       "output schema added"]
    assert describe_changes(pin_of(new), new) == []


def test_ref_id_is_stable_and_covers_server_name_and_schemas_not_description() -> None:
    t = tool("echo")
    assert ref_id("a", "echo", t) == ref_id("a", "echo", dict(reversed(list(t.items()))))
    assert len(ref_id("a", "echo", t)) == 16
    assert ref_id("a", "echo", t) == ref_id("a", "echo", {**t, "description": "other words"})
    assert ref_id("a", "echo", t) != ref_id("b", "echo", t)
    assert ref_id("a", "echo", t) != ref_id("a", "echo", tool("echo", kind="number"))
    assert ref_id("a", "echo", t) != ref_id("a", "echo", tool("echo", out=True))


def test_aliases_and_collisions_are_resolved_deterministically_and_reported() -> None:
    """An alias is the exposed name; two entries that would share a name both stay,
    with stable hash suffixes, and the collision is reported."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("x-y"), tool("x_y"), tool("echo"))))
    equip(core, toolset("dev", entry("a.x-y"), entry("a.x_y"), entry("a.echo", alias="say")))
    listed = names(core)
    assert "say" in listed
    clashing = [n for n in listed if n.startswith("a_x_y_")]
    assert len(clashing) == 2
    assert any("name collision" in p for p in core.snapshot.problems)
    again, _ = make()
    again.apply(UpstreamUp("a", lists(tool("x-y"), tool("x_y"), tool("echo"))))
    equip(again, toolset("dev", entry("a.x-y"), entry("a.x_y"), entry("a.echo", alias="say")))
    assert names(again) == listed


def test_long_names_are_capped_at_64_with_a_stable_hash() -> None:
    core, _ = make(servers=("s" * 40,))
    long = "t" * 50
    core.apply(UpstreamUp("s" * 40, lists(tool(long))))
    equip(core, toolset("dev", entry(f"{'s' * 40}.{long}")))
    (name,) = [n for n in names(core) if n != ENTER_CONFIG]
    assert len(name) == MAX_NAME
    assert NAME_OK.match(name)


def test_notes_are_appended_to_the_description() -> None:
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    ts = toolset("dev", entry("a.echo"))

    def annotate(ex: ToolsetExposure, c: RegistryCore) -> None:
        ex.sync(SavedState(equipped="dev", toolsets={"dev": ts},
                      annotations={"dev": {"a.echo": (Note("tip", "Say hello first."),)}}))
        ex.equip(ts)

    ExposureCall(annotate).run(core)
    desc = core.snapshot.tools["a_echo"].wire["description"]
    assert desc == "The echo tool.\n\nNote: tip: Say hello first."


def test_declared_toolsets_resolve_by_name_and_by_ref_id() -> None:
    """Config-file toolsets are read-only; a refId entry finds its tool by hash."""
    core, _ = make()
    core.apply(UpstreamUp("a", lists(tool("echo"), tool("add"))))
    rid = ref_id("a", "add", tool("add"))
    decl = ToolsetDecl("dev", (ToolRef("a.echo", None, None), ToolRef(None, rid, "plus")), None)
    ts = declared_toolset(decl)
    assert ts.read_only
    equip(core, ts)
    assert names(core) == [ENTER_CONFIG, "a_echo", "plus"]


def test_restore_equips_the_saved_toolset_in_normal_mode() -> None:
    core, ex = make()
    ts = toolset("dev", entry("a.echo"))
    ex.restore(SavedState(equipped="dev", toolsets={"dev": ts}, annotations={}))
    core.rebuild()
    assert not ex.configuring
    assert ex.equipped == ts
    assert names(core) == [ENTER_CONFIG]
    core.apply(UpstreamUp("a", lists(tool("echo"))))
    assert names(core) == [ENTER_CONFIG, "a_echo"]


def test_the_token_estimate_is_bytes_over_four() -> None:
    tools = [tool("echo")]
    import json

    assert estimate_tokens(tools) == len(json.dumps(tools, separators=(",", ":"), sort_keys=True)) // 4
