"""Lazy discovery's sans-IO core (actors/core/discovery.py, actors/core/use_tool.py) and
``use_tool`` on the byte-level fast path (memory streams, virtual time).

A regression shows as: tools/list listing more than the three tools (or load_mcp when
nothing can be loaded), a catalog over its budget, a query ranking the wrong tool first,
bad arguments reaching an upstream, a use_tool call leaving the fast path, or a server
offered after three failed loads.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from mcpvisor.actors.core.catalog import UpstreamLists
from mcpvisor.actors.core.discovery import (
    DISCOVER_TOOL,
    LOAD_MCP,
    MAX_LOAD_FAILURES,
    USE_TOOL,
    LazyBook,
    match_servers,
)
from mcpvisor.actors.core.registration import UpstreamUp
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import CONFIG_TOOLS, ToolsetExposure
from mcpvisor.actors.core.use_tool import CallLocal, CallRoute, NeedsLoad, check_arguments, plan_use
from mcpvisor.config import ConfigError, parse_config
from mcpvisor.settings import with_env_overrides
from tests.fakes.memory_front import open_memory_proxy

BOUND_S = 3600.0


def tool(name: str, description: str = "", **props: str) -> dict[str, Any]:
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": {k: {"type": v} for k, v in props.items()},
                            "required": list(props)}}


GIT = UpstreamLists(tools=(tool("status", "Show the working tree status"),
                           tool("commit", "Record changes to the repository", message="string")))
WEB = UpstreamLists(tools=(tool("search", "Search the web for pages", query="string"),
                           tool("fetch", "Fetch a URL and return its text", url="string")))


def discovery_core(budget: int = 8192, lazy: dict[str, str | None] | None = None) -> RegistryCore:
    book = LazyBook.of(lazy if lazy is not None else {"big": "Big internal toolbox"})
    exposure = ToolsetExposure("discovery", lazy=book, discovery_budget=budget,
                               server_descriptions={"web": "Web search and fetching"})
    core = RegistryCore(["git", "web", "big"], exposure=exposure)
    core.apply(UpstreamUp("git", GIT))
    core.apply(UpstreamUp("web", WEB))
    return core


def test_tools_list_is_the_three_tools_and_the_catalog_names_every_tool_and_lazy_server() -> None:
    snap = discovery_core().snapshot
    assert [t["name"] for t in snap.tools_list] == [DISCOVER_TOOL, USE_TOOL, LOAD_MCP]
    text = snap.tools_list[0]["description"]
    assert "## git" in text
    assert "- git_status: Show the working tree status" in text
    assert "## web — Web search and fetching" in text
    assert "<mcp_servers>" in text
    assert "- big: Big internal toolbox" in text
    assert set(CONFIG_TOOLS) <= set(snap.local_tools)  # management tools: callable, not listed
    assert set(snap.tools) == {"git_status", "git_commit", "web_search", "web_fetch"}


def test_load_mcp_is_listed_only_while_a_lazy_server_can_be_loaded() -> None:
    core = discovery_core()
    changes = core.apply(UpstreamUp("big", UpstreamLists(tools=(tool("echo"),))))
    assert changes.tools
    assert [t["name"] for t in core.snapshot.tools_list] == [DISCOVER_TOOL, USE_TOOL]
    assert "<mcp_servers>" not in core.snapshot.tools_list[0]["description"]


def test_a_server_that_failed_three_loads_is_no_longer_offered() -> None:
    core = discovery_core()
    book = core.exposure.lazy  # type: ignore[attr-defined]
    for n in range(1, MAX_LOAD_FAILURES + 1):
        record = book.failed("big", f"exit status 3 (try {n})")
        changes = core.rebuild()
        assert record.given_up is (n == MAX_LOAD_FAILURES)
        assert bool(changes.tools) is (n == MAX_LOAD_FAILURES)  # one list_changed, when it is given up
    assert [t["name"] for t in core.snapshot.tools_list] == [DISCOVER_TOOL, USE_TOOL]
    assert core.snapshot.discovery is not None
    assert [s.last_error for s in core.snapshot.discovery.unavailable] == ["exit status 3 (try 3)"]


def test_over_the_budget_the_catalog_lists_servers_and_counts_and_says_to_search() -> None:
    full = discovery_core().snapshot.tools_list[0]["description"]
    small = discovery_core(budget=len(full.encode()) - 1).snapshot.tools_list[0]["description"]
    assert len(small.encode()) < len(full.encode())
    assert "git_status" not in small
    assert "- git: 2 tools" in small
    assert '{"query": "a few words"}' in small
    assert "- big: Big internal toolbox" in small


def test_a_query_ranks_by_name_then_description_then_server() -> None:
    index = discovery_core().snapshot.discovery
    assert index is not None
    assert index.search("search")[0].name == "web_search"
    assert [m.name for m in index.search("working tree")] == ["git_status"]
    assert [m.name for m in index.search("web")][:2] == ["web_search", "web_fetch"]
    assert index.search("zzz") == []


def test_a_query_matches_words_not_letters_inside_them() -> None:
    """"slugify a title" must not offer every tool whose description contains the letter a."""
    core = discovery_core(lazy={"big": "Text utilities: word count, slugify, reverse, shout"})
    index = core.snapshot.discovery
    assert index is not None
    assert index.search("slugify a title") == []
    assert [s.name for s in match_servers("slugify a title", index.lazy)] == ["big"]
    assert [m.name for m in index.search("the status of a tree")] == ["git_status"]
    assert [m.name for m in index.search("fetch a page")] == ["web_fetch", "web_search"]
    assert index.search("a") == []
    assert match_servers("to the", index.lazy) == []


def test_use_tool_plans_check_arguments_before_anything_is_sent() -> None:
    snap = discovery_core().snapshot
    plan = plan_use(snap, {"tool_name": "git.commit", "arguments": {"message": "x"}})
    assert isinstance(plan, CallRoute)
    assert plan.route.original == "commit"
    bad = plan_use(snap, {"tool_name": "git_commit", "arguments": {"message": 3}})
    assert isinstance(bad, dict)
    assert bad["isError"]
    assert "arguments.message: 3 is not of type 'string'" in bad["content"][0]["text"]
    missing = plan_use(snap, {"tool_name": "git_commit"})
    assert isinstance(missing, dict)
    assert "'message' is a required property" in missing["content"][0]["text"]
    assert isinstance(plan_use(snap, {"tool_name": "equip-toolset", "arguments": {"name": "x"}}), CallLocal)
    assert plan_use(snap, {"tool_name": "big_echo"}) == NeedsLoad("big", "big_echo")
    unknown = plan_use(snap, {"tool_name": "git_stat"})
    assert isinstance(unknown, dict)
    assert unknown["structuredContent"]["didYouMean"][0] == "git_status"


def test_check_arguments_accepts_what_the_schema_allows() -> None:
    assert check_arguments(tool("t", n="integer"), {"n": 1}) is None
    assert check_arguments({"name": "t"}, {"anything": True}) is None  # no schema: the upstream decides
    assert check_arguments({"inputSchema": {"type": "nonsense"}}, {}) is None  # broken schema: likewise


def test_discovery_is_accepted_and_the_budget_is_validated() -> None:
    settings = parse_config({"mcpServers": {},
                             "settings": {"exposure": "discovery", "discoveryBudget": 4096}}).settings
    assert with_env_overrides(settings, env={}).exposure == "discovery"
    assert settings.discovery_budget == 4096
    with pytest.raises(ConfigError, match='"discoveryBudget": 10 is out of range'):
        parse_config({"mcpServers": {}, "settings": {"discoveryBudget": 10}})
    with pytest.raises(ConfigError, match="discoveryBudget"):
        parse_config({"mcpServers": {}, "settings": {"discoveryBudget": "8k"}})


def _discovery_backend(p: Any) -> None:
    """Give the memory proxy's fixed snapshot a discovery index over its routes."""
    from mcpvisor.actors.core.discovery import DiscoveryIndex

    snap = p.backend.router.snapshot
    schema = tool("x", text="string")["inputSchema"]
    routes = {name: msgspec.structs.replace(r, wire={**r.wire, "inputSchema": schema})
              for name, r in snap.tools.items()}
    p.backend.router.snapshot = msgspec.structs.replace(snap, tools=routes,
                                                    discovery=DiscoveryIndex(routes=tuple(routes.values())))


