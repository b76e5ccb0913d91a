"""The byte-level ``tools/call`` path (actors/fastpath.py) on memory streams, in virtual time.

The production `StdioFront`, `FastPath` and `StdioLink` run against a scripted upstream
(tests/fakes/memory_front.py): the test reads what the upstream was sent and writes what
it answers, so ids, timing and bytes are exact. A regression shows as the wrong id on
either side, an answer reaching the wrong request, an error at the wrong virtual time
(a hang to the timeout instead of at once), a missing ``notifications/cancelled``, or a
result in the wrong protocol era.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)

from mcpvisor.actors.core.lifecycle import State
from tests.fakes.memory_front import CALL_TIMEOUT_S, MAX_CALL_TIME_S, connect_client, open_memory_proxy

Clock = trio.testing.MockClock

BOUND_S = 3600.0
"""Virtual seconds any test here may take (the autojump clock makes waits free)."""

MODERN = "2026-07-28"


def call(request_id: Any, tool: str, arguments: dict[str, Any] | None = None,
         meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments or {}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def text(reply: dict[str, Any]) -> str:
    return "".join(c["text"] for c in reply["result"]["content"])


def result(t: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t}], **extra}


async def test_a_call_reaches_its_upstream_under_a_proxy_id_and_returns_under_the_clients(
    autojump_clock: Clock,
) -> None:
    """The upstream gets the tool's own name, a proxy-minted ``mv-`` id and the arguments
    (and unknown params keys) as the client sent them; the client gets the upstream's
    result under its own id. A regression shows as the exposed name or the client's id
    reaching the upstream, or the reply carrying the proxy's id."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            sent = call("client-7", "s_echo", {"text": "hi", "nested": {"n": [1, 2.5, None]}})
            sent["params"]["inputResponses"] = {"k": {"action": "accept"}}
            await p.client.send(sent)
            request = await p.server.receive()
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns("client-7")
            assert request["method"] == "tools/call"
            assert request["id"].startswith("mv-")
            assert request["params"] == {"name": "echo",
                                         "arguments": {"text": "hi", "nested": {"n": [1, 2.5, None]}},
                                         "inputResponses": {"k": {"action": "accept"}}}
            await p.server.answer(request, result("echo: hi", structuredContent={"n": 1}))
            reply = await p.client.receive_id("client-7")
            assert reply == {"jsonrpc": "2.0", "id": "client-7",
                             "result": {"content": [{"type": "text", "text": "echo: hi"}],
                                        "structuredContent": {"n": 1}}}
            assert p.backend.notes == [("s", "echo", None)]


async def test_two_calls_in_flight_get_their_own_answers_in_the_order_the_upstream_gives_them(
    autojump_clock: Clock,
) -> None:
    """Two concurrent calls get distinct upstream ids; answered in reverse order, each
    answer reaches the call it belongs to, the later call's first. A regression shows as
    swapped texts or the second reply waiting behind the first."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_work", {"text": "one"}))
            await p.client.send(call(2, "s_work", {"text": "two"}))
            first = await p.server.receive()
            second = await p.server.receive()
            assert first["params"]["arguments"] == {"text": "one"}
            assert second["params"]["arguments"] == {"text": "two"}
            assert first["id"] != second["id"]
            await p.server.answer(second, result("answer two"))
            reply = await p.client.receive()
            assert reply["id"] == 2
            assert text(reply) == "answer two"
            await p.server.answer(first, result("answer one"))
            reply = await p.client.receive()
            assert reply["id"] == 1
            assert text(reply) == "answer one"


async def test_a_call_whose_upstream_dies_fails_at_that_instant(autojump_clock: Clock) -> None:
    """docs/reliability.md D2: the upstream exits 5 s into a call; the client gets a JSON-RPC
    error (-32000, naming the server and the exit status) at that same virtual instant,
    not at the 10 s timeout. A regression shows as a later time or a different error."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_work"))
            await p.server.receive()
            await trio.sleep(5)
            died_at = trio.current_time()
            await p.server.crash(3)
            reply = await p.client.receive_id(1)
            assert trio.current_time() == died_at
            assert reply["error"]["code"] == -32000
            assert reply["error"]["message"] == ("server s stopped while handling the request "
                                                 "(exited with status 3)")
            assert p.backend.notes[-1][2] is not None


