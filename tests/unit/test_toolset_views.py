"""`ToolsetViews`: which view a request gets, and which views' lists changed."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken

from mcpvisor.actors.core.catalog import Snapshot
from mcpvisor.actors.core.model import Toolset
from mcpvisor.actors.fronts.views import ToolsetViews, ViewRefused, ws_toolset

CI_TOKEN = "c" * 40


class Catalog:
    """The proxy's snapshot and what each toolset shows, both changed by the test."""

    def __init__(self) -> None:
        self.base = Snapshot()
        self.toolsets: dict[str, Toolset] = {n: Toolset(n, (), None, "", "") for n in ("dev", "ops")}
        self.shows: dict[str, list[str]] = {"dev": ["echo"], "ops": ["deploy"]}

    def build(self, toolset: Toolset) -> Snapshot:
        tools: tuple[Any, ...] = tuple({"name": n} for n in self.shows[toolset.name])
        return Snapshot(tools_list=tools)

    def views(self) -> ToolsetViews:
        return ToolsetViews(lambda: self.toolsets, self.build, lambda: self.base,
                            tokens=lambda: {"ci": CI_TOKEN}, bindings=lambda: {"ci": "dev"})


def test_a_view_is_told_only_when_its_own_list_changes() -> None:
    cat = Catalog()
    views = cat.views()
    assert [t["name"] for t in views.snapshot("dev").tools_list] == ["echo"]  # type: ignore[union-attr]
    cat.base = Snapshot(version=2)  # the proxy's list changed (an equip), dev's did not
    assert views.changed() == []
    cat.shows["dev"] = ["echo", "fresh"]
    cat.base = Snapshot(version=3)
    assert views.changed() == ["dev"]  # ops was never used: nobody to tell
    assert views.changed() == []  # told once
    assert [t["name"] for t in views.snapshot("dev").tools_list] == ["echo", "fresh"]  # type: ignore[union-attr]


def test_choose_by_url_then_token() -> None:
    views = Catalog().views()
    ci = AccessToken(token=CI_TOKEN, client_id="ci", scopes=[])
    lookalike = AccessToken(token="an-oauth-jwt", client_id="ci", scopes=[])  # same id, not the token
    assert views.choose(None, None) is None
    assert views.choose("ops", None) == "ops"
    assert views.choose(None, ci) == "dev"
    assert views.choose("dev", ci) == "dev"
    assert views.choose(None, lookalike) is None
    with pytest.raises(ViewRefused) as unknown:
        views.choose("nope", None)
    assert unknown.value.status == 404
    assert unknown.value.toolsets == ("dev", "ops")
    with pytest.raises(ViewRefused) as other:
        views.choose("ops", ci)
    assert other.value.status == 403
    assert CI_TOKEN not in other.value.message


def test_the_websocket_path_names_a_toolset() -> None:
    assert ws_toolset("/toolset/dev") == "dev"
    assert ws_toolset("/toolset/dev?x=1") == "dev"
    assert ws_toolset("/") is None
