"""Frames a client (or an upstream) sends that must end at most themselves, on every front.

A real ``mcpvisor serve`` per test (stdio on pipes; streamable HTTP and websocket on
127.0.0.1) in front of a real flaky.py upstream. Issue 23 items 3 and 8 and the small
frame items of 14:

* deep JSON (1,000 and 100,000 levels) gets -32600 and the connection keeps serving;
  the stdio front used to exit on the first (RecursionError);
* odd but valid ids (2^64, below -2^63, 0, "", a long string) are answered and released;
  invalid ids (fraction, boolean, object, array, null) get -32600; a lone ``\\ud800``
  escape gets -32700 with the request's id; non-JSON and non-objects get an error on
  websocket too (it used to answer nothing);
* a request id already in flight on one connection or HTTP session (1, and "1" on HTTP,
  where the SDK conflates them) is refused at once while the first still completes;
* crash barrier: after every crash input, including an upstream notification nested
  100,000 levels, the same client and a second one are served.

Regressions show as a missing answer (the bound fails), a dead proxy (stdout closed, the
connection refused) or a different error code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.chaos.frames import ANSWER_BOUND_S, FRONTS, HttpRaw, StdioRaw, WsRaw, body_of, open_front
from tests.helpers import flaky, write_config

pytestmark = pytest.mark.slow

TEST_BOUND_S: Final = 240.0
"""A proxy start plus a few dozen loopback round trips on a loaded 2-core box."""
DEEP_UPSTREAM: Final = 100_000
"""Levels of the notification flaky.py sends before each answer: far past any recursion limit."""


def _config(tmp_path: Path, *flags: str) -> Path:
    return write_config(tmp_path, {"fl": flaky(*flags)}, exposure="all")


def _req(rid: Any, method: str = "ping", params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode()


def _deep(depth: int, rid: Any = 10) -> bytes:
    return (b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"method":"ping","params":{"x":'
            + b"[" * depth + b"]" * depth + b"}}")


def _echo(rid: Any, text: str) -> bytes:
    return _req(rid, "tools/call", {"name": "fl_echo", "arguments": {"text": text}})


ODD_VALID_IDS: Final = [2**64, -(2**63) - 1, 0, "", "x" * 10_000, -1]
REFUSED: Final = [
    # (frame, code, id the error carries)
    (_deep(200), -32600, 10),
    (_deep(1_000), -32600, None),
    (_deep(100_000), -32600, None),
    (b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"a":"\\ud800"}}', -32700, 7),
    (b"{this is not json", -32700, None),
    (b'[{"jsonrpc":"2.0","id":5,"method":"ping"}]', -32600, None),
    (b"42", -32600, None),
    (_req(1.5), -32600, None),
    (_req(True), -32600, None),
    (_req({"a": 1}), -32600, None),
    (_req([1]), -32600, None),
    (_req(None), -32600, None),
]


@pytest.mark.parametrize("front", FRONTS)
async def test_odd_frames_get_json_rpc_errors_and_odd_valid_ids_are_answered(
    tmp_path: Path, front: str
) -> None:
    """Each refused frame gets its error (code and id); each odd but valid id gets its
    answer, and is free again afterwards (a second request with it is answered too)."""
    with trio.fail_after(TEST_BOUND_S):
        async with open_front(front, _config(tmp_path)) as connect:
            raw = await connect()
            for frame, code, rid in REFUSED:
                reply = await raw.request(frame)
                assert reply.get("error", {}).get("code") == code, (frame[:80], reply)
                assert reply["id"] == rid, (frame[:80], reply)
            for odd_id in ODD_VALID_IDS:
                for _ in range(2):
                    pong = await raw.ping(odd_id)
                    assert pong == {"jsonrpc": "2.0", "id": odd_id, "result": {}}
                for text in ("first", "again"):
                    reply = await raw.request(_echo(odd_id, text), answer_id=odd_id)
                    assert reply["result"]["content"][0]["text"] == f"echo: {text}", reply


@pytest.mark.parametrize("front", FRONTS)
async def test_an_id_in_flight_is_refused_at_once_and_the_first_call_completes(
    tmp_path: Path, front: str
) -> None:
    """A call is in flight (a 10 s sleep upstream); the same id again gets -32600 at once
    (on HTTP also "1" for 1: the SDK keys requests by str(id)); the first call's answer
    still comes, and the id is free afterwards. On HTTP the SDK used to drop the first."""
    sleep = _req(1, "tools/call", {"name": "fl_sleep", "arguments": {"seconds": 10}})
    with trio.fail_after(TEST_BOUND_S):
        async with open_front(front, _config(tmp_path)) as connect:
            raw = await connect()
            duplicates = [_req(1), _req("1")] if front == "http" else [_req(1)]
            if isinstance(raw, HttpRaw):
                async with raw._http.stream("POST", raw._url, content=sleep, headers=raw.headers) as first:
                    # Headers back: the SDK has the request, so it is in flight.
                    for dup in duplicates:
                        with trio.fail_after(ANSWER_BOUND_S / 3):  # well before the sleep ends
                            refused = await raw.post(dup)
                        assert refused.status_code == 400
                        body = body_of(refused)
                        assert body["error"]["code"] == -32600
                        assert "in flight" in body["error"]["message"]
                        assert body["id"] == json.loads(dup)["id"]
                    await first.aread()
                    answer = body_of(first)
            else:
                await raw.send(sleep)
                for dup in duplicates:
                    refusal = await raw.request(dup)
                    assert refusal["id"] == 1, refusal
                    assert refusal["error"]["code"] == -32600, refusal
                assert isinstance(raw, StdioRaw | WsRaw)
                answer = await raw.answer(1)
            assert answer["id"] == 1, answer
            assert answer["result"]["content"][0]["text"] == "slept 10", answer
            assert (await raw.ping(1))["result"] == {}


@pytest.mark.parametrize("front", FRONTS)
async def test_crash_inputs_end_only_themselves_and_a_second_client_is_served(
    tmp_path: Path, front: str
) -> None:
    """Crash barrier: every input that used to end the process, or a connection, or the
    upstream's link (deep JSON from the client, a lone surrogate, binary garbage, an
    upstream notification nested 100,000 levels before its answer) is answered with an
    error or its result; the same client then answers a ping, and so does a second client
    (http: a new session; ws: a new connection; stdio has one client: it keeps serving)."""
    config = _config(tmp_path, "--deep-notice", str(DEEP_UPSTREAM))
    with trio.fail_after(TEST_BOUND_S):
        async with open_front(front, config) as connect:
            raw = await connect()
            for n, frame in enumerate([_deep(100_000), _deep(1_000)]):
                reply = await raw.request(frame)
                assert reply["error"]["code"] == -32600, n
            reply = await raw.request(b"\xff\xfe\x00garbage\x80")
            assert reply["id"] is None
            assert reply["error"]["code"] == -32700
            for n in range(2):  # the upstream's deep notification is dropped; the answer arrives
                reply = await raw.request(_echo(100 + n, "after deep"), answer_id=100 + n)
                assert reply["result"]["content"][0]["text"] == "echo: after deep", reply
            assert (await raw.ping(200))["result"] == {}
            if front != "stdio":
                other = await connect()
                reply = await other.request(_echo(1, "second client"), answer_id=1)
                assert reply["result"]["content"][0]["text"] == "echo: second client", reply
                assert (await raw.ping(201))["result"] == {}