async def test_a_call_that_times_out_is_cancelled_upstream_and_fails_for_the_client(
    autojump_clock: Clock,
) -> None:
    """No answer and no progress for the upstream's timeout: at exactly that virtual
    time the client gets -32001 naming the limit, and the upstream gets
    ``notifications/cancelled`` for the proxy's id; a late answer is not forwarded (the
    next thing the client reads is the answer to its next request). A regression shows
    as a hang, a different time, no cancel, or the late answer leaking through."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            start = trio.current_time()
            await p.client.send(call(1, "s_work"))
            request = await p.server.receive()
            reply = await p.client.receive_id(1)
            assert trio.current_time() - start == CALL_TIMEOUT_S
            assert reply["error"]["code"] == -32001
            assert reply["error"]["message"] == ("server s timed out: no answer or progress within "
                                                 f"{CALL_TIMEOUT_S:g}s")
            cancel = await p.server.receive()
            assert cancel["method"] == "notifications/cancelled"
            assert cancel["params"]["requestId"] == request["id"]
            await p.server.answer(request, result("too late"))
            await p.client.send(call(2, "s_echo"))
            second = await p.server.receive()
            await p.server.answer(second, result("on time"))
            reply = await p.client.receive()
            assert reply["id"] == 2
            assert text(reply) == "on time"


async def test_progress_restarts_the_inactivity_timeout(autojump_clock: Clock) -> None:
    """The upstream sees its own progress token (the proxy id), the client gets each
    progress under the token it chose, and each one restarts the timeout: progress at
    8 s moves the timeout from 10 s to 18 s. A regression shows as the client's token
    reaching the upstream, a progress frame under the wrong token, or the error at 10 s."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            start = trio.current_time()
            await p.client.send(call(1, "s_work", meta={"progressToken": "mine"}))
            request = await p.server.receive()
            token = request["params"]["_meta"]["progressToken"]
            assert token == request["id"]
            await trio.sleep(8)
            await p.server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                                 "params": {"progressToken": token, "progress": 1, "total": 2}})
            progress = await p.client.receive()
            assert progress == {"jsonrpc": "2.0", "method": "notifications/progress",
                                "params": {"progressToken": "mine", "progress": 1, "total": 2}}
            reply = await p.client.receive_id(1)
            assert trio.current_time() - start == 8 + CALL_TIMEOUT_S
            assert reply["error"]["code"] == -32001


async def _call_kept_busy_past_the_hard_cap(autojump_clock: Clock) -> tuple[float, dict[str, Any]]:
    """A call whose upstream sends progress every 8 s and never answers: (elapsed, reply)."""
    async with open_memory_proxy() as p:
        await p.client.handshake()
        start = trio.current_time()
        await p.client.send(call(1, "s_work", meta={"progressToken": 5}))
        request = await p.server.receive()

        async def keep_busy() -> None:
            step = 0
            while True:
                await trio.sleep(8)
                step += 1
                await p.server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                                     "params": {"progressToken": request["id"], "progress": step}})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_busy)
            reply = await p.client.receive_id(1)
            nursery.cancel_scope.cancel()
        return trio.current_time() - start, reply


async def test_progress_does_not_outlast_the_hard_cap(autojump_clock: Clock) -> None:
    """Progress every 8 s keeps a call alive only up to ``max_call_time``: the client
    gets -32001 at exactly that time. A regression shows as a call that never ends or
    ends at another time."""
    with trio.fail_after(BOUND_S):
        elapsed, reply = await _call_kept_busy_past_the_hard_cap(autojump_clock)
    assert elapsed == MAX_CALL_TIME_S
    assert reply["error"]["code"] == -32001


