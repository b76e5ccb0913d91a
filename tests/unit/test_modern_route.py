"""Where a request goes when a dual-era upstream is open in both eras, and what clients
hear of its list changes (`mcpvisor.actors.link.base.Link.request`,
`mcpvisor.actors.link.modern_side.Announcements`).

The links here are real `Link`s whose wire is a function: what each "server" answered is
what the test asserts on (which era a request reached, and what came back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from mcp.shared.exceptions import NoBackChannelError

from mcpvisor.actors import wire
from mcpvisor.actors.errors import UpstreamError
from mcpvisor.actors.link.base import Link, Pending, refused_for_back_channel
from mcpvisor.actors.link.modern_side import ECHO_S, Announcements

Answer = Callable[[str, dict[str, Any]], dict[str, Any] | tuple[int, str]]


class Events:
    """What the upstream hears from its links."""

    def __init__(self) -> None:
        self.announced: list[str] = []
        self.rechecked: list[str] = []

    def list_changed(self, kind: str) -> None:
        self.announced.append(kind)

    def list_rechecked(self, kind: str) -> None:
        self.rechecked.append(kind)

    def resource_updated(self, uri: str) -> None: ...

    def log_message(self, params: dict[str, Any]) -> None: ...

    def fallback_origin(self, method: str) -> None:
        return None


class WireLink(Link):
    """A link whose server is ``answer``: a result, or (code, message) for an error."""

    def __init__(self, name: str, era: str, answer: Answer) -> None:
        super().__init__(name, Events())
        self.protocol_version = era
        self.answer = answer
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None: ...

    async def _send_and_wait(self, pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        self.received.append((pending.method, params))
        answer = self.answer(pending.method, params)
        body = ({"result": answer} if isinstance(answer, dict)
                else {"error": {"code": answer[0], "message": answer[1]}})
        return wire.Envelope(**{k: wire.encode(v) for k, v in body.items()})  # type: ignore[arg-type]


class Origin:
    """A client of one era."""

    progress_token = None
    log_level = None

    def __init__(self, modern: bool) -> None:
        self.modern = modern
        self.client_capabilities: dict[str, Any] | None = {"elicitation": {}} if modern else None

    async def log(self, params: dict[str, Any]) -> None: ...

    async def progress(self, params: dict[str, Any]) -> None: ...

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        return {}


NO_BACK_CHANNEL = NoBackChannelError("elicitation/create")
"""What the SDK's server answers when a tool asks through ``ctx.session`` at 2026-07-28."""
ROUND = {"resultType": "input_required",
         "inputRequests": {"user_name": {"method": "elicitation/create", "params": {"message": "Name?"}}}}
DONE = {"content": [{"type": "text", "text": "done"}]}


def dual_era(side_answer: Answer) -> tuple[WireLink, WireLink]:
    session = WireLink("conf", "2025-11-25", lambda method, params: DONE)
    side = WireLink("conf", "2026-07-28", side_answer)
    session.modern_side = side
    return session, side


async def call(link: Link, origin: Origin, method: str = "tools/call") -> dict[str, Any]:
    return await link.request(method, {"name": "ask", "arguments": {}}, origin=origin, timeout=10,
                              max_time=10)


async def test_a_modern_clients_call_gets_the_servers_own_round_and_a_handshake_clients_the_session() -> None:
    session, side = dual_era(lambda method, params: ROUND)
    assert await call(session, Origin(modern=True)) == ROUND  # its own key, unchanged
    assert await call(session, Origin(modern=False)) == DONE
    await call(session, Origin(modern=True), "tools/list")  # no input_required there: the session's
    assert [m for m, _ in side.received] == ["tools/call"]
    assert [m for m, _ in session.received] == ["tools/call", "tools/list"]


async def test_a_tool_that_asks_through_the_back_channel_is_sent_again_on_the_session_and_so_are_later_ones(
) -> None:
    refusal = (NO_BACK_CHANNEL.error.code, NO_BACK_CHANNEL.error.message)
    session, side = dual_era(lambda method, params: refusal)
    assert await call(session, Origin(modern=True)) == DONE
    assert await call(session, Origin(modern=True)) == DONE
    assert len(side.received) == 1  # the server was asked in the new era once, then never again
    assert len(session.received) == 2
    assert session.back_channel_needed


