"""The management tools as a client calls them: arguments, readable text, structuredContent,
and ``isError`` results that say what exists.

Driven through `Menu.call` (what the front calls for a name in ``snapshot.local_tools``)
over a real router and state directory; upstreams are simulated by registration
messages. Real clock; every test bounded.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from mcpvisor.actors.core.registration import UpstreamDown
from mcpvisor.actors.core.toolsets import CONFIG_TOOLS, ENTER_CONFIG, EXIT_CONFIG, MANAGEMENT_TOOLS
from mcpvisor.menu import DEFINITIONS
from mcpvisor.menu.render import status_dict
from tests.unit.test_registry_router import BOUND_S, Harness, open_harness


def text(result: dict[str, Any]) -> str:
    return "".join(c["text"] for c in result["content"])


def data(result: dict[str, Any]) -> dict[str, Any]:
    assert not result.get("isError"), text(result)
    out: dict[str, Any] = result["structuredContent"]
    return out


def error(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is True, result
    assert result["structuredContent"]["message"] in text(result)
    out: dict[str, Any] = result["structuredContent"]
    return out


async def two_servers(h: Harness) -> None:
    await h.up("git", "status", "diff", "commit", "log")
    await h.up("docs", "search", "resolve-library-id")


def test_definitions_have_the_hypertool_names_and_arguments() -> None:
    """docs/design.md names every management tool and its arguments; prompts written for
    HyperTool use exactly these."""
    assert tuple(DEFINITIONS) == MANAGEMENT_TOOLS
    props = {name: set(d["inputSchema"].get("properties", {})) for name, d in DEFINITIONS.items()}
    assert props["build-toolset"] == {"name", "tools", "description", "autoEquip"}
    assert DEFINITIONS["build-toolset"]["inputSchema"]["required"] == ["name", "tools"]
    assert set(DEFINITIONS["build-toolset"]["inputSchema"]["properties"]["tools"]["items"]["properties"]) == {
        "namespacedName", "refId", "alias"}
    assert props["equip-toolset"] == props["delete-toolset"] == {"name"}
    assert props["list-available-tools"] == {"server"}
    assert props["add-tool-annotation"] == {"toolRef", "notes"}
    for name in ("unequip-toolset", "get-active-toolset", "list-saved-toolsets", "get-server-status",
                 "exit-configuration-mode", "enter-configuration-mode"):
        assert props[name] == set()
    for d in DEFINITIONS.values():
        assert d["description"]
        assert d["inputSchema"]["type"] == "object"


async def test_list_available_tools_groups_by_server_with_ref_ids_and_filters(tmp_path: Path) -> None:
    """Grouped by server in config order, namespaced names, one-line descriptions, server
    state and refIds; ``server`` filters; an unknown server lists the real ones."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs", "down")) as h:
            await two_servers(h)
            await h.router.submit(UpstreamDown("down", withdraw=True, reason="exit status 1"))
            out = data(await h.call("list-available-tools"))
            assert [s["name"] for s in out["servers"]] == ["git", "docs", "down"]
            assert out["toolCount"] == 6
            git = out["servers"][0]
            assert git["state"] == "ready"
            assert git["toolCount"] == 4
            assert [t["namespacedName"] for t in git["tools"]] == [
                "git.status", "git.diff", "git.commit", "git.log"]
            assert all(len(t["refId"]) == 16 and t["description"] for t in git["tools"])
            assert out["servers"][2] == {"name": "down", "state": "down", "reason": "exit status 1",
                                         "toolCount": 0, "tools": []}
            body = text(await h.call("list-available-tools"))
            assert "## git (ready; 4 tools)" in body
            assert "- docs.resolve-library-id  [refId " in body
            assert "## down (down: exit status 1; 0 tools)" in body
            only = data(await h.call("list-available-tools", server="docs"))
            assert [s["name"] for s in only["servers"]] == ["docs"]
            err = error(await h.call("list-available-tools", server="dcos"))
            assert err["error"] == "unknown_server"
            assert err["servers"] == ["git", "docs", "down"]


