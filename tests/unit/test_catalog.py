"""Names clients see: flattening, namespacing modes, collisions, the 64-character cap."""

from __future__ import annotations

import re

from mcpvisor.actors.core.catalog import (
    MAX_NAME,
    Candidate,
    SnapshotBuilder,
    UpstreamLists,
    assign_names,
    flatten,
)

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tool(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "description": f"{name} tool", "inputSchema": {"type": "object"}, **extra}


def names(candidates: list[Candidate], mode: str) -> tuple[dict[str, str], list[str]]:
    named, problems = assign_names(candidates, mode)
    return {n.key: n.name for n in named}, problems


def test_flattening_turns_every_other_character_into_an_underscore() -> None:
    assert flatten("context7.resolve-library-id") == "context7_resolve_library_id"


def test_prefix_mode_namespaces_every_tool() -> None:
    got, problems = names([Candidate("git", "status", tool("status")),
                           Candidate("context7", "resolve-library-id", tool("resolve-library-id"))], "prefix")
    assert got == {"git.status": "git_status", "context7.resolve-library-id": "context7_resolve_library_id"}
    assert problems == []


def test_auto_mode_prefixes_only_the_tools_that_clash() -> None:
    got, _ = names([Candidate("a", "read", tool("read")), Candidate("b", "read", tool("read")),
                    Candidate("a", "write", tool("write"))], "auto")
    assert got == {"a.read": "a_read", "b.read": "b_read", "a.write": "write"}


def test_none_mode_reports_a_clash_and_keeps_both_callable() -> None:
    got, problems = names([Candidate("a", "read", tool("read")), Candidate("b", "read", tool("read"))],
                          "none")
    assert len(set(got.values())) == 2
    assert any("namespacing 'none'" in p for p in problems)


def test_names_that_flatten_alike_are_both_kept_under_stable_distinct_names() -> None:
    """`a-b` and `a_b` would both be `s_a_b`: neither silently shadows the other, and the
    result does not depend on the order the servers came up in."""
    first, problems = names([Candidate("s", "a-b", tool("a-b")), Candidate("s", "a_b", tool("a_b"))],
                            "prefix")
    second, _ = names([Candidate("s", "a_b", tool("a_b")), Candidate("s", "a-b", tool("a-b"))], "prefix")
    assert first == second
    assert len(set(first.values())) == 2
    assert all(v.startswith("s_a_b_") for v in first.values())
    assert problems
    assert "name collision" in problems[0]


def test_long_names_are_capped_with_a_stable_hash() -> None:
    long = "x" * 100
    got, _ = names([Candidate("server", long, tool(long)), Candidate("server", long + "y", tool(long + "y"))],
                   "prefix")
    values = list(got.values())
    assert all(len(v) <= MAX_NAME and VALID.match(v) for v in values)
    assert len(set(values)) == 2
    again, _ = names([Candidate("server", long, tool(long))], "prefix")
    assert again["server." + long] == got["server." + long]


def test_snapshot_routes_by_table_and_passes_schemas_through() -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    lists = {"ev": UpstreamLists(tools=(tool("echo", inputSchema=schema,
                                             annotations={"readOnlyHint": True}),),
                                 prompts=({"name": "greet"},),
                                 resources=({"uri": "mem://a", "name": "a"},),
                                 templates=({"uriTemplate": "mem://items/{id}", "name": "item"},))}
    snap = SnapshotBuilder().build(["ev"], lists, [Candidate("ev", "echo", lists["ev"].tools[0])])
    route = snap.tools["ev_echo"]
    assert (route.server, route.original, route.retry_safe) == ("ev", "echo", True)
    assert snap.tools_list[0]["inputSchema"] == schema
    assert snap.prompts["ev_greet"].original == "greet"
    assert snap.route_resource("mem://a") == "ev"
    assert snap.route_resource("mem://items/42") == "ev"
    assert snap.route_resource("other://x") is None


def test_a_resource_listed_by_two_servers_goes_to_the_first_and_is_reported() -> None:
    lists = {"a": UpstreamLists(resources=({"uri": "file:///x", "name": "x"},)),
             "b": UpstreamLists(resources=({"uri": "file:///x", "name": "x"},))}
    snap = SnapshotBuilder().build(["a", "b"], lists, [])
    assert snap.route_resource("file:///x") == "a"
    assert any("file:///x" in p for p in snap.problems)


def _prompt_names(namespacing: str) -> dict[str, tuple[str, str]]:
    lists = {"a": UpstreamLists(prompts=({"name": "greet"}, {"name": "only-a"})),
             "b": UpstreamLists(prompts=({"name": "greet"},))}
    snap = SnapshotBuilder(namespacing=namespacing).build(["a", "b"], lists, [])
    assert [p["name"] for p in snap.prompts_list] == list(snap.prompts)
    return {name: (r.server, r.original) for name, r in snap.prompts.items()}


def test_prompt_names_follow_namespacing_exactly_as_tools_do() -> None:
    """Prompts are named by `assign_names`, like tools: under ``none`` a client gets and
    completes a prompt by its own name (the conformance suite's ``prompts-get-*``); a
    regression shows as ``a_only_a`` under none/auto or a dropped colliding prompt."""
    assert _prompt_names("prefix") == {"a_greet": ("a", "greet"), "a_only_a": ("a", "only-a"),
                                       "b_greet": ("b", "greet")}
    auto = _prompt_names("auto")
    assert auto == {"a_greet": ("a", "greet"), "only-a": ("a", "only-a"), "b_greet": ("b", "greet")}
    none = _prompt_names("none")
    # Both "greet"s stay reachable under disambiguated names; the bare one is unique.
    assert none["only-a"] == ("a", "only-a")
    assert sorted(v for k, v in none.items() if k != "only-a") == [("a", "greet"), ("b", "greet")]
    assert all(k.startswith("greet_") for k in none if k != "only-a")


def test_a_prompt_clash_under_namespacing_none_is_reported() -> None:
    greet = UpstreamLists(prompts=({"name": "greet"},))
    lists = {"a": greet, "b": greet}
    snap = SnapshotBuilder(namespacing="none").build(["a", "b"], lists, [])
    assert any("prompt named 'greet'" in p for p in snap.problems), snap.problems


def test_a_template_completion_ref_routes_to_the_server_that_listed_the_template() -> None:
    """``completion/complete`` with ``ref/resource`` names the template as listed; it goes
    to its owner, also when another server's template has a shorter literal prefix that
    the longer one starts with."""
    lists = {"a": UpstreamLists(templates=({"uriTemplate": "mem://{id}", "name": "any"},)),
             "b": UpstreamLists(templates=({"uriTemplate": "mem://docs/{id}", "name": "doc"},),
                                resources=({"uri": "mem://fixed", "name": "fixed"},))}
    snap = SnapshotBuilder().build(["a", "b"], lists, [])
    assert snap.route_completion_ref("mem://{id}") == "a"
    assert snap.route_completion_ref("mem://docs/{id}") == "b"
    assert snap.route_completion_ref("mem://fixed") == "b"
    assert snap.route_completion_ref("other://{x}") is None