async def test_a_hard_cap_shorter_than_the_timeout_ends_the_call_on_time(autojump_clock: Clock) -> None:
    """``maxCallTime`` below ``timeout`` (4 s against 10 s): a silent call ends at 4 s with the
    hard-cap error, not when the inactivity timeout would have. A regression shows as the
    error at 10 s."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            p.upstream.spec.max_call_time = 4.0
            await p.client.handshake()
            start = trio.current_time()
            await p.client.send(call(1, "s_work"))
            await p.server.receive()
            reply = await p.client.receive_id(1)
            assert trio.current_time() - start == 4.0
            assert reply["error"]["message"] == "server s timed out: the hard limit of 4s"


async def test_the_hard_cap_error_names_the_configured_limit(autojump_clock: Clock) -> None:
    """The hard-cap error names ``max_call_time`` (the user's setting), as the SDK path's
    does. A regression shows as another number in the message."""
    with trio.fail_after(BOUND_S):
        _, reply = await _call_kept_busy_past_the_hard_cap(autojump_clock)
    assert reply["error"]["message"] == f"server s timed out: the hard limit of {MAX_CALL_TIME_S:g}s"


async def test_a_client_cancel_reaches_the_upstream_and_the_call_is_never_answered(
    autojump_clock: Clock,
) -> None:
    """The client's ``notifications/cancelled`` for its call reaches the upstream at once
    under the proxy's id; the upstream's answer, sent anyway, is not forwarded (MCP: no
    response to a cancelled request), and the connection keeps serving. A regression
    shows as no cancel upstream (or only at the timeout), the client's id in it, or a
    reply to the cancelled id."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_work"))
            request = await p.server.receive()
            cancelled_at = trio.current_time()
            await p.client.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": 1, "reason": "user pressed Esc"}})
            cancel = await p.server.receive()
            assert trio.current_time() == cancelled_at  # at once, not when the call would time out
            assert cancel == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                              "params": {"requestId": request["id"], "reason": "cancelled by mcpvisor"}}
            await p.server.answer(request, result("ignored"))
            await p.client.send(call(2, "s_echo"))
            second = await p.server.receive()
            await p.server.answer(second, result("served"))
            reply = await p.client.receive()
            assert reply["id"] == 2
            assert text(reply) == "served"


async def test_a_2026_client_calling_a_handshake_era_upstream(autojump_clock: Clock) -> None:
    """Era adaptation, modern client -> handshake-era upstream: the client's 2026-07-28
    envelope (protocolVersion, clientInfo, clientCapabilities in ``_meta``) is not sent
    to an upstream that never negotiated it, other ``_meta`` keys are; the result comes
    back with ``resultType: "complete"`` and the proxy's own serverInfo stamp, the
    upstream's stamp removed. A regression shows as envelope keys upstream or a result
    a 2026-07-28 client rejects (no resultType) or misattributes (upstream's stamp)."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_INFO_META_KEY: {"name": "new", "version": "1"},
                    CLIENT_CAPABILITIES_META_KEY: {}, "trace": "abc"}
            await p.client.send(call(1, "s_echo", {"text": "x"}, meta=meta))  # no handshake in this era
            request = await p.server.receive()
            assert request["params"]["_meta"] == {"trace": "abc"}
            stamped = {SERVER_INFO_META_KEY: {"name": "upstream"}, "k": 1}
            await p.server.answer(request, result("x", _meta=stamped))
            reply = await p.client.receive_id(1)
            assert reply["result"]["resultType"] == "complete"
            assert reply["result"]["_meta"]["k"] == 1
            assert reply["result"]["_meta"][SERVER_INFO_META_KEY]["name"] == "mcpvisor"


async def test_a_handshake_era_client_calling_a_2026_upstream(autojump_clock: Clock) -> None:
    """Era adaptation, handshake-era client -> 2026-07-28 upstream: the upstream gets the
    link's envelope in ``_meta`` (it has no session otherwise); the client never sees
    ``resultType`` or the upstream's serverInfo stamp, other ``_meta`` keys survive. A
    regression shows as a request the upstream rejects or 2026 keys in an old client's result."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(upstream_version=MODERN) as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_echo", {"text": "x"}))
            request = await p.server.receive()
            assert request["params"]["_meta"][PROTOCOL_VERSION_META_KEY] == MODERN
            assert CLIENT_INFO_META_KEY in request["params"]["_meta"]
            await p.server.answer(request, result("x", resultType="complete",
                                                  _meta={SERVER_INFO_META_KEY: {"name": "upstream"}, "k": 1}))
            reply = await p.client.receive_id(1)
            assert reply["result"] == {"content": [{"type": "text", "text": "x"}], "_meta": {"k": 1}}


