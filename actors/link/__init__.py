"""A live connection to one upstream server: its transport, its session, its calls.

* `mcpvisor.actors.link.base` — `Link`: the pending table, timeouts, mid-call routing;
  `CallOrigin`, `LinkEvents`, `FastSink`;
* `mcpvisor.actors.link.input_required` — driving ``input_required`` for a handshake-era client;
* `mcpvisor.actors.link.session` — who we are to an upstream, and the handshake in our own bytes;
* `mcpvisor.actors.link.listing` — a list page read in our own bytes;
* `mcpvisor.actors.link.stdio` — `StdioLink` and `open_stdio_link` (our own pipes; the fast
  path's public API);
* `mcpvisor.actors.link.sdk` — `SdkLink` and `open_sdk_link` (HTTP, SSE, websocket), with
  `mcpvisor.actors.link.sdk_session` (the SDK's ``ClientSession``).

`SdkLink` and `open_sdk_link` load the SDK (~0.4 s, ~60 MB), so they are imported from
here only when first asked for: a proxy whose upstreams all run over stdio never loads it
for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpvisor.actors.link.base import FastSink, Link, LinkEvents
from mcpvisor.actors.link.ports import CallOrigin
from mcpvisor.actors.link.stdio import StdioLink, open_stdio_link

if TYPE_CHECKING:
    from mcpvisor.actors.link.sdk import SdkLink, open_sdk_link

__all__ = ["CallOrigin", "FastSink", "Link", "LinkEvents", "SdkLink", "StdioLink", "open_sdk_link",
           "open_stdio_link"]


def __getattr__(name: str) -> Any:
    if name in ("SdkLink", "open_sdk_link"):
        from mcpvisor.actors.link import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
