"""A request for a name nothing routes yet: whose it is, and whether to wait for it.

Sans-IO (no trio). Every caller that meets an unrouted tool or prompt name (the SDK
front, the embedding API, a tool-call plan) asks the same two questions:

* `owner_of`: which configured server's namespace the name falls in (``time_x`` is
  ``time``'s under prefix namespacing), so an error can name that server and a "did
  you mean" can stay within it;
* `plan_unrouted`: given that server's state, wait for it (it is starting: its tools
  are on their way), refuse naming it (down, disabled, circuit open, misconfigured,
  needs login: the error says its state, why, and the next try), load it (a lazy
  server not loaded yet), or answer "unknown" (it is up and has no such name).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from mcpvisor.actors.core.catalog import flatten

__all__ = ["WAIT_STATES", "Unrouted", "owner_of", "plan_unrouted"]

WAIT_STATES: Final = frozenset({"starting", "backing_off", "half_open"})
"""States whose server is on its way up: a request for one of its names waits for it
(bounded by the server's ``restartWait``), as a call to a restarting server does."""

LAZY_STATES: Final = frozenset({"idle", "not loaded"})
"""A lazy server not loaded yet: the lazy loader starts it on first use."""

Unrouted = Literal["wait", "down", "unknown", "lazy"]


def owner_of(name: str, servers: Iterable[str], namespacing: str) -> str | None:
    """The server whose namespace ``name`` (an exposed tool or prompt name) is in.

    Under ``prefix`` and ``auto`` namespacing a server's names start with its flattened
    name and ``_``; the longest such server wins (``git_hub_x`` is ``git_hub``'s, not
    ``git``'s). Under ``none`` names carry no server, and None is returned.
    """
    if namespacing == "none":
        return None
    best: str | None = None
    for server in servers:
        prefix = f"{flatten(server)}_"
        if name.startswith(prefix) and len(name) > len(prefix) and (best is None or len(server) > len(best)):
            best = server
    return best


def plan_unrouted(state: str) -> Unrouted:
    """What a request for an unrouted name of a server in ``state`` should do."""
    if state in WAIT_STATES:
        return "wait"
    if state == "ready":
        return "unknown"
    if state in LAZY_STATES:
        return "lazy"
    return "down"
