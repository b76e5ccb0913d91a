"""The handshake-era clients connected to the shared front, and the broadcaster's queues.

Owns:

* `ClientState`: one live handshake-era connection (the SDK creates a `ServerSession`
  per request, so the front captures the connection from each request and from
  ``notifications/initialized``; docs/sdk.md §1.3), its log level, resource
  subscriptions and notification queue;
* `ClientRegistry`: every such connection, and one sender task per client that
  delivers its queue (list_changed, resources/updated, upstream log messages). A
  stuck client blocks only its own sender and costs bounded memory;
* the `Outbox` of each connection, of either era (`mcpvisor.actors.fronts.outbox`): what upstreams send
  a client mid-call (progress, log messages), delivered by its own sender, so no
  upstream's reader ever waits for a client;
* `level_ok`: whether a log message reaches a client at the level it set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import msgspec
import trio

from mcpvisor.actors.eras import LOG_LEVELS
from mcpvisor.actors.fronts.outbox import Outbox

CLIENT_QUEUE: Final = 256
"""Notifications queued for one client before duplicates are coalesced (a stuck client
costs bounded memory; docs/reliability.md R6)."""

CLIENT_SEND_TIMEOUT_S: Final = 5.0
"""A client that cannot take a notification in this long is skipped for that one (its
own sender waits; no other client does)."""


def level_ok(level: str | None, wanted: str | None) -> bool:
    """A message at ``level`` passes a client that asked for ``wanted`` (MCP logging levels)."""
    if wanted is None:
        return True
    try:
        return LOG_LEVELS.index(level or "info") >= LOG_LEVELS.index(wanted)
    except ValueError:
        return True


class Connection(Protocol):
    """A client connection as the registry uses it: the SDK's ``mcp.server.connection.Connection``,
    or the stdio front's own (`mcpvisor.actors.fronts.stdio_own.StdioClient`)."""

    @property
    def session_id(self) -> str | None: ...

    @property
    def exit_stack(self) -> Any: ...

    @property
    def client_capabilities(self) -> Any: ...

    async def notify(self, method: str, params: Any) -> None: ...

    async def send_raw_request(self, method: str, params: Any) -> dict[str, Any]: ...


class ClientState(msgspec.Struct, eq=False):
    """One handshake-era connection and what the proxy keeps for it."""

    connection: Connection
    log_level: str | None = None
    subscriptions: set[str] = msgspec.field(default_factory=set)
    last_active: float = 0.0
    queue: deque[tuple[str, dict[str, Any] | None]] = msgspec.field(default_factory=deque)
    """Notifications waiting for this client's sender (at most `CLIENT_QUEUE`)."""
    view: str | None = None
    """The fixed view its requests are served (`mcpvisor.actors.fronts.views`); None: the proxy's."""
    closed: bool = False
    wake: trio.Event = msgspec.field(default_factory=trio.Event)
    """Set when the queue gains an entry or the connection closes: wakes the sender."""

    def capable(self, method: str) -> bool:
        caps = self.connection.client_capabilities
        if caps is None:
            return False
        if method == "sampling/createMessage":
            return caps.sampling is not None
        if method == "elicitation/create":
            return caps.elicitation is not None
        if method == "roots/list":
            return caps.roots is not None
        return True


