"""A live connection to one upstream server: its transport, its SDK session, its calls.

* `actors.link.base` — `Link`: the pending table, timeouts, mid-call routing;
  `CallOrigin`, `LinkEvents`, `FastSink`;
* `actors.link.input_required` — driving ``input_required`` for a handshake-era client;
* `actors.link.session` — the SDK session: clientInfo, the handshake, the callbacks;
* `actors.link.stdio` — `StdioLink` and `open_stdio_link` (our own pipes; the fast
  path's public API);
* `actors.link.sdk` — `SdkLink` and `open_sdk_link` (HTTP, SSE, websocket).
"""

from __future__ import annotations

from actors.link.base import CallOrigin, FastSink, Link, LinkEvents
from actors.link.sdk import SdkLink, open_sdk_link
from actors.link.stdio import StdioLink, open_stdio_link

__all__ = ["CallOrigin", "FastSink", "Link", "LinkEvents", "SdkLink", "StdioLink", "open_sdk_link",
           "open_stdio_link"]
