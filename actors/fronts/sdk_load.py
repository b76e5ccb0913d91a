"""The MCP SDK, loaded off the event loop the first time a stdio client's message needs it.

A stdio ``serve`` answers the handshake, pings, the lists and tool calls without the SDK
(`mcpvisor.actors.fronts.stdio_own`, the fast path); the first message that needs it (a
resource read, a prompt, a completion, ``logging/setLevel``) loads it, about 0.4 s of
imports on an idle 2-core machine. Imported on the event loop, those froze the whole proxy
for as long: answers to calls in flight, other servers' notifications, health pings.
`load_sdk` imports it in a worker thread; the loop keeps serving meanwhile (it gets the
interpreter back at least every switch interval, 5 ms) and the message that needs the SDK
waits for it. Two callers at once import in two threads, which Python's per-module import
locks serialize; an import that fails in a thread is tried again on the loop, where it
raises as it would have.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Final

import trio

logger = logging.getLogger(__name__)

SDK_MODULES: Final = ("mcp_types", "mcp.shared.message", "mcpvisor.actors.fronts.sdk")
"""What serving a client through the SDK imports (measured: everything else it loads then
comes with these)."""


def sdk_loaded() -> bool:
    return all(name in sys.modules for name in SDK_MODULES)


def import_sdk(*more: str) -> None:
    """Import the SDK (and ``more`` modules) here and now (what `load_sdk` runs in its worker thread)."""
    for name in (*SDK_MODULES, *more):
        importlib.import_module(name)


async def load_sdk(*more: str) -> None:
    """Return once the SDK (and ``more`` modules: what the HTTP front's app is made of) is
    imported, importing what is missing in a worker thread."""
    missing = [name for name in more if name not in sys.modules]
    if sdk_loaded() and not missing:
        return
    try:
        await trio.to_thread.run_sync(import_sdk, *missing, abandon_on_cancel=True)
    except Exception:
        logger.debug("loading the MCP SDK in a worker thread failed; loading it here", exc_info=True)
        import_sdk(*missing)