class ClientRegistry:
    """Live handshake-era connections, and the per-client notification queues.

    Each connection gets its own sender task while `run` is running (docs/reliability.md R6):
    a client that stops reading blocks only its own sender, and costs at most
    `CLIENT_QUEUE` queued notifications and one task until its connection closes.
    """

    def __init__(self) -> None:
        self._clients: dict[int, ClientState] = {}
        self._own: dict[str, ClientState] = {}
        """Clients tracked by a connection of the proxy's own (`track_own`), by session id."""
        self._aliases: dict[int, ClientState] = {}
        """SDK connections serving one of those clients too, by id: they share its state,
        so the client gets one copy of each broadcast whichever connection serves it."""
        self._outboxes: dict[int, Outbox] = {}
        self._nursery: trio.Nursery | None = None
        self.on_stall: Callable[[Connection], Awaitable[None]] | None = None
        """Disconnects a connection whose outbox stalled (set by the front that serves it)."""

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, connection: Connection) -> ClientState | None:
        key = id(connection)
        return self._clients.get(key) or self._aliases.get(key)

    def track_own(self, connection: Connection) -> ClientState:
        """Track a connection the proxy serves without the SDK (the stdio front's own); an
        SDK connection later serving the same client (the same session id) is its alias."""
        state = self.track(connection)
        label = connection.session_id
        if label is not None:
            self._own[label] = state
            connection.exit_stack.callback(self._own.pop, label, None)
        return state

    def track(self, connection: Connection) -> ClientState:
        key = id(connection)
        state = self._clients.get(key) or self._aliases.get(key)
        if state is None and connection.session_id is not None:
            state = self._own.get(connection.session_id)
            if state is not None:
                self._aliases[key] = state
                connection.exit_stack.callback(self._aliases.pop, key, None)
        if state is None:
            state = ClientState(connection)
            self._clients[id(connection)] = state
            connection.exit_stack.callback(self._forget, connection)
            if self._nursery is not None:
                self._nursery.start_soon(self._send_to, state)
        state.last_active = trio.current_time()
        return state

    def _forget(self, connection: Connection) -> None:
        state = self._clients.pop(id(connection), None)
        if state is not None:
            state.closed = True
            state.queue.clear()
            state.wake.set()  # the sender sees `closed` and ends

    def outbox(self, connection: Connection) -> Outbox | None:
        """The connection's outbox, made (with its sender) on first use; None while
        `run` is not running (then there is no sender, and callers write directly)."""
        box = self._outboxes.get(id(connection))
        if box is not None or self._nursery is None:
            return box

        async def stalled() -> None:
            if self.on_stall is not None:
                await self.on_stall(connection)

        box = Outbox(connection.session_id or f"connection-{id(connection):x}", stalled)
        self._outboxes[id(connection)] = box
        connection.exit_stack.callback(self._close_outbox, connection)
        self._nursery.start_soon(box.run)
        return box

    def _close_outbox(self, connection: Connection) -> None:
        box = self._outboxes.pop(id(connection), None)
        if box is not None:
            box.close()

    def clients(self) -> list[ClientState]:
        return list(self._clients.values())

    def latest(self, method: str) -> ClientState | None:
        """The most recently active client able to answer ``method``."""
        best = None
        for state in self._clients.values():
            if state.capable(method) and (best is None or state.last_active > best.last_active):
                best = state
        return best

    def enqueue(self, state: ClientState, method: str, params: dict[str, Any] | None) -> None:
        q = state.queue
        if len(q) >= CLIENT_QUEUE:
            if (method, params) in q:
                return  # coalesce: the client already has this one queued
            q.popleft()
        q.append((method, params))
        state.wake.set()

    def broadcast(self, method: str, params: dict[str, Any] | None = None,
                  only: Callable[[ClientState], bool] | None = None) -> None:
        for state in self._clients.values():
            if only is None or only(state):
                self.enqueue(state, method, params)

    async def run(self) -> None:
        """Deliver queued notifications until cancelled: one sender per client, so none
        waits on another (a client tracked before `run` starts gets its sender here)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                for state in self._clients.values():
                    nursery.start_soon(self._send_to, state)
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def _send_to(self, state: ClientState) -> None:
        """One client's sender: its queue in order, each notification bounded by
        `CLIENT_SEND_TIMEOUT_S`; ends when the connection closes."""
        while not state.closed:
            await state.wake.wait()
            state.wake = trio.Event()
            while state.queue and not state.closed:
                method, params = state.queue.popleft()
                with trio.move_on_after(CLIENT_SEND_TIMEOUT_S):
                    await state.connection.notify(method, params)