async def test_build_with_auto_equip_shows_the_toolset_and_returns_to_normal_mode(tmp_path: Path) -> None:
    """The headline flow: the menu (10 management tools) -> build-toolset with autoEquip ->
    exactly the toolset's tools under flattened names plus enter-configuration-mode."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs")) as h:
            await two_servers(h)
            assert h.names() == [*CONFIG_TOOLS, EXIT_CONFIG]
            tools = [{"namespacedName": "git.status"}, {"namespacedName": "git.diff"},
                     {"namespacedName": "docs.resolve-library-id", "alias": "resolve"}]
            result = await h.call("build-toolset", name="dev", description="daily work", autoEquip=True,
                                  tools=tools)
            out = data(result)
            assert out["equipped"] is True
            assert out["warnings"] == []
            assert out["toolset"]["name"] == "dev"
            assert out["toolset"]["toolCount"] == 3
            assert h.names() == [ENTER_CONFIG, "git_status", "git_diff", "resolve"]
            assert out["active"]["visibleTools"] == h.names()
            assert out["active"]["configurationMode"] is False
            assert "Saved toolset 'dev' with 3 tools." in text(result)
            assert "docs.resolve-library-id -> resolve: exposed" in text(result)


async def test_build_errors_say_what_exists(tmp_path: Path) -> None:
    """Invalid name -> the rule; unknown tool -> close matches; taken name -> the saved
    names; read-only name -> says so; nothing is saved on any error."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs"), declared={"ro": ["git.log"]}) as h:
            await two_servers(h)
            err = error(await h.call("build-toolset", name="bad name!",
                                     tools=[{"namespacedName": "git.status"}]))
            assert err["error"] == "invalid_name"
            assert "A-Z" in err["rule"]
            err = error(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.stats"},
                                                                         {"namespacedName": "nope.x"}]))
            assert err["error"] == "unknown_tool"
            assert "git.status" in err["didYouMean"]
            assert any("no server 'nope'; servers: git, docs" in p for p in err["problems"])
            err = error(await h.call("build-toolset", name="dev", tools=[{"refId": "0123456789abcdef"}]))
            assert "no tool has refId" in err["message"]
            err = error(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.log",
                                                                         "alias": "get-active-toolset"}]))
            assert "management tool" in err["message"]
            err = error(await h.call("build-toolset", name="dev", tools=[]))
            assert err["error"] == "invalid_arguments"
            err = error(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.log"}],
                                     extra=1))
            assert err["error"] == "invalid_arguments"
            assert "extra" in err["message"]
            err = error(await h.call("build-toolset", name="ro", tools=[{"namespacedName": "git.log"}]))
            assert err["error"] == "read_only"
            assert not (await trio.to_thread.run_sync(h.store.load)).toolsets
            data(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.log"}]))
            err = error(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.log"}]))
            assert err["error"] == "toolset_exists"
            assert err["toolsets"] == ["ro", "dev"]


async def test_build_by_ref_id_and_for_a_server_not_up_yet(tmp_path: Path) -> None:
    """A refId names a tool by hash; a tool of a configured server that is not up is
    accepted unverified with a warning and shows as pending."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs", "late")) as h:
            await two_servers(h)
            listing = data(await h.call("list-available-tools", server="git"))
            rid = listing["servers"][0]["tools"][1]["refId"]
            out = data(await h.call("build-toolset", name="dev", autoEquip=True,
                                    tools=[{"refId": rid}, {"namespacedName": "late.work"}]))
            assert out["toolset"]["tools"][0] == {"namespacedName": "git.diff", "refId": rid, "alias": None}
            assert out["warnings"] == ["late.work: not checked, server late is starting; "
                                       "it is pending until the server is up"]
            assert [t["state"] for t in out["active"]["tools"]] == ["exposed", "pending"]
            await h.up("late", "work")
            assert h.names() == [ENTER_CONFIG, "git_diff", "late_work"]


async def test_equip_unequip_and_configuration_mode_round_trip(tmp_path: Path) -> None:
    """equip -> normal mode; enter -> menu with the toolset still equipped; exit -> back;
    unequip -> the menu; unknown toolset -> the saved names."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs"), declared={"ro": ["git.log"]}) as h:
            await two_servers(h)
            data(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.status"}]))
            assert h.names() == [*CONFIG_TOOLS, EXIT_CONFIG]
            err = error(await h.call("equip-toolset", name="deev"))
            assert err == {"error": "unknown_toolset", "message": err["message"], "toolsets": ["ro", "dev"]}
            out = data(await h.call("equip-toolset", name="dev"))
            assert out["equipped"] == "dev"
            assert h.names() == [ENTER_CONFIG, "git_status"]
            out = data(await h.call("enter-configuration-mode"))
            assert out["configurationMode"] is True
            assert out["equipped"] == "dev"
            assert h.names() == [*CONFIG_TOOLS, EXIT_CONFIG]
            out = data(await h.call("exit-configuration-mode"))
            assert out["visibleTools"] == [ENTER_CONFIG, "git_status"]
            data(await h.call("enter-configuration-mode"))
            out = data(await h.call("unequip-toolset"))
            assert out["unequipped"] == "dev"
            assert out["equipped"] is None
            assert out["configurationMode"] is True
            err = error(await h.call("unequip-toolset"))
            assert err["error"] == "nothing_equipped"
            assert err["toolsets"] == ["ro", "dev"]
            out = data(await h.call("exit-configuration-mode"))
            assert out["visibleTools"] == [ENTER_CONFIG]
            assert "no toolset equipped" in text(await h.call("enter-configuration-mode"))


async def test_delete_unequips_and_config_toolsets_are_read_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs"), declared={"ro": ["git.log"]}) as h:
            await two_servers(h)
            data(await h.call("build-toolset", name="dev", autoEquip=True,
                              tools=[{"namespacedName": "git.status"}]))
            data(await h.call("enter-configuration-mode"))
            out = data(await h.call("delete-toolset", name="dev"))
            assert out["wasEquipped"] is True
            assert out["equipped"] is None
            assert out["toolsets"] == ["ro"]
            err = error(await h.call("delete-toolset", name="dev"))
            assert err["error"] == "unknown_toolset"
            assert err["toolsets"] == ["ro"]
            err = error(await h.call("delete-toolset", name="ro"))
            assert err["error"] == "read_only"
            data(await h.call("equip-toolset", name="ro"))
            assert h.names() == [ENTER_CONFIG, "git_log"]


async def test_list_saved_toolsets_shows_both_kinds_and_the_equipped_one(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs"), declared={"ro": ["git.log"]}) as h:
            await two_servers(h)
            data(await h.call("build-toolset", name="dev", description="daily", autoEquip=True,
                              tools=[{"namespacedName": "git.status"}, {"namespacedName": "docs.search"}]))
            result = await h.call("list-saved-toolsets")
            out = data(result)
            assert out["equipped"] == "dev"
            assert [(t["name"], t["readOnly"], t["equipped"], t["toolCount"]) for t in out["toolsets"]] == [
                ("ro", True, False, 1), ("dev", False, True, 2)]
            assert "- dev (2 tools, equipped): daily" in text(result)
            assert "git.status, docs.search" in text(result)


async def test_get_active_toolset_reports_states_names_and_tokens(tmp_path: Path) -> None:
    """Each tool's state and exposed name, counts, and a token estimate of the listed tools
    against listing every tool (bytes / 4, said in the output)."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs", "late")) as h:
            await two_servers(h)
            data(await h.call("build-toolset", name="dev", autoEquip=True, tools=[
                {"namespacedName": "git.status"}, {"namespacedName": "docs.search", "alias": "find"},
                {"namespacedName": "late.work"}]))
            result = await h.call("get-active-toolset")
            out = data(result)
            assert out["toolset"]["name"] == "dev"
            assert out["toolsetVisible"] is True
            assert [(t["namespacedName"], t["exposedAs"], t["state"]) for t in out["tools"]] == [
                ("git.status", "git_status", "exposed"), ("docs.search", "find", "exposed"),
                ("late.work", None, "pending")]
            assert out["counts"] == {"exposed": 2, "schema_changed": 0, "refused": 0, "pending": 1,
                                     "missing": 0}
            tokens = out["tokens"]
            assert 0 < tokens["listed"] < tokens["allTools"]
            assert tokens["saved"] == tokens["allTools"] - tokens["listed"]
            assert tokens["method"] == "bytes of the JSON tools list / 4"
            body = text(result)
            assert "2 of 3 tools exposed, 1 pending" in body
            assert "late.work: pending (server late is starting)" in body
            assert "bytes of the JSON tools list / 4" in body


async def test_annotations_append_to_descriptions_and_errors_name_the_tools(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs")) as h:
            await two_servers(h)
            err = error(await h.call("add-tool-annotation", toolRef={"namespacedName": "git.status"},
                                     notes=[{"name": "a", "note": "b"}]))
            assert err["error"] == "nothing_equipped"
            data(await h.call("build-toolset", name="dev", autoEquip=True,
                              tools=[{"namespacedName": "git.status"}]))
            data(await h.call("enter-configuration-mode"))
            out = data(await h.call("add-tool-annotation", toolRef={"namespacedName": "git.status"},
                                    notes=[{"name": "scope", "note": "Only the work tree."}]))
            assert out["added"] == ["scope"]
            assert out["replaced"] == []
            out = data(await h.call("add-tool-annotation", toolRef={"refId": out["tool"]["refId"]},
                                    notes=[{"name": "scope", "note": "Work tree only."},
                                           {"name": "x", "note": "y"}]))
            assert out["replaced"] == ["scope"]
            assert out["added"] == ["x"]
            assert out["notes"] == [{"name": "scope", "note": "Work tree only."}, {"name": "x", "note": "y"}]
            err = error(await h.call("add-tool-annotation", toolRef={"namespacedName": "git.diff"},
                                     notes=[{"name": "a", "note": "b"}]))
            assert err["error"] == "unknown_tool"
            assert err["tools"] == ["git.status"]
            err = error(await h.call("add-tool-annotation", toolRef={"namespacedName": "git.status"},
                                     notes=[]))
            assert err["error"] == "invalid_arguments"
            data(await h.call("exit-configuration-mode"))
            desc = h.core.snapshot.tools["git_status"].wire["description"]
            assert desc == "The status tool.\n\nNote: scope: Work tree only.\nNote: x: y"


async def test_all_mode_lists_management_tools_and_equip_narrows(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", mode="all", servers=("git", "docs")) as h:
            await two_servers(h)
            assert h.names()[: len(CONFIG_TOOLS)] == list(CONFIG_TOOLS)
            assert len(h.names()) == len(CONFIG_TOOLS) + 6
            data(await h.call("build-toolset", name="dev", autoEquip=True,
                              tools=[{"namespacedName": "git.status"}]))
            assert h.names() == [*CONFIG_TOOLS, "git_status"]
            err = error(await h.call("enter-configuration-mode"))
            assert err["error"] == "no_configuration_mode"
            data(await h.call("unequip-toolset"))
            assert len(h.names()) == len(CONFIG_TOOLS) + 6


async def test_get_server_status_reports_each_server(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git",)) as h:
            now = trio.current_time()
            h.statuses = [SimpleNamespace(name="git", transport="stdio", state="circuit_open",
                                          reason="crashed", since=now - 5, uptime=None, restarts=5,
                                          circuit="open", retry_at=now + 30, last_error="exit status 3",
                                          tool_count=0)]
            result = await h.call("get-server-status")
            (server,) = data(result)["servers"]
            assert server["name"] == "git"
            assert server["state"] == "circuit_open"
            assert server["restarts"] == 5
            assert 25 < server["retryInSeconds"] <= 30
            assert server["lastError"] == "exit status 3"
            assert "- git: circuit_open (0 tools, restarts 5, circuit open, next try in" in text(result)


def test_status_dict_converts_any_status_record() -> None:
    from dataclasses import dataclass

    @dataclass
    class Status:
        name: str
        since: float
        retry_at: float | None
        tool_count: int

    assert status_dict(Status("a", 90.0, None, 3), 100.0) == {
        "name": "a", "sinceSecondsAgo": 10.0, "retryInSeconds": None, "toolCount": 3}


async def test_unknown_arguments_and_wrong_types_are_tool_errors(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s") as h:
            err = error(await h.call("equip-toolset"))
            assert err["error"] == "invalid_arguments"
            assert "'name'" in err["message"]
            err = error(await h.call("equip-toolset", name=3))
            assert err["error"] == "invalid_arguments"
            err = error(await h.call("get-active-toolset", verbose=True))
            assert err["accepted"] == []
            result = await h.menu.call("no-such-tool", {})
            assert error(result)["error"] == "unknown_tool"


@pytest.mark.parametrize("namespacing", ["prefix", "auto"])
async def test_names_follow_settings_namespacing(tmp_path: Path, namespacing: str) -> None:
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs"), namespacing=namespacing) as h:
            await two_servers(h)
            out = data(await h.call("build-toolset", name="dev", autoEquip=True,
                                    tools=[{"namespacedName": "git.status"}]))
            expected = "git_status" if namespacing == "prefix" else "status"
            assert out["active"]["tools"][0]["exposedAs"] == expected
            assert h.names() == [ENTER_CONFIG, expected]


async def test_equip_answers_carry_only_the_notes_about_their_tools(tmp_path: Path) -> None:
    """Two servers that list the same resource: equip-toolset and get-active-toolset answer
    the model without a "resource ... is listed by git and docs" note (it named ~9 unrelated
    resources after every equip), which get-server-status's data still has in the snapshot."""
    from mcpvisor.actors.core.catalog import UpstreamLists
    from mcpvisor.actors.core.registration import UpstreamUp
    from tests.unit.test_registry_router import tool

    shared = {"uri": "file:///README.md", "name": "README"}
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "s", servers=("git", "docs")) as h:
            for server, name in (("git", "status"), ("docs", "search")):
                lists = UpstreamLists(tools=(tool(name),), resources=(shared,))
                await h.router.submit(UpstreamUp(server, lists))
            assert any("file:///README.md" in p for p in h.router.snapshot.problems)
            data(await h.call("build-toolset", name="dev", tools=[{"namespacedName": "git.status"}]))
            for answer in (await h.call("equip-toolset", name="dev"), await h.call("get-active-toolset")):
                assert "README" not in text(answer)
                assert data(answer).get("problems", data(answer).get("active", {}).get("problems")) == []
