"""Compound tools (the config's top-level ``tools``), sans-IO: the catalog entry, its
description and schema, the check of a call before anything is sent, the router core's
announcements when a subtool's server goes and comes back, naming, toolsets, and the
config's validation (issue 17; docs/design.md "Compound tools").
"""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from mcpvisor.actors.core.catalog import UpstreamLists
from mcpvisor.actors.core.compound import CompoundDecl, SubCall, SubtoolDecl
from mcpvisor.actors.core.model import ToolEntry, Toolset
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamUp
from mcpvisor.actors.core.registry import RegistryCore, ServerFilter
from mcpvisor.actors.core.toolsets import MANAGEMENT_TOOLS, ToolsetExposure
from mcpvisor.config import ConfigError, parse_config

SEARCH = {"name": "search", "description": "Search engine\nsecond line",
          "inputSchema": {"type": "object", "properties": {"query": {"type": "string"},
                                                            "limit": {"type": "integer", "minimum": 1}},
                          "required": ["query"], "additionalProperties": False}}
SEARCH_NOTES = {"name": "search_notes", "description": "Search my notes",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                "required": ["text"]},
                "annotations": {"readOnlyHint": True}}
READ_NOTE = {"name": "read_note", "description": "Read one note",
             "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}

RESEARCH = CompoundDecl("research", "Look things up on the web and in my notes", (
    SubtoolDecl("web", "search", "Search the web"),
    SubtoolDecl("notes", "search_notes"),
    SubtoolDecl("notes", "read_note"),
))


def core(namespacing: str = "prefix", *, hidden: frozenset[str] = frozenset(),
         exposure: Any = None) -> RegistryCore:
    c = RegistryCore(["web", "notes"], namespacing=namespacing, compounds=[RESEARCH], exposure=exposure,
                     filters={"notes": ServerFilter(hidden=hidden)})
    c.apply(UpstreamUp("web", UpstreamLists(tools=(SEARCH,))))
    c.apply(UpstreamUp("notes", UpstreamLists(tools=(SEARCH_NOTES, READ_NOTE))))
    return c


def listed(c: RegistryCore, name: str = "research") -> dict[str, Any]:
    return next(dict(t) for t in c.snapshot.tools_list if t["name"] == name)


def test_the_client_sees_one_tool_whose_description_lists_every_subtool() -> None:
    """Each subtool appears as server.tool with the declared description, else the
    upstream's first line; the compound tool keeps its own name under prefix namespacing."""
    tool = listed(core())
    desc = tool["description"]
    assert desc.startswith("Look things up on the web and in my notes")
    assert "- web.search: Search the web" in desc
    assert "- notes.search_notes: Search my notes" in desc
    assert "- notes.read_note: Read one note" in desc
    assert "Search engine" not in desc  # the declared description wins
    assert "unavailable" not in desc.lower()


def test_input_schema_is_a_oneof_of_the_real_schemas() -> None:
    """One branch per subtool: server and tool as constants, args the tool's own schema;
    a model's valid call validates against it and an invalid one does not."""
    schema = listed(core())["inputSchema"]
    assert schema["type"] == "object"
    branches = schema["oneOf"]
    assert [(b["properties"]["server"]["const"], b["properties"]["tool"]["const"]) for b in branches] == [
        ("web", "search"), ("notes", "search_notes"), ("notes", "read_note")]
    assert branches[0]["properties"]["args"] == SEARCH["inputSchema"]
    jsonschema.validate({"server": "web", "tool": "search", "args": {"query": "trio"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"server": "web", "tool": "search", "args": {"query": 3}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"server": "web", "tool": "read_note", "args": {}}, schema)


def test_a_call_becomes_exactly_the_direct_call_of_its_subtool() -> None:
    """The route of ``research`` turns a valid call into (server, tool, args) unchanged,
    with the subtool's own retry safety."""
    route = core().snapshot.tools["research"]
    assert route.compound is not None
    call = {"server": "notes", "tool": "search_notes", "args": {"text": "x", "extra": [1]}}
    sub = route.compound.prepare(call)
    assert sub == SubCall("notes", "search_notes", {"text": "x", "extra": [1]}, True)
    assert route.compound.prepare({"server": "web", "tool": "search", "args": {"query": "q"}}) == \
        SubCall("web", "search", {"query": "q"}, False)


@pytest.mark.parametrize(("arguments", "field"), [
    ({"server": "web", "tool": "fetch", "args": {}}, "tool"),
    ({"server": "mail", "tool": "search", "args": {}}, "server"),
    ({"server": "web", "tool": "search", "args": {"query": 7}}, "args.query"),
    ({"server": "web", "tool": "search", "args": {}}, "args.query"),
    ({"server": "web", "tool": "search", "args": {"query": "q", "limit": 0}}, "args.limit"),
    ({"server": "web", "tool": "search", "args": {"query": "q", "lang": "en"}}, "args.lang"),
    ({"server": "web", "tool": "search", "args": "q"}, "args"),
    ({"tool": "search", "args": {}}, "server"),
    ({"server": "web", "tool": "search", "argz": {}}, "argz"),
])
def test_a_bad_call_is_an_error_result_naming_the_field(arguments: dict[str, Any], field: str) -> None:
    """Undeclared subtools and args failing the subtool's schema are refused before
    anything is sent: an isError result whose text and structuredContent name the field."""
    compound = core().snapshot.tools["research"].compound
    assert compound is not None
    result = compound.prepare(arguments)
    assert isinstance(result, dict)
    assert result["isError"] is True
    assert result["structuredContent"]["field"] == field
    assert f"field {field!r}" in result["content"][0]["text"]


def test_a_hidden_tool_can_still_be_a_subtool() -> None:
    """hiddenTools keeps read_note out of the direct listing but not out of research."""
    c = core(hidden=frozenset({"read_note"}))
    names = c.snapshot.exposed_names()
    assert "notes_read_note" not in names
    assert "notes_search_notes" in names
    compound = c.snapshot.tools["research"].compound
    assert compound is not None
    assert isinstance(compound.prepare({"server": "notes", "tool": "read_note", "args": {"id": 1}}), SubCall)


def test_server_down_and_back_refreshes_the_description_once_each_way() -> None:
    """A withdrawn server's subtools say why they are unavailable, the others keep
    working, and the server's return is one tools change that restores the description."""
    c = core()
    before = listed(c)
    changes = c.apply(UpstreamDown("notes", withdraw=True, reason="circuit open after 5 failures"))
    assert changes.tools
    down = listed(c)
    assert "notes.read_note: unavailable (server notes is down: circuit open after 5 failures)" in \
        down["description"]
    assert "Unavailable now: notes.search_notes, notes.read_note." in down["description"]
    compound = c.snapshot.tools["research"].compound
    assert compound is not None
    refused = compound.prepare({"server": "notes", "tool": "read_note", "args": {"id": 1}})
    assert isinstance(refused, dict)
    assert refused["structuredContent"]["error"] == "unavailable"
    assert isinstance(compound.prepare({"server": "web", "tool": "search", "args": {"query": "q"}}), SubCall)
    back = c.apply(UpstreamUp("notes", UpstreamLists(tools=(SEARCH_NOTES, READ_NOTE))))
    assert back.tools
    assert listed(c) == before


def test_a_tool_gone_from_a_running_server_is_a_warning_not_a_refusal() -> None:
    """The compound tool stays listed; the problem is reported for the log and status."""
    c = RegistryCore(["web", "notes"], compounds=[RESEARCH])
    c.apply(UpstreamUp("web", UpstreamLists(tools=(SEARCH,))))
    c.apply(UpstreamUp("notes", UpstreamLists(tools=(SEARCH_NOTES,))))
    assert "notes.read_note: unavailable (notes does not list a tool named 'read_note')" in \
        listed(c)["description"]
    assert any("subtool notes.read_note unavailable" in p for p in c.snapshot.problems)


@pytest.mark.parametrize("namespacing", ["prefix", "auto", "none"])
def test_the_compound_name_is_its_own_under_every_namespacing(namespacing: str) -> None:
    assert "research" in core(namespacing).snapshot.exposed_names()


def test_a_server_tool_of_the_same_name_is_prefixed_under_auto_and_a_collision_under_none() -> None:
    """Collisions follow the catalog's rules: nothing disappears, and it is reported."""
    clash = {"name": "research", "inputSchema": {"type": "object"}}
    auto = RegistryCore(["web"], namespacing="auto", compounds=[RESEARCH])
    auto.apply(UpstreamUp("web", UpstreamLists(tools=(SEARCH, clash))))
    assert {"research", "web_research", "search"} <= set(auto.snapshot.exposed_names())
    none = RegistryCore(["web"], namespacing="none", compounds=[RESEARCH])
    none.apply(UpstreamUp("web", UpstreamLists(tools=(SEARCH, clash))))
    names = none.snapshot.exposed_names()
    assert "research" not in names
    assert sum(n.startswith("research_") for n in names) == 2
    assert any("name collision" in p for p in none.snapshot.problems)


def test_a_toolset_can_name_the_compound_tool() -> None:
    """An equipped toolset naming ``research`` lists it (and nothing else of its servers)."""
    ts = Toolset("r", (ToolEntry("research", None, None, None),), None, "", "", read_only=True)
    exposure = ToolsetExposure("all", declared={"r": ts})
    c = core(exposure=exposure)
    exposure.equip(ts)
    c.rebuild()
    names = [n for n in c.snapshot.exposed_names() if n not in MANAGEMENT_TOOLS]
    assert names == ["research"]
    assert c.snapshot.tools["research"].compound is not None


def test_resources_and_prompts_say_which_server_they_come_from() -> None:
    """In the description, never in the URI or name."""
    c = RegistryCore(["web"])
    c.apply(UpstreamUp("web", UpstreamLists(
        resources=({"uri": "mem://a", "name": "a", "description": "A thing"},),
        templates=({"uriTemplate": "mem://items/{id}", "name": "item"},),
        prompts=({"name": "greet", "description": "Say hi"},))))
    snap = c.snapshot
    assert snap.resources_list[0]["uri"] == "mem://a"
    assert snap.resources_list[0]["description"] == "[web] A thing"
    assert snap.templates_list[0]["uriTemplate"] == "mem://items/{id}"
    assert snap.templates_list[0]["description"] == "[web]"
    assert snap.prompts_list[0]["description"] == "[web] Say hi"


# --- config ------------------------------------------------------------------------------

SERVERS = {"web": {"command": "w"}, "notes": {"command": "n"}}
SECTION = {"research": {"description": "Look things up on the web and in my notes", "subtools": {
    "web": {"tools": [{"name": "search", "description": "Search the web"}]},
    "notes": {"tools": [{"name": "search_notes"}, {"name": "read_note"}]}}}}


def test_the_coordinator_section_parses_unchanged() -> None:
    config = parse_config({"mcpServers": SERVERS, "tools": SECTION, "toolsets": {"r": ["research"]}}, env={})
    assert config.compound_tools["research"] == RESEARCH
    assert config.toolsets["r"].tools[0].namespaced_name == "research"
    assert not config.warnings


def problems_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={})
    return info.value.problems


def test_every_problem_of_the_section_is_one_line_naming_the_field() -> None:
    lines = problems_of({"mcpServers": SERVERS, "tools": {
        "a": {"subtools": {"nots": {"tools": [{"name": "x"}]}}},
        "b": {"subtools": {}, "descripton": "typo"},
        "c": {"subtools": {"web": {"tools": [{"name": "search", "desc": "d"}], "extra": 1}}},
        "web_search": {"subtools": {"web": {"tools": [{"name": "search"}]}}},
        "equip-toolset": {"subtools": {"web": {"tools": [{"name": "search"}]}}},
    }})
    assert lines == [
        'config: compound tool "a": field "subtools.nots": no server "nots" in "mcpServers" '
        '(did you mean "notes"?)',
        'config: compound tool "b": unknown field "descripton" (did you mean "description"?)',
        'config: compound tool "b": field "subtools": is empty; name at least one server and its tools, '
        'e.g. {"web": {"tools": [{"name": "search"}]}}',
        'config: compound tool "c": field "subtools.web": unknown field "extra"',
        'config: compound tool "c": field "subtools.web.tools[0]": unknown field "desc" '
        '(did you mean "description"?)',
        'config: compound tool "web_search": the name clashes with the server tool web.search (exposed as '
        '"web_search" with namespacing "prefix"); choose another',
        'config: compound tool "equip-toolset": the name clashes with the management tool "equip-toolset"; '
        'choose another',
    ]


def test_the_coordinator_config_variable_comes_after_mcpvisor_config(tmp_path: Any) -> None:
    """$MCP_PROXY_CONFIG_PATH is honoured, below $MCPVISOR_CONFIG and above ./mcpvisor.json."""
    from mcpvisor.config import find_config

    (tmp_path / "mcpvisor.json").write_text("{}")
    assert find_config(env={"MCP_PROXY_CONFIG_PATH": "coord.json"}, cwd=tmp_path) == \
        (tmp_path / "coord.json", "from $MCP_PROXY_CONFIG_PATH")
    assert find_config(env={"MCP_PROXY_CONFIG_PATH": "coord.json", "MCPVISOR_CONFIG": "mine.json"},
                       cwd=tmp_path) == (tmp_path / "mine.json", "from $MCPVISOR_CONFIG")
    assert find_config(env={}, cwd=tmp_path)[0] == tmp_path / "mcpvisor.json"


SIMPLE = {"type": "object", "properties": {"s": {"type": "string"}, "i": {"type": "integer"},
                                           "n": {"type": ["number", "null"]}, "b": {"type": "boolean"},
                                           "any": {"description": "anything"}},
          "required": ["s"], "additionalProperties": False}


@pytest.mark.parametrize("schema", [SIMPLE, {**SIMPLE, "additionalProperties": True}, {"type": "object"}])
@pytest.mark.parametrize("args", [
    {"s": "x"}, {}, {"s": 1}, {"s": "x", "i": 2}, {"s": "x", "i": 2.0}, {"s": "x", "i": 2.5},
    {"s": "x", "i": True}, {"s": "x", "n": None}, {"s": "x", "n": 1.5}, {"s": "x", "n": "1"},
    {"s": "x", "b": 0}, {"s": "x", "b": False},
    {"s": "x", "any": [1, {"a": None}]}, {"s": "x", "extra": 1},
])
def test_the_quick_check_of_plain_schemas_agrees_with_jsonschema(schema: dict[str, Any],
                                                                 args: dict[str, Any]) -> None:
    """Plain schemas skip jsonschema on the hot path; the verdict must be jsonschema's."""
    from mcpvisor.actors.core.compound import resolve_compound

    decl = CompoundDecl("c", None, (SubtoolDecl("s", "t"),))
    compound = resolve_compound(decl, find_tool=lambda s, t: {"name": "t", "inputSchema": schema},
                                listed=lambda s: True, state_of=lambda s: ("ready", None))
    accepted = isinstance(compound.prepare({"server": "s", "tool": "t", "args": args}), SubCall)
    assert accepted == jsonschema.Draft202012Validator(schema).is_valid(args)
