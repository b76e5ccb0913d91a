"""Hypothesis frames against a real ``mcpvisor serve`` on each front: deep, large and odd.

One proxy per front (stdio on pipes, streamable HTTP and websocket on 127.0.0.1) and one
client; Hypothesis runs in a worker thread and hands each frame to the trio side
(`trio.from_thread.run`), so the proxy and the connection live across examples. After
every frame the proxy must answer a ping on the same connection: a frame that ends the
process, the connection or the reader shows as a failed ping within its bound, and
Hypothesis reports the shrunk frame. A bounded number of examples keeps it CI-sized.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chaos.frames import FRONTS, open_front
from tests.helpers import flaky, write_config

pytestmark = pytest.mark.slow

EXAMPLES: Final = 40
"""Frames per front: a few seconds of loopback round trips."""
TEST_BOUND_S: Final = 240.0

_ids = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def _deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(min_value=0, max_value=5_000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = opener * depth + b"0" + closer * depth
    if draw(st.booleans()):
        return b'{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"x":' + inner + b"}}"
    return inner


@st.composite
def _odd_id(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["ping", "tools/list", "tools/call", "no/such", "notifications/cancelled"]))
    msg: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "1.0", None])), "id": draw(_ids),
                           "method": method}
    if draw(st.booleans()):
        msg["params"] = draw(_json)
    return json.dumps(msg).encode()


@st.composite
def _large(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(min_value=0, max_value=2**20))
    return json.dumps({"jsonrpc": "2.0", "id": "large", "method": "ping",
                       "params": {"pad": "x" * size}}).encode()


_frames = st.one_of(
    _deep(),
    _odd_id(),
    _large(),
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    _json.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b'{"a":"\\ud800"}', b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"\\udfff"}}',
                     b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}', b"[]", b"{}", b"null"]),
)


@pytest.mark.parametrize("front", FRONTS)
async def test_fuzzed_frames_never_stop_the_front_from_answering(tmp_path: Path, front: str) -> None:
    """Whatever one frame holds, the proxy answers the next ping on the same connection."""
    config = write_config(tmp_path, {"fl": flaky()}, exposure="all")
    pings = itertools.count()
    with trio.fail_after(TEST_BOUND_S):
        async with open_front(front, config) as connect:
            raw = await connect()

            async def check(frame: bytes) -> None:
                await raw.send(frame)
                rid = f"fuzz-ping-{next(pings)}"
                pong = await raw.ping(rid)
                assert pong == {"jsonrpc": "2.0", "id": rid, "result": {}}, (frame[:200], pong)

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(_frames)
            def fuzz(frame: bytes) -> None:
                trio.from_thread.run(check, frame)

            await trio.to_thread.run_sync(fuzz)
