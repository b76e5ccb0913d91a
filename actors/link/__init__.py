"""A live connection to one upstream server: its transport, its SDK session, its calls.

* `mcpvisor.actors.link.base` — `Link`: the pending table, timeouts, mid-call routing;
  `CallOrigin`, `LinkEvents`, `FastSink`;
* `mcpvisor.actors.link.input_required` — driving ``input_required`` for a handshake-era client;
* `mcpvisor.actors.link.session` — the SDK session: clientInfo, the handshake, the callbacks;
* `mcpvisor.actors.link.stdio` — `StdioLink` and `open_stdio_link` (our own pipes; the fast
  path's public API);
* `mcpvisor.actors.link.sdk` — `SdkLink` and `open_sdk_link` (HTTP, SSE, websocket).
"""

from __future__ import annotations

from mcpvisor.actors.link.base import FastSink, Link, LinkEvents
from mcpvisor.actors.link.ports import CallOrigin
from mcpvisor.actors.link.sdk import SdkLink, open_sdk_link
from mcpvisor.actors.link.stdio import StdioLink, open_stdio_link

__all__ = ["CallOrigin", "FastSink", "Link", "LinkEvents", "SdkLink", "StdioLink", "open_sdk_link",
           "open_stdio_link"]