async def test_input_required_from_a_2026_upstream_is_asked_of_a_handshake_era_client(
    autojump_clock: Clock,
) -> None:
    """Era adaptation of SEP-2322: a 2026-07-28 upstream answers ``input_required``; the
    handshake-era client (which declared elicitation) is sent an ``elicitation/create``
    request, its answer goes back to the upstream as ``inputResponses`` with the
    ``requestState`` on a retried call, and the final result reaches the client under its
    id. A regression shows as ``input_required`` leaking to an old client, no request to
    the client, or the retry missing the answers."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(upstream_version=MODERN) as p:
            await p.client.handshake(capabilities={"elicitation": {}})
            await p.client.send(call(1, "s_work", {"q": 1}))
            request = await p.server.receive()
            ask = {"method": "elicitation/create", "params": {"message": "who?", "requestedSchema": {
                "type": "object", "properties": {}}}}
            await p.server.answer(request, {"resultType": "input_required", "inputRequests": {"who": ask},
                                            "requestState": "s1"})
            asked = await p.client.receive()
            assert asked["method"] == "elicitation/create"
            assert asked["params"]["message"] == "who?"
            answer = {"action": "accept", "content": {"name": "Ada"}}
            await p.client.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            retry = await p.server.receive()
            assert retry["method"] == "tools/call"
            assert retry["id"] != request["id"]
            assert retry["params"]["inputResponses"] == {"who": answer}
            assert retry["params"]["requestState"] == "s1"
            assert retry["params"]["arguments"] == {"q": 1}
            await p.server.answer(retry, result("hello Ada", resultType="complete"))
            reply = await p.client.receive_id(1)
            assert reply["result"] == {"content": [{"type": "text", "text": "hello Ada"}]}


async def test_an_upstreams_mid_call_request_is_asked_of_the_calling_client(autojump_clock: Clock) -> None:
    """During a fast-path call, the upstream's ``sampling/createMessage`` goes to the
    client that made the call (it declared sampling) under a proxy-minted ``mvs-`` id,
    and the client's answer returns to the upstream under the upstream's own id. A
    regression shows as the upstream's id leaking to the client, or no answer upstream."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake(capabilities={"sampling": {}})
            await p.client.send(call(1, "s_work"))
            request = await p.server.receive()
            await p.server.send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                                 "params": {"messages": [], "maxTokens": 5}})
            asked = await p.client.receive()
            assert asked["method"] == "sampling/createMessage"
            assert asked["id"].startswith("mvs-")
            sampled = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}
            await p.client.send({"jsonrpc": "2.0", "id": asked["id"], "result": sampled})
            answer = await p.server.receive()
            assert answer == {"jsonrpc": "2.0", "id": 77, "result": sampled}
            await p.server.answer(request, result("done"))
            assert text(await p.client.receive_id(1)) == "done"


