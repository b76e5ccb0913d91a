"""The HTTP front's event store: bounded in events and bytes across sessions, each session
replaying only its own stream's events after the id a client names."""

from __future__ import annotations

from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from mcpvisor.actors.fronts.replay import ReplayBudget, SessionEvents


def progress(step: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress",
                               params={"progressToken": "p", "progress": step})


def answer(rid: int, text: str) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=rid, result={"content": [{"type": "text", "text": text}]})


async def replay(store: SessionEvents, last: str) -> tuple[str | None, list[EventMessage]]:
    got: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        got.append(event)

    stream = await store.replay_events_after(last, send)
    return stream, got


async def test_replay_sends_the_streams_later_events_as_they_were_sent() -> None:
    store = ReplayBudget().session()
    priming = await store.store_event("1", None)
    first = await store.store_event("1", progress(1))
    await store.store_event("2", progress(9))  # another request's stream
    second = await store.store_event("1", progress(2))
    done = await store.store_event("1", answer(1, "done"))
    stream, got = await replay(store, first)
    assert stream == "1"
    assert [e.event_id for e in got] == [second, done]
    assert got[-1].message.model_dump(by_alias=True, exclude_unset=True) == answer(1, "done").model_dump(
        by_alias=True, exclude_unset=True)
    stream, got = await replay(store, priming)  # the priming event itself is never replayed
    assert [e.event_id for e in got] == [first, second, done]


async def test_an_id_the_session_does_not_keep_replays_nothing() -> None:
    budget = ReplayBudget()
    mine, theirs = budget.session(), budget.session()
    their_event = await theirs.store_event("1", answer(1, "secret"))
    await mine.store_event("1", progress(1))
    for unknown in (their_event, "999", "not a number"):
        stream, got = await replay(mine, unknown)
        assert (stream, got) == (None, [])


async def test_the_oldest_events_go_first_over_the_event_bound() -> None:
    budget = ReplayBudget(max_events=3, max_bytes=1 << 20)
    a, b = budget.session(), budget.session()
    oldest = await a.store_event("1", progress(1))
    await b.store_event("1", progress(1))
    kept = await a.store_event("1", progress(2))
    await a.store_event("1", progress(3))  # a fourth event: the oldest of all is evicted
    assert budget.events == 3
    assert a.kept() == 2
    assert b.kept() == 1
    assert await replay(a, oldest) == (None, [])
    stream, got = await replay(a, kept)
    assert stream == "1"
    assert len(got) == 1


async def test_the_byte_bound_holds_and_an_event_over_it_alone_is_not_kept() -> None:
    size = len(answer(1, "x" * 100).model_dump_json(by_alias=True, exclude_unset=True))
    budget = ReplayBudget(max_events=100, max_bytes=2 * size)
    store = budget.session()
    for i in range(5):
        await store.store_event(str(i), answer(i, "x" * 100))
        assert budget.bytes <= budget.max_bytes
    assert store.kept() == 2
    huge = await store.store_event("9", answer(9, "x" * (3 * size)))
    assert await replay(store, huge) == (None, [])
    assert budget.bytes <= budget.max_bytes
    assert budget.events == store.kept()
