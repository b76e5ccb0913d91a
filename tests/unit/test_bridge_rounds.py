"""The bridge's rounds (`mcpvisor.actors.bridge.ParkedCall`): what a 2026-07-28 client is
shown when a handshake-era upstream asks it several things, and when it leaves one open."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from mcpvisor.actors.bridge import GATHER_MAX_S, GATHER_S, ParkedCall, new_state_token


async def test_questions_sent_together_are_one_round_and_a_later_one_the_next(
        autojump_clock: trio.testing.MockClock) -> None:
    call = ParkedCall(new_state_token())
    answers: dict[str, Any] = {}

    async def ask(method: str, after: float) -> None:
        await trio.sleep(after)
        answers[method] = await call.ask(method, None)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "elicitation/create", 0)
        nursery.start_soon(ask, "sampling/createMessage", GATHER_S / 2)
        nursery.start_soon(ask, "roots/list", GATHER_S * 4)  # after the first round was shown
        first = await call.next_leg()
        assert isinstance(first, dict)
        assert first["inputRequests"] == {"elicitation-1": {"method": "elicitation/create"},
                                          "sampling-2": {"method": "sampling/createMessage"}}
        call.answer({"elicitation-1": {"action": "accept"}, "sampling-2": {"model": "m"}, "extra": {}})
        second = await call.next_leg()
        assert isinstance(second, dict)
        assert second["inputRequests"] == {"roots-3": {"method": "roots/list"}}
        assert second["requestState"] != first["requestState"]
        call.answer({"roots-3": {"roots": []}})
    assert answers == {"elicitation/create": {"action": "accept"}, "sampling/createMessage": {"model": "m"},
                       "roots/list": {"roots": []}}


async def test_a_question_left_unanswered_comes_back_under_its_key(
        autojump_clock: trio.testing.MockClock) -> None:
    call = ParkedCall(new_state_token())
    got: list[dict[str, Any]] = []

    async def ask(method: str, after: float) -> None:
        await trio.sleep(after)  # the order the upstream asks in (it numbers the keys)
        got.append(await call.ask(method, None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "elicitation/create", 0)
        nursery.start_soon(ask, "sampling/createMessage", GATHER_S / 2)
        first = await call.next_leg()
        assert isinstance(first, dict)
        assert set(first["inputRequests"]) == {"elicitation-1", "sampling-2"}
        call.answer({"elicitation-1": {"action": "accept"}, "sampling-2": 12345})  # not an object
        with trio.fail_after(GATHER_MAX_S):  # virtual time: shown again, not after the client's wait
            again = await call.next_leg()
        assert isinstance(again, dict)
        assert again["inputRequests"] == {"sampling-2": {"method": "sampling/createMessage"}}
        call.answer(None)  # a retry with no answers at all: asked again, same key
        third = await call.next_leg()
        assert isinstance(third, dict)
        assert third["inputRequests"] == {"sampling-2": {"method": "sampling/createMessage"}}
        call.answer({"sampling-2": {"model": "m"}})
    assert sorted(got, key=str) == [{"action": "accept"}, {"model": "m"}]