def retry_of(request_id: Any, leg: dict[str, Any], answers: dict[str, Any],
             meta: dict[str, Any]) -> dict[str, Any]:
    """The client's retry of ``s_work`` after an ``input_required`` leg (SEP-2322)."""
    frame = call(request_id, "s_work", meta=meta)
    frame["params"]["inputResponses"] = answers
    frame["params"]["requestState"] = leg["result"]["requestState"]
    return frame


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_handshake_era_upstreams_question_is_an_input_required_leg_for_a_2026_client(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """Era bridge: a 2026-07-28 client has no server-to-client requests, so a handshake-era
    upstream's ``sampling/createMessage`` during its call answers the client's request as
    ``input_required`` (the question as it came, under a key of the proxy's); the client's
    retry (a new id, with ``inputResponses`` and the ``requestState``) answers the waiting
    upstream request, and the call's result reaches the client under the retry's id (the
    fast path and the SDK path alike). A regression shows as a request frame the client
    cannot take, a refusal to the upstream, or the result under the wrong id."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"sampling": {}},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_work", meta=meta))
            request = await p.server.receive()
            question = {"messages": [], "maxTokens": 5}
            await p.server.send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                                 "params": question})
            leg = await p.client.receive_id(1)
            assert leg["result"]["resultType"] == "input_required"
            (key, asked), = leg["result"]["inputRequests"].items()
            assert asked == {"method": "sampling/createMessage", "params": question}
            answer = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
            await p.client.send(retry_of(2, leg, {key: answer}, meta))
            sampled = await p.server.receive()
            assert sampled["id"] == 77
            assert sampled["result"] == answer
            await p.server.answer(request, result("done"))
            reply = await p.client.receive_id(2)
            assert text(reply) == "done"
            assert reply["result"]["resultType"] == "complete"


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_2026_client_that_never_retries_leaves_no_upstream_request_waiting(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """Bounded bridge: when the 2026-07-28 client never comes back with its answer, the
    upstream's question gets an error by `INPUT_WAIT_S` and the call is cancelled at its
    own timeout; a late retry gets an error, not a hang (both paths). A regression shows as an upstream
    request that is never answered or a retry that waits forever."""
    from mcpvisor.actors.bridge import INPUT_WAIT_S

    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"sampling": {}},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_work", meta=meta))
            request = await p.server.receive()
            started = trio.current_time()
            await p.server.send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                                 "params": {"messages": [], "maxTokens": 5}})
            leg = await p.client.receive_id(1)
            seen: dict[Any, dict[str, Any]] = {}
            while 77 not in seen or request["id"] not in seen:
                frame = await p.server.receive()
                seen[frame.get("id", frame.get("params", {}).get("requestId"))] = frame
            assert "error" in seen[77]  # the question's own timeout, or the call's if that came first
            assert trio.current_time() - started <= INPUT_WAIT_S
            assert seen[request["id"]]["method"] == "notifications/cancelled"
            await p.client.send(retry_of(2, leg, {}, meta))
            late = await p.client.receive_id(2)
            assert "timed out" in late["error"]["message"]


async def test_a_retry_safe_call_is_sent_once_more_to_the_next_process(autojump_clock: Clock) -> None:
    """docs/design.md "Behaviour under failure": a read-only tool whose upstream dies under it
    is sent once more to the restarted process, with a progress token of that process's
    own, and the client sees only the result under its id. A regression shows as an
    error to the client or a retry that never reaches the new process."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(tools=("echo", "read"), retry_safe=("read",)) as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_read", {"path": "a"}, meta={"progressToken": 3}))
            await p.server.receive()
            await p.server.crash(3)
            await trio.sleep(2)  # the restart takes a while; the call waits for it
            fresh = p.restart()
            retry = await fresh.receive()
            assert retry["params"]["name"] == "read"
            assert retry["params"]["arguments"] == {"path": "a"}
            assert retry["params"]["_meta"] == {"progressToken": retry["id"]}
            await fresh.answer(retry, result("contents of a"))
            reply = await p.client.receive_id(1)
            assert text(reply) == "contents of a"


