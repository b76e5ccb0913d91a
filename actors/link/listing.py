"""A list page a link read in our own bytes, fitted to what the SDK's session hands on.

The SDK's session reads a ``tools/list`` (or resources, templates, prompts) result into
its models and the proxy dumps them back (by alias, without nulls): a key the model does
not know is dropped, a null is dropped, an item without its required fields fails the
list. A stdio link reads the page without the SDK, so `read_page` does the same by the
shapes below (a unit test holds them equal to the SDK's models), and clients see the
same catalog whichever way the page came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import CacheHint
from mcpvisor.actors.errors import UpstreamError

Shape = Mapping[str, Any]
"""A model's wire keys; each maps to None (any JSON, kept as sent), a nested `Shape`, or
a one-item list holding the `Shape` of a list's items."""

ICON: Final[Shape] = {"src": None, "mimeType": None, "sizes": None, "theme": None}
ANNOTATIONS: Final[Shape] = {"audience": None, "priority": None, "lastModified": None}
TOOL: Final[Shape] = {
    "name": None, "title": None, "description": None, "inputSchema": None,
    "execution": {"taskSupport": None}, "outputSchema": None, "icons": [ICON],
    "annotations": {"title": None, "readOnlyHint": None, "destructiveHint": None, "idempotentHint": None,
                    "openWorldHint": None},
    "_meta": None,
}
RESOURCE: Final[Shape] = {"name": None, "title": None, "uri": None, "description": None, "mimeType": None,
                          "size": None, "icons": [ICON], "annotations": ANNOTATIONS, "_meta": None}
TEMPLATE: Final[Shape] = {"name": None, "title": None, "uriTemplate": None, "description": None,
                          "mimeType": None, "icons": [ICON], "annotations": ANNOTATIONS, "_meta": None}
PROMPT: Final[Shape] = {
    "name": None, "title": None, "description": None,
    "arguments": [{"name": None, "title": None, "description": None, "required": None}],
    "icons": [ICON], "_meta": None,
}

LIST_METHODS: Final = {"tools": "tools/list", "resources": "resources/list",
                       "templates": "resources/templates/list", "prompts": "prompts/list"}
ITEMS_KEY: Final = {"tools": "tools", "resources": "resources", "templates": "resourceTemplates",
                    "prompts": "prompts"}
ITEM_SHAPE: Final[Mapping[str, Shape]] = {"tools": TOOL, "resources": RESOURCE, "templates": TEMPLATE,
                                          "prompts": PROMPT}
REQUIRED: Final[Mapping[str, Mapping[str, type]]] = {
    "tools": {"name": str, "inputSchema": dict}, "resources": {"name": str, "uri": str},
    "templates": {"name": str, "uriTemplate": str}, "prompts": {"name": str},
}
"""The fields an item cannot lack (the SDK's models require them), with their JSON type."""


class ListPage(msgspec.Struct, frozen=True):
    """One page of a list: its items, the cursor of the next page, its caching directives."""

    items: tuple[dict[str, Any], ...]
    next_cursor: str | None
    hint: CacheHint | None
    """What the server said of caching (``ttlMs``, ``cacheScope``): None if neither, and
    always None in the handshake era, where those keys are outside the protocol."""


def read_page(server: str, kind: str, result: Mapping[str, Any], *, modern: bool) -> ListPage:
    """A ``kind`` list page as the SDK's session reads it (see the module's note).

    Raises:
        UpstreamError: the page or one of its items lacks what the protocol requires.
    """
    items = result.get(ITEMS_KEY[kind])
    cursor = result.get("nextCursor")
    if not isinstance(items, list) or not isinstance(cursor, str | None):
        raise UpstreamError(wire.INTERNAL_ERROR, f"server {server} sent a malformed {kind} list "
                                                 f"(no {ITEMS_KEY[kind]} array)")
    shape = ITEM_SHAPE[kind]
    required = REQUIRED[kind]
    fitted: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or any(not isinstance(item.get(k), t) for k, t in required.items()):
            raise UpstreamError(wire.INTERNAL_ERROR, f"server {server} sent a malformed {kind} list: "
                                                     f"item {n} lacks {' or '.join(required)}")
        fitted.append(_fit(item, shape))
    hint = None
    if modern and ("ttlMs" in result or "cacheScope" in result):
        ttl = result.get("ttlMs", 0)
        ttl = max(int(ttl), 0) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else 0
        hint = CacheHint(ttl, str(result.get("cacheScope", "private")))
    return ListPage(tuple(fitted), cursor or None, hint)


def _fit(value: dict[str, Any], shape: Shape) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in shape.items():
        v = value.get(key)
        if v is None:
            continue
        if isinstance(sub, Mapping) and isinstance(v, dict):
            v = _fit(v, sub)
        elif isinstance(sub, list) and isinstance(v, list):
            v = [_fit(x, sub[0]) if isinstance(x, dict) else x for x in v]
        out[key] = v
    return out
