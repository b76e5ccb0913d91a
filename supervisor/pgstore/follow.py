"""Replicas agree: what another replica changes in the store is applied here too.

Every change of the shared state (an equip, a toolset built or deleted, an annotation)
and of a server's tokens is committed with a ``NOTIFY`` on the ``mcpvisor`` channel
(`mcpvisor.pgstore.data`). `follow` is the task that hears them: a listener thread
(psycopg's blocking API, its own connection, reconnecting with backoff) hands each
notification into trio (`trio.from_thread`) to an `Inbox` that coalesces them, and the
task then

* re-reads the state and applies it as if it had been changed here (the menu's
  `adopt`, the same path a local equip takes: the router rebuilds once and clients get
  ``notifications/tools/list_changed`` where a list changed);
* bumps the server's token stamp, which wakes a server waiting for a login: it starts
  again with the tokens the other process stored.

After the listener reconnects (the store restarted, the network dropped) it may have
missed notifications, so everything is re-read once.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any, Final

import psycopg
import trio

from mcpvisor.pgstore import StoreError
from mcpvisor.pgstore.data import CHANNEL
from mcpvisor.pgstore.link import connect

if TYPE_CHECKING:
    from mcpvisor.pgstore.store import PgStore

logger = logging.getLogger(__name__)

POLL_S: Final = 0.5
"""How long the listener thread waits for a notification before it checks whether to stop."""
BACKOFF_FIRST_S: Final = 0.25
BACKOFF_MAX_S: Final = 5.0
"""Reconnection backoff of the listener while the store is unreachable."""
STOP_BOUND_S: Final = 2.0
"""Bound on waiting for the listener thread to end (it checks every `POLL_S`)."""


class Inbox:
    """What the listener heard and the task has not applied yet, coalesced (trio side)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.state = False
        self.tokens: set[str | None] = set()
        self.wake = trio.Event()
        self.connected = trio.Event()
        """Set once the listener is listening (the first time)."""

    def offer(self, payload: str | None) -> None:
        """One notification's payload; None: the listener (re)connected, re-read everything."""
        if payload is None:
            self.state = True
            self.tokens.add(None)
            self.connected.set()
        else:
            try:
                note = json.loads(payload)
            except ValueError:
                return
            if not isinstance(note, dict):
                return
            kind, server = note.get("kind"), note.get("server")
            if kind == "token":  # ours too: a login here wakes a server of ours waiting for it
                self.tokens.add(server if isinstance(server, str) else None)
            elif kind == "state" and note.get("origin") != self.origin:
                self.state = True
            else:
                return
        self.wake.set()


def _listen(url: str, token: trio.lowlevel.TrioToken, inbox: Inbox, stop: threading.Event) -> None:
    """The listener thread: LISTEN, hand each payload to ``inbox``, reconnect after a failure."""
    backoff = BACKOFF_FIRST_S
    first = True
    while not stop.is_set():
        try:
            with connect(url, "listen") as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                backoff = BACKOFF_FIRST_S
                if not first:
                    logger.warning("listening to the store again; re-reading the shared state")
                first = False
                trio.from_thread.run_sync(inbox.offer, None, trio_token=token)
                while not stop.is_set():
                    for note in conn.notifies(timeout=POLL_S):
                        trio.from_thread.run_sync(inbox.offer, note.payload, trio_token=token)
                        if stop.is_set():
                            break
        except (StoreError, psycopg.Error) as exc:
            if stop.is_set():
                return
            logger.warning("not hearing other replicas' changes (%s); trying again in %.1fs", exc, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        except (trio.RunFinishedError, trio.Cancelled):
            return


async def follow(store: PgStore, menu: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                 ) -> None:
    """Apply what other replicas change, until cancelled (see the module doc).

    ``menu`` is the supervisor's `mcpvisor.menu.Menu` (its ``adopt``). Returns from
    ``task_status.started`` once listening, or after a bound if the store cannot be
    reached yet (the listener keeps trying).
    """
    inbox = Inbox(store.origin)
    stop = threading.Event()
    thread = threading.Thread(target=_listen, name="mcpvisor store listener", daemon=True,
                              args=(store.url, trio.lowlevel.current_trio_token(), inbox, stop))
    thread.start()
    try:
        with trio.move_on_after(STOP_BOUND_S):
            await inbox.connected.wait()
        task_status.started()
        while True:
            await inbox.wake.wait()
            inbox.wake = trio.Event()
            tokens, inbox.tokens = inbox.tokens, set()
            for server in tokens:
                store.tokens_changed(server)
            if inbox.state:
                inbox.state = False
                try:
                    await menu.adopt()
                except Exception as exc:  # applied with the next change, or after the store returns
                    logger.warning("could not apply another replica's change: %s", exc)
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(thread.join, STOP_BOUND_S)
