"""A list page a stdio link reads in our own bytes is what the SDK's session handed on.

Clients see an upstream's tools, resources, templates and prompts as the proxy lists
them; a stdio link used to list through an SDK session (its models, dumped back by alias
without nulls) and now reads the page itself (`mcpvisor.actors.link.listing.read_page`).
The items, the next cursor and the caching hint must be the same for the same page,
unknown keys and nulls included; the shapes it fits items to must be the SDK's models.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from pydantic import BaseModel

from mcpvisor.actors.errors import UpstreamError
from mcpvisor.actors.link import listing
from mcpvisor.actors.link.sdk import hint_of

ICON = {"src": "https://x/i.png", "mimeType": "image/png", "sizes": ["48x48"], "theme": None, "vendor": 1}
PAGES: dict[str, tuple[type[BaseModel], str, dict[str, Any]]] = {
    "tools": (types.ListToolsResult, "tools", {"tools": [
        {"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"default": None}}}},
        {"name": "b", "title": None, "description": "d", "inputSchema": {"type": "object"}, "extra": {"k": 1},
         "annotations": {"readOnlyHint": True, "destructiveHint": None, "vendorHint": 2},
         "execution": {"taskSupport": "optional", "more": 1}, "outputSchema": {"type": "object"},
         "icons": [ICON], "_meta": {"k": None}},
    ], "nextCursor": "c2", "weird": 3}),
    "resources": (types.ListResourcesResult, "resources", {"resources": [
        {"name": "r", "uri": "file:///r", "mimeType": None, "size": 3, "x": 1,
         "annotations": {"audience": ["user"], "priority": 0.5, "y": 2}, "icons": [ICON]},
    ], "nextCursor": None}),
    "templates": (types.ListResourceTemplatesResult, "resource_templates", {"resourceTemplates": [
        {"name": "t", "uriTemplate": "file:///{p}", "description": None, "z": 1, "_meta": {"a": 1}},
    ]}),
    "prompts": (types.ListPromptsResult, "prompts", {"prompts": [
        {"name": "p", "arguments": [{"name": "q", "required": True, "extra": 1, "title": None}], "k": 1},
        {"name": "p2", "arguments": None},
    ], "nextCursor": ""}),
}


def _sdk(kind: str, page: dict[str, Any]) -> listing.ListPage:
    """The page as the SDK session's listing handed it on (its model, dumped back)."""
    model, attr, _ = PAGES[kind]
    result: Any = model.model_validate(page, by_name=False)
    items = tuple(x.model_dump(by_alias=True, mode="json", exclude_none=True) for x in getattr(result, attr))
    return listing.ListPage(items, result.next_cursor or None, hint_of(result))


@pytest.mark.parametrize("kind", list(PAGES))
def test_a_page_read_in_our_bytes_is_the_one_the_sdk_handed_on(kind: str) -> None:
    page = PAGES[kind][2]
    assert listing.read_page("s", kind, page, modern=False) == _sdk(kind, page)


@pytest.mark.parametrize("kind", list(PAGES))
def test_a_2026_page_keeps_its_caching_hint(kind: str) -> None:
    page = {**PAGES[kind][2], "ttlMs": 5000, "cacheScope": "public", "resultType": "complete"}
    ours = listing.read_page("s", kind, page, modern=True)
    assert ours == _sdk(kind, page)
    assert ours.hint is not None
    assert (ours.hint.ttl_ms, ours.hint.scope) == (5000, "public")
    # The handshake era has no caching directives: the SDK dropped them there, and so do we.
    assert listing.read_page("s", kind, page, modern=False).hint is None


def test_an_item_without_its_required_fields_fails_the_list_naming_the_server() -> None:
    page = {"tools": [{"name": "a", "inputSchema": {}}, {"name": "b"}]}
    with pytest.raises(UpstreamError, match="malformed tools list: item 1 lacks name or inputSchema"):
        listing.read_page("s", "tools", page, modern=False)
    with pytest.raises(UpstreamError, match="no resources array"):
        listing.read_page("s", "resources", {}, modern=False)


def _aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(("shape", "model"), [
    (listing.TOOL, types.Tool), (listing.TOOL["annotations"], types.ToolAnnotations),
    (listing.TOOL["execution"], types.ToolExecution), (listing.ICON, types.Icon),
    (listing.RESOURCE, types.Resource), (listing.ANNOTATIONS, types.Annotations),
    (listing.TEMPLATE, types.ResourceTemplate), (listing.PROMPT, types.Prompt),
    (listing.PROMPT["arguments"][0], types.PromptArgument),
])
def test_each_shape_has_the_keys_of_the_sdks_model(shape: Any, model: type[BaseModel]) -> None:
    assert set(shape) == _aliases(model)