async def test_progress_of_a_retried_call_reaches_the_client(autojump_clock: Clock) -> None:
    """The retry of a retry-safe call after its upstream died still reports progress to
    the client, under the client's own token, and its id stays in flight until the
    answer. A regression shows as the progress lost (and the call timing out while the
    client hears nothing), or the id free for reuse while the retry runs."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(tools=("echo", "read"), retry_safe=("read",)) as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_read", {"path": "a"}, meta={"progressToken": 3}))
            await p.server.receive()
            await p.server.crash(3)
            fresh = p.restart()
            retry = await fresh.receive()
            await fresh.send({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": retry["id"], "progress": 1}})
            progress = await p.client.receive()
            assert progress.get("params") == {"progressToken": 3, "progress": 1}, progress
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns(1)
            await fresh.answer(retry, result("contents of a"))
            assert text(await p.client.receive_id(1)) == "contents of a"
            assert not p.stdio.fast_path.owns(1)


async def test_a_client_cancel_reaches_a_retried_call(autojump_clock: Clock) -> None:
    """The client cancels a retry-safe call while it is being retried on the restarted
    process: the new process gets ``notifications/cancelled`` for the retry's id at that
    instant, the client gets no answer to the cancelled id (MCP cancellation), and the
    connection keeps serving. A regression shows as no cancel upstream (the retry runs
    on to its timeout) or a reply to the cancelled id."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(tools=("echo", "read"), retry_safe=("read",)) as p:
            await p.client.handshake()
            await p.client.send(call(1, "s_read", {"path": "a"}))
            await p.server.receive()
            await p.server.crash(3)
            fresh = p.restart()
            retry = await fresh.receive()
            cancelled_at = trio.current_time()
            await p.client.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": 1, "reason": "user pressed Esc"}})
            cancel = await fresh.receive()
            assert trio.current_time() == cancelled_at
            assert cancel["method"] == "notifications/cancelled"
            assert cancel["params"]["requestId"] == retry["id"]
            await fresh.answer(retry, result("ignored"))
            await p.client.send(call(2, "s_echo"))
            second = await fresh.receive()
            await fresh.answer(second, result("served"))
            reply = await p.client.receive()
            assert reply["id"] == 2
            assert text(reply) == "served"


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_progress_of_a_bridged_call_follows_the_clients_latest_leg(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """Across ``input_required`` legs the upstream keeps the one progress token it was
    given; the client gets the progress that follows its retry under the retry's own
    token. A regression shows as progress under the first leg's token (which the client
    forgot when that leg ended) or no progress at all."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"sampling": {}},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_work", meta={**meta, "progressToken": "first"}))
            request = await p.server.receive()
            upstream_token = request["params"]["_meta"]["progressToken"]
            await p.server.send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                                 "params": {"messages": [], "maxTokens": 5}})
            leg = await p.client.receive_id(1)
            (key, _), = leg["result"]["inputRequests"].items()
            answer = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
            await p.client.send(retry_of(2, leg, {key: answer}, {**meta, "progressToken": "second"}))
            assert (await p.server.receive())["id"] == 77
            await p.server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                                 "params": {"progressToken": upstream_token, "progress": 1, "total": 2}})
            progress = await p.client.receive()
            assert progress["method"] == "notifications/progress"
            assert progress["params"]["progressToken"] == "second"
            await p.server.answer(request, result("done"))
            assert text(await p.client.receive_id(2)) == "done"


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_2026_client_cancelling_a_bridged_call_cancels_it_upstream(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """A 2026-07-28 client's call to a handshake-era upstream runs beside the client's
    request (so it can ask questions); the client's ``notifications/cancelled`` still
    reaches the upstream at once, under the proxy's id. A regression shows as an upstream
    left working for a client that gave up."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_INFO_META_KEY: {"name": "t", "version": "1"},
                    CLIENT_CAPABILITIES_META_KEY: {}}
            await p.client.send(call(1, "s_work", meta=meta))
            request = await p.server.receive()
            started = trio.current_time()
            await p.client.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": 1, "reason": "user"}})
            cancel = await p.server.receive()
            assert cancel["method"] == "notifications/cancelled"
            assert cancel["params"]["requestId"] == request["id"]
            assert trio.current_time() == started


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_bridged_result_nobody_comes_back_for_is_forgotten(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """The client left after an ``input_required`` leg and the upstream finished anyway
    (its question was answered with an error): the parked call is forgotten
    `INPUT_WAIT_S` later, so a client that walks away costs bounded memory."""
    from mcpvisor.actors.bridge import INPUT_WAIT_S

    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"sampling": {}},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_work", meta=meta))
            request = await p.server.receive()
            await p.server.send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                                 "params": {"messages": [], "maxTokens": 5}})
            await p.client.receive_id(1)
            parked = p.stdio.fast_path.parked if p.stdio.fast_path is not None else p.front.parked
            assert len(parked) == 1
            await p.server.answer(request, result("done without an answer"))
            await trio.sleep(INPUT_WAIT_S)
            await trio.testing.wait_all_tasks_blocked()
            assert len(parked) == 0


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_question_the_2026_client_did_not_declare_is_refused_at_once(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """MCP 2026-07-28: a request whose handling needs a client capability the client did
    not declare is refused with -32021. A 2026-07-28 client whose ``_meta`` capabilities
    lack ``roots`` is not handed a ``roots/list`` leg: its call ends at once with -32021
    naming ``roots``, the upstream's question gets the same error and the upstream is told
    to cancel the call. A regression shows as an ``input_required`` leg the client cannot
    answer, or a call left running upstream."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"sampling": {}},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_work", meta=meta))
            request = await p.server.receive()
            started = trio.current_time()
            await p.server.send({"jsonrpc": "2.0", "id": 78, "method": "roots/list"})
            refused = await p.client.receive_id(1)
            assert refused["error"]["code"] == -32021
            assert refused["error"]["data"]["requiredCapabilities"] == {"roots": {}}
            seen = [await p.server.receive(), await p.server.receive()]
            answer = next(m for m in seen if m.get("id") == 78)
            assert answer["error"]["code"] == -32021
            cancel = next(m for m in seen if m.get("method") == "notifications/cancelled")
            assert cancel["params"]["requestId"] == request["id"]
            assert trio.current_time() == started


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-path"])
async def test_a_roots_question_a_handshake_client_never_declared_leaves_its_call_alone(
    autojump_clock: Clock, fast_path: bool,
) -> None:
    """A server asks ``roots/list`` when it starts, whatever call is in flight (the
    reference "everything" server does, right after its handshake). A handshake-era
    client that declared no roots, connected directly, answers "method not found" and its
    call goes on; through the proxy the question is answered that way too (no connected
    client can answer it) and the call in flight gets the server's own answer. A
    regression shows as the call refused with -32021 for a question that was not its own."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(fast_path=fast_path) as p:
            await p.client.handshake()  # no capabilities: no roots
            await p.client.send(call(1, "s_work"))
            request = await p.server.receive()
            await p.server.send({"jsonrpc": "2.0", "id": 78, "method": "roots/list"})
            answer = await p.server.receive()
            assert answer["id"] == 78
            assert answer["error"]["code"] == -32601, answer
            await p.server.answer(request, result("done"))
            done = await p.client.receive_id(1)
            assert done["result"]["content"][0]["text"] == "done", done


async def test_a_session_scoped_servers_calls_reach_the_connections_own_instance_either_way(
    autojump_clock: Clock,
) -> None:
    """``"scope": "session"``: a connection's first call, made while its instance is still
    starting, waits for it; that call and the next both go the fast way and reach the
    same instance, held under the one session the stdio front made for the connection. A
    second connection gets an instance of its own, on the fast path from its first call;
    the shared instance gets nothing. The first client leaving ends its session (its
    instance would stop) and only its. A regression shows as a call reaching the wrong
    "process", two sessions for one connection, or a session outliving its client."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(instances=2) as p:
            (mine, my_server), (theirs, their_server) = p.instances
            mine.set_state(State.STARTING)
            await p.client.handshake()
            await p.client.send(call(1, "s_echo", {"text": "first"}))
            await p.client.send({"jsonrpc": "2.0", "id": 99, "method": "ping"})
            assert (await p.client.receive())["id"] == 99  # read in order: call 1 is waiting
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns(1)
            mine.set_state(State.READY)
            request = await my_server.receive_method("tools/call")
            await my_server.answer(request, result("first"))
            assert text(await p.client.receive_id(1)) == "first"

            await p.client.send(call(2, "s_echo", {"text": "second"}))
            request = await my_server.receive()
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns(2)
            await my_server.answer(request, result("second"))
            assert text(await p.client.receive_id(2)) == "second"
            assert p.stdio.statistics().sdk_tool_calls == 0
            assert p.backend.held == {p.stdio.session: mine}

            other, other_stdio = connect_client(p.front, fast_path=True)
            p.nursery.start_soon(other_stdio.serve)
            await other.handshake()
            await other.send(call(1, "s_echo", {"text": "other"}))
            request = await their_server.receive()
            assert other_stdio.fast_path is not None
            assert other_stdio.fast_path.owns(1)
            await their_server.answer(request, result("other"))
            assert text(await other.receive_id(1)) == "other"
            assert p.backend.held == {p.stdio.session: mine, other_stdio.session: theirs}
            assert (mine.calls, theirs.calls, p.upstream.calls) == (2, 1, 0)  # fast-path calls each

            await p.client.close()
            await p.served.wait()
            assert p.backend.ended == [p.stdio.session]
            assert not other_stdio.session.ended


async def test_a_2026_call_to_a_session_scoped_server_goes_to_the_shared_instance_as_on_the_sdk_path(
    autojump_clock: Clock,
) -> None:
    """A 2026-07-28 request has no connection on the SDK path, which sends it to the
    server's shared instance; the fast path does the same, so a client's calls meet one
    process whichever way they go. A regression shows as the call reaching a session's
    instance (or none, on the SDK path, when it could have gone the fast way)."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy(instances=1) as p:
            meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {},
                    CLIENT_INFO_META_KEY: {"name": "t", "version": "1"}}
            await p.client.send(call(1, "s_echo", meta=meta))
            request = await p.server.receive()
            assert p.stdio.fast_path is not None
            assert p.stdio.fast_path.owns(1)
            await p.server.answer(request, result("shared"))
            assert text(await p.client.receive_id(1)) == "shared"
            assert p.backend.held == {}


