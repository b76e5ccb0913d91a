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


NAME_FORM: dict[str, Any] = {"message": "What is your name?", "requestedSchema": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
ALICE: dict[str, Any] = {"action": "accept", "content": {"name": "Alice"}}


async def test_an_answer_under_a_guessed_key_is_taken_when_it_fits_only_that_question(
        autojump_clock: trio.testing.MockClock) -> None:
    """A client that answers under the key it expects of the server (``user_name``) rather
    than the round's (``elicitation-1``): the one answer that fits the one open question."""
    call = ParkedCall(new_state_token())
    got: list[dict[str, Any]] = []

    async def ask() -> None:
        got.append(await call.ask("elicitation/create", NAME_FORM))
        call.finish({"content": [{"type": "text", "text": "Hello, Alice!"}]})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        first = await call.next_leg()
        assert isinstance(first, dict)
        assert list(first["inputRequests"]) == ["elicitation-1"]
        call.answer({"user_name": ALICE, "wrong_shape": {"action": "accept", "content": {"foo": "bar"}}})
        outcome = await call.next_leg()
    assert got == [ALICE]
    assert outcome == {"content": [{"type": "text", "text": "Hello, Alice!"}]}


async def test_two_open_questions_and_one_guessed_answer_take_nothing(
        autojump_clock: trio.testing.MockClock) -> None:
    """Ambiguous: the answer fits both open elicitations. Neither gets it; both are asked
    again under their own keys, and answering those keys ends the round."""
    call = ParkedCall(new_state_token())
    got: dict[str, dict[str, Any]] = {}

    async def ask(tag: str) -> None:
        got[tag] = await call.ask("elicitation/create", NAME_FORM)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "a")
        nursery.start_soon(ask, "b")
        first = await call.next_leg()
        assert isinstance(first, dict)
        assert set(first["inputRequests"]) == {"elicitation-1", "elicitation-2"}
        call.answer({"user_name": ALICE})
        again = await call.next_leg()
        assert isinstance(again, dict)
        assert set(again["inputRequests"]) == {"elicitation-1", "elicitation-2"}
        assert got == {}
        call.answer({"elicitation-1": ALICE, "elicitation-2": {"action": "decline"}})
    assert sorted(map(str, got.values())) == sorted([str(ALICE), str({"action": "decline"})])


async def test_answers_sent_with_the_first_request_answer_the_question_they_alone_fit(
        autojump_clock: trio.testing.MockClock) -> None:
    """SEP-2322 lets a client send ``inputResponses`` with its first request: the one that
    satisfies the question's schema answers it, with no round shown; answers that fit
    nothing (extra keys) are ignored."""
    offered = {"user_name": ALICE,
               "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}},
               "another_unexpected": {"action": "accept", "content": {"baz": 123}}}
    call = ParkedCall(new_state_token(), offered)

    async def ask() -> None:
        answer = await call.ask("elicitation/create", NAME_FORM)
        call.finish({"content": [{"type": "text", "text": f"Hello, {answer['content']['name']}!"}]})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        outcome = await call.next_leg()
    assert outcome == {"content": [{"type": "text", "text": "Hello, Alice!"}]}


async def test_first_request_answers_that_fit_two_questions_are_not_guessed(
        autojump_clock: trio.testing.MockClock) -> None:
    call = ParkedCall(new_state_token(), {"x": ALICE, "y": {"action": "accept", "content": {"name": "Bob"}}})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call.ask, "elicitation/create", NAME_FORM)
        first = await call.next_leg()
        assert isinstance(first, dict)
        assert list(first["inputRequests"]) == ["elicitation-1"]
        call.answer({"elicitation-1": ALICE})


async def test_an_earlier_rounds_answer_sent_again_is_not_taken_for_the_next_question(
        autojump_clock: trio.testing.MockClock) -> None:
    """A client that sends every answer it gave so far with each retry: round one's answer
    (under the key round one asked) fits round two's question but is not taken for it."""
    call = ParkedCall(new_state_token())
    got: list[dict[str, Any]] = []

    async def ask_twice() -> None:
        got.append(await call.ask("elicitation/create", NAME_FORM))
        got.append(await call.ask("elicitation/create", NAME_FORM))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask_twice)
        first = await call.next_leg()
        assert isinstance(first, dict)
        call.answer({"elicitation-1": ALICE})
        second = await call.next_leg()
        assert isinstance(second, dict)
        assert list(second["inputRequests"]) == ["elicitation-2"]
        call.answer({"elicitation-1": ALICE})  # only the old answer: elicitation-2 is asked again
        third = await call.next_leg()
        assert isinstance(third, dict)
        assert list(third["inputRequests"]) == ["elicitation-2"]
        call.answer({"elicitation-1": ALICE, "elicitation-2": {"action": "decline"}})
    assert got == [ALICE, {"action": "decline"}]