async def test_use_tool_takes_the_fast_path_as_the_direct_call(
        autojump_clock: trio.testing.MockClock) -> None:
    """A use_tool call with good arguments reaches the upstream as the direct call of the
    tool (its own name, the arguments as sent, a proxy id) and its answer comes back
    unchanged under the client's id; the fast path owns it."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            _discovery_backend(p)
            await p.client.handshake()
            await p.client.send({"jsonrpc": "2.0", "id": "u1", "method": "tools/call",
                                 "params": {"name": USE_TOOL,
                                            "arguments": {"tool_name": "s_echo",
                                                          "arguments": {"text": "hi"}}}})
            request = await p.server.receive()
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns("u1")
            assert request["params"] == {"name": "echo", "arguments": {"text": "hi"}}
            assert request["id"].startswith("mv-")
            await p.server.answer(request, {"content": [{"type": "text", "text": "echo: hi"}]})
            reply = await p.client.receive_id("u1")
            assert reply["result"] == {"content": [{"type": "text", "text": "echo: hi"}]}
            assert p.backend.notes == [("s", "echo", None)]


async def test_use_tool_with_bad_arguments_sends_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """Bad arguments are refused with an isError result naming the field; the next frame
    the upstream sees is the following good call, not the bad one."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            _discovery_backend(p)
            await p.client.handshake()
            await p.client.send({"jsonrpc": "2.0", "id": "bad", "method": "tools/call",
                                 "params": {"name": USE_TOOL,
                                            "arguments": {"tool_name": "s_echo", "arguments": {"text": 5}}}})
            reply = await p.client.receive_id("bad")
            assert reply["result"]["isError"] is True
            assert "arguments.text: 5 is not of type 'string'" in reply["result"]["content"][0]["text"]
            await p.client.send({"jsonrpc": "2.0", "id": "good", "method": "tools/call",
                                 "params": {"name": "s_echo", "arguments": {"text": "ok"}}})
            request = await p.server.receive()
            assert request["params"]["arguments"] == {"text": "ok"}


