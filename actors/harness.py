"""What a harness run is made of, as the call path sees it: client sessions and run labels.

Owns:

* `ClientSession`: one client's session (an API `sup.session(label)`, or a front
  connection), the key session-scoped servers (``"scope": "session"``) are looked up
  by, and the label the journal records;
* `run_label`: the episode/run label of a call: the ``_meta`` key `RUN_META_KEY`, else
  the HTTP header `RUN_HEADER`, else the session's own label;
* `sdk_session`: the `ClientSession` of a request served through the SDK (one per
  handshake-era connection, kept on the connection and ended with it; a transport that
  made the connection's session itself, the stdio front, hands it over by session id so
  its own path and the SDK's are one session).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

RUN_META_KEY: Final = "mcpvisor/run"
"""``params._meta`` key a client sets to label the run (episode) a call belongs to."""

RUN_HEADER: Final = "mcpvisor-run"
"""HTTP request header with the same meaning (for clients that cannot set ``_meta``)."""

_STATE_KEY: Final = "mcpvisor.session"


class CancelledByClient(Exception):
    """What a call the client cancelled (``notifications/cancelled``) is recorded with."""


class ClientSession:
    """One client's session: a key for session-scoped instances and a label for the journal.

    ``on_end`` callbacks run (in order) when the session ends; the supervisor registers
    the stop of the session's instances there.
    """

    __slots__ = ("_ended", "_on_end", "label", "run")

    def __init__(self, label: str | None = None, *, run: str | None = None) -> None:
        self.label = label if label is not None else f"session-{uuid.uuid4().hex[:12]}"
        self.run = run
        self._on_end: list[Callable[[], Awaitable[None]]] = []
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def on_end(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._on_end.append(fn)

    async def end(self) -> None:
        """Run the end callbacks once (later calls do nothing)."""
        if self._ended:
            return
        self._ended = True
        callbacks, self._on_end = self._on_end, []
        for fn in callbacks:
            await fn()

    def __repr__(self) -> str:
        return f"ClientSession({self.label!r})"


def meta_run(params: Mapping[str, Any] | None) -> str | None:
    """The run label in a request's ``params._meta`` (`RUN_META_KEY`), if any."""
    meta = params.get("_meta") if params else None
    value = meta.get(RUN_META_KEY) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) and value else None


def run_label(ctx: Any, session: ClientSession | None) -> str | None:
    """The run a call served through the SDK belongs to (see the module docstring)."""
    label = meta_run(getattr(ctx, "params", None))
    if label is not None:
        return label
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None:
        value = headers.get(RUN_HEADER)
        if value:
            return str(value)
    return session.run if session is not None else None


def sdk_session(connection: Any, made: Mapping[str, ClientSession] | None = None) -> ClientSession | None:
    """The `ClientSession` of a handshake-era SDK ``connection``, taken on its first request
    and ended when the connection closes; None for no connection (a 2026-07-28 request has
    none: it uses the shared instance of a session-scoped server).

    ``made`` holds the sessions transports made for their own connections, by the
    session id they gave the SDK's loop (`mcpvisor.actors.fronts.sdk.SdkFront.serve_connection`): such a
    connection's session is that object, so calls the transport serves itself (the stdio
    fast path) and calls the SDK serves reach the same session-scoped instances. Any
    other connection gets a new session (labelled with its session id when it has one:
    an HTTP session's ``Mcp-Session-Id``).
    """
    state = getattr(connection, "state", None)
    if connection is None or not isinstance(state, dict):
        return None
    session = state.get(_STATE_KEY)
    if session is None:
        session_id = connection.session_id
        session = made.get(session_id) if made and session_id else None
        if session is None:
            session = ClientSession(session_id or None)
        state[_STATE_KEY] = session
        connection.exit_stack.push_async_callback(session.end)
    return session if isinstance(session, ClientSession) else None
