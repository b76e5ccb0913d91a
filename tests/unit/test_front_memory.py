"""The shared front (actors/front.py) with several clients on memory streams, in virtual time.

Several stdio front connections share one production `Front` (tests/fakes/memory_front.py),
as several editor windows share one proxy: list changes reach each client once, log
messages respect each client's level, and a client that stops reading costs bounded
memory and does not hold the others up. A regression shows as a missing or duplicated
notification, a log line a client did not ask for, or a healthy client's notification
delayed behind a stuck one.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import trio
import trio.testing

from mcpvisor.actors.fronts.clients import CLIENT_QUEUE, CLIENT_SEND_TIMEOUT_S
from mcpvisor.actors.router import Changes
from tests.fakes.memory_front import RawClient, open_memory_proxy

Clock = trio.testing.MockClock

BOUND_S = 4 * 3600.0
"""Virtual seconds any test here may take."""


class StuckConnection:
    """An SDK `Connection` whose client stopped reading: every notify waits forever.
    (A real connection blocks like this once the SDK's 256-message buffer towards a
    full pipe is used up.)"""

    def __init__(self) -> None:
        self.exit_stack = AsyncExitStack()
        self.client_capabilities = None
        self.session_id: str | None = None
        self.attempts = 0

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        self.attempts += 1
        await trio.sleep_forever()


async def next_notification(client: RawClient) -> dict[str, Any]:
    while True:
        msg = await client.receive()
        if "method" in msg and "id" not in msg:
            return msg


async def nothing_more_than(client: RawClient, request_id: int) -> None:
    """Assert the client has no unread message: the next one is the answer to a ping sent now."""
    await client.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    msg = await client.receive()
    assert msg.get("id") == request_id, f"unexpected extra message: {msg}"
    assert "result" in msg, msg


async def test_a_list_change_reaches_every_client_exactly_once(autojump_clock: Clock) -> None:
    """Three connected clients each get one ``notifications/tools/list_changed`` per
    announced tools change, and nothing for lists that did not change. A regression
    shows as a client left out, a duplicate, or a resources/prompts notification."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            clients = [p.client, await p.connect(), await p.connect()]
            for c in clients:
                await c.handshake()
            await trio.testing.wait_all_tasks_blocked()
            p.front.announce(p.backend.router.snapshot, Changes(tools=True))
            for c in clients:
                assert await next_notification(c) == {"jsonrpc": "2.0",
                                                      "method": "notifications/tools/list_changed"}
            await trio.testing.wait_all_tasks_blocked()
            for c in clients:
                await nothing_more_than(c, 99)


async def test_log_messages_respect_each_clients_level(autojump_clock: Clock) -> None:
    """``logging/setLevel`` is per client: with one client at "error", one at "debug" and
    one that never set a level, an upstream's warning reaches the last two only and its
    error reaches all three; the logger names the upstream. A regression shows as a
    warning at the "error" client or a message missing elsewhere."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            quiet, chatty, unset = p.client, await p.connect(), await p.connect()
            for c in (quiet, chatty, unset):
                await c.handshake()
            for c, level in ((quiet, "error"), (chatty, "debug")):
                await c.send({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel",
                              "params": {"level": level}})
                assert "result" in await c.receive_id(5)
            assert p.front.log_level == "debug"
            p.front.log_message("s", {"level": "warning", "logger": "db", "data": "disk almost full"})
            p.front.log_message("s", {"level": "error", "data": "disk full"})
            for c in (chatty, unset):
                warning = await next_notification(c)
                assert warning["method"] == "notifications/message"
                assert warning["params"] == {"level": "warning", "logger": "s.db", "data": "disk almost full"}
            for c in (quiet, chatty, unset):
                error = await next_notification(c)
                assert error["params"] == {"level": "error", "logger": "s", "data": "disk full"}
            await trio.testing.wait_all_tasks_blocked()
            for c in (quiet, chatty, unset):
                await nothing_more_than(c, 99)


async def test_a_stuck_client_costs_a_bounded_queue_and_others_still_hear(autojump_clock: Clock) -> None:
    """docs/reliability.md R6: a client that stops reading, ahead of a healthy one in delivery
    order, is skipped after `CLIENT_SEND_TIMEOUT_S` per notification: the healthy client
    hears a list change within that bound, and a burst of changes leaves at most
    `CLIENT_QUEUE` notifications queued for the stuck one. A regression shows as the
    healthy client never hearing, or a queue that grows with the burst."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            stuck = StuckConnection()
            state = p.front.clients.track(stuck)  # type: ignore[arg-type]
            await p.client.handshake()
            announced = trio.current_time()
            p.front.announce(p.backend.router.snapshot, Changes(tools=True))
            msg = await next_notification(p.client)
            assert msg["method"] == "notifications/tools/list_changed"
            assert trio.current_time() - announced <= CLIENT_SEND_TIMEOUT_S
            assert stuck.attempts == 1
            for _ in range(4 * CLIENT_QUEUE):
                p.front.announce(p.backend.router.snapshot, Changes(tools=True, resources=True))
            assert len(state.queue) <= CLIENT_QUEUE


async def test_a_healthy_client_is_not_delayed_by_a_stuck_clients_backlog(autojump_clock: Clock) -> None:
    """docs/reliability.md R6 "other subscribers are unaffected": after a burst of list changes,
    a healthy client behind a stuck one hears the latest change within one
    `CLIENT_SEND_TIMEOUT_S`, however many are queued for the stuck one. A regression
    shows as the healthy client's notification arriving only after the stuck client's
    backlog has timed out one by one."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            stuck = StuckConnection()
            p.front.clients.track(stuck)  # type: ignore[arg-type]
            await p.client.handshake()
            announced = trio.current_time()
            for _ in range(10):
                p.front.announce(p.backend.router.snapshot, Changes(tools=True))
            await next_notification(p.client)
            assert trio.current_time() - announced <= CLIENT_SEND_TIMEOUT_S