def test_many_lazy_servers_keep_the_start_up_list_small_and_are_found_by_query() -> None:
    """Whatever the number of lazy servers, tools/list at start stays under 3 KB; those
    the block cannot name are counted, and a query finds them."""
    from mcpvisor.actors.core.discovery import size_of
    from mcpvisor.menu.discovery import discover

    lazy = {f"srv{i:03d}": f"Toolbox number {i} for topic{i}" for i in range(200)}
    exposure = ToolsetExposure("discovery", lazy=LazyBook.of(lazy))
    core = RegistryCore(list(lazy), exposure=exposure)
    snap = core.snapshot
    assert size_of(snap.tools_list) < 3 * 1024
    assert "more servers; find them with discover_tool" in snap.tools_list[0]["description"]
    found = discover(snap, {"query": "topic150"})
    assert [s["name"] for s in found["structuredContent"]["notLoaded"]] == ["srv150"]


@pytest.mark.parametrize("arguments", [
    {"q": "x"}, {"q": 1}, {}, {"q": "x", "n": 2}, {"q": "x", "n": 2.0}, {"q": "x", "n": True},
    {"q": "x", "n": 1.5},
    {"q": "x", "flag": False}, {"q": "x", "flag": 0}, {"q": "x", "items": []}, {"q": "x", "items": {}},
    {"q": "x", "any": None}, {"q": "x", "extra": 1}, {"q": None},
    {"q": "x", "n": 0}, {"q": "x", "n": 101}, {"q": "x", "n": 100}, {"q": "", "n": 1}, {"q": "x" * 11},
    {"q": "x", "color": "red"}, {"q": "x", "color": "mauve"}, {"q": "x", "color": 1},
    {"q": "x", "when": "nonsense"},
    {"q": "x", "ratio": 0.0}, {"q": "x", "ratio": 1.0}, {"q": "x", "ratio": 0.5}, {"q": "x", "ratio": "0.5"},
])
@pytest.mark.parametrize("closed", [False, True])
def test_the_quick_check_agrees_with_jsonschema(arguments: dict[str, Any], closed: bool) -> None:
    """use_tool's quick check of flat schemas never accepts what jsonschema refuses, nor the reverse."""
    import jsonschema  # type: ignore[import-untyped]  # jsonschema ships no type hints

    schema = {"type": "object", "required": ["q"], "additionalProperties": not closed,
              "properties": {"q": {"type": "string", "minLength": 1, "maxLength": 10},
                             "n": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                             "flag": {"type": "boolean"}, "items": {"type": "array"},
                             "any": {"description": "anything"}, "color": {"enum": ["red", "green"]},
                             "when": {"type": "string", "format": "date-time"},
                             "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}}
    expected = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    assert (check_arguments({"inputSchema": schema}, arguments) is None) is expected