async def test_a_tool_not_marked_idempotent_is_never_run_twice_and_the_next_call_is_bridged() -> None:
    """The refused tool ran up to its question once; running it again could repeat what it
    did before asking. The client gets the server's refusal (as directly) with a word on
    what happens next, and its next call goes on the session."""
    refusal = (NO_BACK_CHANNEL.error.code, NO_BACK_CHANNEL.error.message)
    session, side = dual_era(lambda method, params: refusal)
    with pytest.raises(UpstreamError, match="not run again") as caught:
        await session.request("tools/call", {"name": "ask", "arguments": {}}, origin=Origin(modern=True),
                              timeout=10, max_time=10, resend_safe=False)
    assert caught.value.code == NO_BACK_CHANNEL.error.code
    assert "bridges them from the next call on" in caught.value.message
    assert session.received == []  # not run again behind the client's back
    assert await session.request("tools/call", {"name": "ask", "arguments": {}}, origin=Origin(modern=True),
                                 timeout=10, max_time=10, resend_safe=False) == DONE
    assert len(side.received) == 1
    assert len(session.received) == 1


async def test_another_error_of_the_modern_side_reaches_the_client_as_it_came() -> None:
    session, side = dual_era(lambda method, params: (wire.INVALID_PARAMS, "unknown tool"))
    assert side.modern
    with pytest.raises(UpstreamError, match="unknown tool") as caught:
        await call(session, Origin(modern=True))
    assert caught.value.code == wire.INVALID_PARAMS
    assert session.received == []
    assert not session.back_channel_needed


async def test_a_modern_clients_call_made_while_the_server_is_asked_for_its_side_waits_for_the_answer(
        autojump_clock: trio.testing.MockClock) -> None:
    session, side = dual_era(lambda method, params: ROUND)
    session.modern_side = None
    probed = session.side_probed = trio.Event()
    results: list[dict[str, Any]] = []

    async def modern_call() -> None:
        results.append(await call(session, Origin(modern=True)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(modern_call)
        assert await call(session, Origin(modern=False)) == DONE  # handshake clients never wait
        await trio.sleep(1)
        assert results == []
        session.modern_side = side
        probed.set()
    assert results == [ROUND]


async def test_a_call_on_the_modern_side_counts_as_the_servers_call_in_flight(
        autojump_clock: trio.testing.MockClock) -> None:
    answered = trio.Event()
    session, side = dual_era(lambda method, params: ROUND)

    async def wait_then(pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        await answered.wait()
        return wire.Envelope(result=wire.encode(ROUND))  # type: ignore[arg-type]

    side._send_and_wait = wait_then  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, session, Origin(modern=True))
        nursery.start_soon(partial(side.request, "subscriptions/listen", {}, timeout=60, max_time=60))
        await trio.sleep(1)
        assert session.in_flight() == 1  # the call; the side's listen stream is always open
        answered.set()
    assert session.in_flight() == 0


async def test_a_closed_side_leaves_modern_clients_on_the_session() -> None:
    session, side = dual_era(lambda method, params: ROUND)
    side.close("stream broken")
    assert await call(session, Origin(modern=True)) == DONE
    assert side.received == []


def test_the_back_channel_refusal_is_told_from_other_invalid_requests() -> None:
    error = NO_BACK_CHANNEL.error
    assert refused_for_back_channel(UpstreamError(error.code, error.message))
    assert not refused_for_back_channel(UpstreamError(wire.INVALID_REQUEST, "bad request"))
    assert not refused_for_back_channel(UpstreamError(wire.INTERNAL_ERROR, error.message))


async def test_one_change_announced_on_both_links_reaches_clients_once(
        autojump_clock: trio.testing.MockClock) -> None:
    events = Events()
    heard = Announcements(events)
    heard.heard("tools", side=False)
    await trio.sleep(ECHO_S / 10)
    heard.heard("tools", side=True)  # the echo: only re-listed (clients hear of it if it differs)
    heard.heard("prompts", side=True)
    heard.heard("prompts", side=False)
    assert events.announced == ["tools", "prompts"]
    assert events.rechecked == ["tools", "prompts"]


async def test_changes_announced_on_one_link_each_reach_clients(
        autojump_clock: trio.testing.MockClock) -> None:
    events = Events()
    heard = Announcements(events)
    for _ in range(3):  # a change made during 2026-07-28 requests: only the listen stream hears it
        heard.heard("tools", side=True)
    heard.heard("tools", side=False)  # pairs with one of them: re-listed, not lost
    await trio.sleep(ECHO_S * 2)
    heard.heard("tools", side=False)  # too late for any echo: a change of its own
    assert events.announced == ["tools"] * 4
    assert events.rechecked == ["tools"]