async def _answered(p: Any, request_id: Any, t: str) -> dict[str, Any]:
    """What the upstream was sent for the client's last call, answered with ``t``."""
    request = await p.server.receive()
    await p.server.answer(request, result(t))
    assert text(await p.client.receive_id(request_id)) == t
    params: dict[str, Any] = request["params"]
    return params


async def test_a_plain_call_follows_the_catalog_when_its_name_is_routed_anew(autojump_clock: Clock) -> None:
    """The fast path remembers where a tool's plain calls go, but only for the snapshot it
    found the route in: once the catalog routes ``s_echo`` to the server's ``work`` tool,
    the next call carries ``work`` upstream. A regression shows as the old tool's name
    reaching the upstream after the change."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            for n in (1, 2):  # the second call takes the remembered route
                await p.client.send(call(n, "s_echo", {"text": "hi"}))
                assert (await _answered(p, n, "ok"))["name"] == "echo"
            snapshot = p.backend.router.snapshot
            moved = msgspec.structs.replace(snapshot.tools["s_echo"], original="work")
            routes = {**snapshot.tools, "s_echo": moved}
            p.backend.router.snapshot = msgspec.structs.replace(snapshot, tools=routes)
            await p.client.send(call(3, "s_echo", {"text": "hi"}))
            assert (await _answered(p, 3, "ok"))["name"] == "work"


async def test_a_plain_call_after_its_server_restarted_reaches_the_new_process(autojump_clock: Clock) -> None:
    """A remembered route names the link it was found on: after the server's process dies
    and a new one takes its place, the next call is written to the new process (and gets
    its answer), never to the dead one's pipe. A regression shows as the call failing
    with the old process's death, or waiting forever."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            for n in (1, 2):
                await p.client.send(call(n, "s_echo", {"text": "hi"}))
                await _answered(p, n, f"old {n}")
            await p.server.crash(3)
            fresh = p.restart()
            await p.client.send(call(3, "s_echo", {"text": "after"}))
            request = await fresh.receive()
            assert request["params"]["arguments"] == {"text": "after"}
            await fresh.answer(request, result("new 3"))
            assert text(await p.client.receive_id(3)) == "new 3"


async def test_a_plain_call_to_a_server_that_is_starting_again_waits_for_it(autojump_clock: Clock) -> None:
    """A remembered route is taken only while its server is ready: when the server goes
    back to starting, the next call waits for it (as any call to a starting server does)
    and is sent once it is ready. A regression shows as the call written to a server
    that is not ready, or refused."""
    with trio.fail_after(BOUND_S):
        async with open_memory_proxy() as p:
            await p.client.handshake()
            for n in (1, 2):
                await p.client.send(call(n, "s_echo", {"text": "hi"}))
                await _answered(p, n, "ok")
            p.upstream.set_state(State.STARTING)
            await p.client.send(call(3, "s_echo", {"text": "later"}))
            await trio.sleep(30)
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(1):
                    await p.server.receive()  # nothing reaches a starting server
            p.upstream.set_state(State.READY)
            assert (await _answered(p, 3, "done"))["arguments"] == {"text": "later"}
