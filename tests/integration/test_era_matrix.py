"""Every pairing of protocol eras through the proxy, with the real SDK client and server.

A client of either era (``Client(mode="legacy")`` for the handshake era,
``Client(mode="2026-07-28")``) reaches an upstream of either era (the fixture pinned
with ``protocol: "legacy"`` / ``"2026-07-28"``) through either front (stdio with the
fast path on, streamable HTTP). In each of the eight cells the client must get what it
would get from the server directly: sampling, elicitation and roots asked of it (as
server-to-client requests or as ``input_required`` rounds, whichever its era uses) with
its answers reaching the tool; a tool the server adds announced to it (as
``notifications/tools/list_changed`` or on its ``subscriptions/listen`` stream); and
progress and log messages of a call.
"""

from __future__ import annotations

import gc
import itertools
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from mcpvisor import open_supervisor, serve_http
from tests.helpers import (
    REAL_IO_BOUND_S,
    SERVERS_DIR,
    Recorder,
    embedded_connection,
    embedded_front,
    everything,
    pipe_transport,
    read_record,
    text_of,
    write_config,
)
from tests.polling import poll_until

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FRONTS: Final = ("stdio", "http")
UPSTREAM_ERAS: Final = ("legacy", "2026-07-28")
CLIENT_MODES: Final = ("legacy", "2026-07-28")


@asynccontextmanager
async def proxied_client(tmp_path: Path, front: str, upstream: str, mode: str, rec: Recorder,
                         *flags: str) -> AsyncIterator[Client]:
    """A real SDK client of era ``mode`` through the proxy's ``front`` to the fixture in era
    ``upstream`` (started with ``flags``)."""
    config = write_config(tmp_path, {"ev": everything(*flags, protocol=upstream)}, namespacing="prefix",
                          fastPath=True)
    kwargs: dict[str, Any] = {"mode": mode, "cache": None, "log_level": "debug", **rec.kwargs()}
    if mode == "legacy":
        kwargs.pop("log_level")  # handshake era: logging/setLevel instead of a per-request opt-in
    if front == "stdio":
        async with embedded_front(config) as (send, receive), \
                Client(pipe_transport(receive, send), **kwargs) as client:
            yield client
    else:
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
                trio.open_nursery() as nursery:
            await sup.wait_ready()  # these tests are about what happens once the server is up
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            async with Client(url, **kwargs) as client:
                yield client
            nursery.cancel_scope.cancel()


MATRIX: Final = [pytest.param(front, upstream, mode, id=f"{front}-up_{upstream}-client_{mode}")
                 for front in FRONTS for upstream in UPSTREAM_ERAS for mode in CLIENT_MODES]


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_sampling_elicitation_and_roots_reach_the_client(tmp_path: Path, front: str, upstream: str,
                                                               mode: str) -> None:
    """Each of the upstream's three kinds of question is asked of the client, and the
    client's answer is what the tool reports."""
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_client(tmp_path, front, upstream, mode, rec) as client:
            await client.list_tools()  # start-up done: on stdio the calls take the fast path
            expected = "2026-07-28" if mode == "2026-07-28" else LATEST_HANDSHAKE_VERSION
            assert client.protocol_version == expected
            assert text_of(await client.call_tool("ev_sample", {"prompt": "q"})) == "sampled: from the client"
            elicited = text_of(await client.call_tool("ev_elicit", {"message": "who?"}))
            assert elicited == 'elicited: accept {"name": "ada"}'
            assert text_of(await client.call_tool("ev_roots", {})) == "file:///workspace"


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_a_tool_the_upstream_adds_is_announced_to_the_client(tmp_path: Path, front: str, upstream: str,
                                                                  mode: str) -> None:
    """The server adds a tool and announces it its own era's way; the client hears of it
    its own era's way and finds the tool listed."""
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_client(tmp_path, front, upstream, mode, rec) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            assert "ev_fresh" not in before
            if mode == "legacy":
                changed = rec.changed
                assert text_of(await client.call_tool("ev_add_tool", {"name": "fresh"})) == "added fresh"
                await changed.wait()
            else:
                async with client.listen(tools_list_changed=True) as events:
                    assert text_of(await client.call_tool("ev_add_tool", {"name": "fresh"})) == "added fresh"
                    async for event in events:
                        if isinstance(event, ToolsListChanged):
                            break
            assert "ev_fresh" in {t.name for t in (await client.list_tools()).tools}


class LogRecorder(Recorder):
    """A `Recorder` that also says when a log message with given data has arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.logged = trio.Event()

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        await super().logging(params)
        self.logged.set()
        self.logged = trio.Event()

    async def wait_for_log(self, data: str) -> None:
        while not any(log.data == data for log in self.logs):
            await self.logged.wait()


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_progress_and_logging_of_a_call_reach_the_client(tmp_path: Path, front: str, upstream: str,
                                                               mode: str) -> None:
    """Progress of a call reaches the caller's callback in order; a log message the tool
    writes reaches the client's logging callback."""
    rec = LogRecorder()
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_client(tmp_path, front, upstream, mode, rec) as client:
            if mode == "legacy":
                await client.set_logging_level("debug")
            result = await client.call_tool("ev_progress", {"steps": 3, "interval": 0.01},
                                            progress_callback=on_progress)
            assert text_of(result) == "done 3"
            assert seen == [(1, 3), (2, 3), (3, 3)]
            assert text_of(await client.call_tool("ev_log", {"level": "warning", "message": "careful"})) \
                == "logged warning"
            await rec.wait_for_log("careful")


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_cancelling_a_call_reaches_the_upstream(tmp_path: Path, front: str, upstream: str,
                                                      mode: str) -> None:
    """A client that gives up on a call makes the upstream stop it (it is told, under the
    proxy's own request id), and the connection keeps serving."""
    record = tmp_path / "ev.jsonl"
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_client(tmp_path, front, upstream, mode, rec, "--record", str(record)) as client:
            await client.list_tools()
            with trio.move_on_after(1.0):
                await client.call_tool("ev_sleep", {"seconds": 30})
            with trio.fail_after(20):
                # The upstream is another process: its record file is the only signal there is.
                await poll_until(lambda: any(e.get("event") == "cancelled" for e in read_record(record)))
            assert text_of(await client.call_tool("ev_echo", {"text": "after"})) == "echo: after"
    calls = [e for e in read_record(record) if e.get("event") == "call" and e.get("name") == "sleep"]
    cancels = [e for e in read_record(record) if e.get("event") == "cancelled"]
    assert calls
    assert cancels[0]["requestId"] == calls[0]["id"]


# --- issue 26: the proxy's server side at 2026-07-28 -----------------------------------------
# The fixture (tests/servers/mrtr.py) asks in rounds with a signed requestState, refuses a
# call whose capability the client did not declare with -32021, and announces changes of
# all three lists and updates of a resource, in either era.

PAIRINGS: Final = [pytest.param(front, upstream, id=f"{front}-up_{upstream}")
                   for front in FRONTS for upstream in UPSTREAM_ERAS]
ALL_CAPABILITIES: Final[dict[str, Any]] = {"sampling": {}, "elicitation": {}, "roots": {}}


def mrtr_config(tmp_path: Path, upstream: str) -> Path:
    entry = {"command": sys.executable, "args": [str(SERVERS_DIR / "mrtr.py")], "protocol": upstream}
    return write_config(tmp_path, {"mr": entry}, namespacing="prefix", fastPath=True)


class RawModern:
    """A 2026-07-28 client that sends exactly the requests a test writes (no automatic
    ``input_required`` rounds) and sees each answer whole, with its HTTP status."""

    def __init__(self, exchange: Any) -> None:
        self._exchange = exchange
        self._ids = itertools.count(1)

    async def request(self, method: str, params: dict[str, Any],
                      capabilities: dict[str, Any] | None = None) -> tuple[dict[str, Any], int | None]:
        meta = {PROTOCOL_VERSION_META_KEY: "2026-07-28",
                CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
                CLIENT_CAPABILITIES_META_KEY: ALL_CAPABILITIES if capabilities is None else capabilities}
        frame = {"jsonrpc": "2.0", "id": next(self._ids), "method": method,
                 "params": {**params, "_meta": meta}}
        answer, status = await self._exchange(frame)
        return answer, status

    async def call(self, name: str, **extra: Any) -> dict[str, Any]:
        answer, _ = await self.request("tools/call", {"name": name, "arguments": {}, **extra})
        return answer


@asynccontextmanager
async def raw_modern(tmp_path: Path, front: str, upstream: str) -> AsyncIterator[RawModern]:
    config = mrtr_config(tmp_path, upstream)
    if front == "stdio":
        async with embedded_front(config) as (send, receive):
            buffered = b""

            async def over_stdio(frame: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
                nonlocal buffered
                await send.send_all(json.dumps(frame).encode() + b"\n")
                while True:
                    while b"\n" not in buffered:
                        buffered += await receive.receive_some(1 << 16)
                    line, buffered = buffered.split(b"\n", 1)
                    message = json.loads(line)
                    if message.get("id") == frame["id"]:
                        return message, None

            yield RawModern(over_stdio)
        return
    async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
            trio.open_nursery() as nursery, httpx.AsyncClient(timeout=REAL_IO_BOUND_S) as http:
        await sup.wait_ready()
        url = await nursery.start(serve_http, sup, "127.0.0.1", 0)

        async def over_http(frame: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
            params = frame["params"]
            headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": frame["method"]}
            name = params.get("name") or params.get("uri")
            if name is not None:
                headers["Mcp-Name"] = name
            response = await http.post(url, json=frame, headers=headers)
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                for line in response.text.splitlines():
                    if line.startswith("data:"):
                        message = json.loads(line.removeprefix("data:"))
                        if message.get("id") == frame["id"]:
                            return message, response.status_code
                raise AssertionError(f"no answer to {frame['id']} in the stream: {response.text!r}")
            return response.json(), response.status_code

        yield RawModern(over_http)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("front", "upstream"), PAIRINGS)
async def test_input_required_rounds_carry_the_servers_request_state(tmp_path: Path, front: str,
                                                                    upstream: str) -> None:
    """A 2026-07-28 client answers a two-round question through the proxy as it would the
    server directly: each round is an ``input_required`` result with its own
    ``requestState`` (the server's, untouched, from a 2026-07-28 upstream; the proxy's,
    bridging a handshake-era one), a tampered state is refused, a retry lacking the
    answer is asked again, and the last round completes with both answers."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with raw_modern(tmp_path, front, upstream) as client:
            first = (await client.call("mr_steps"))["result"]
            assert first["resultType"] == "input_required"
            assert [r["method"] for r in first["inputRequests"].values()] == ["elicitation/create"]
            state1 = first["requestState"]
            if upstream == "2026-07-28":
                assert state1.startswith("r1."), "the server's own state travels as it came"
            (key1,) = first["inputRequests"]

            answered = await client.call("mr_steps", requestState=state1, inputResponses={
                key1: {"action": "accept", "content": {"name": "ada"}}})
            assert "result" in answered, answered
            second = answered["result"]
            assert second["resultType"] == "input_required"
            state2 = second["requestState"]
            assert state2 != state1
            (key2,) = second["inputRequests"]
            assert "colour" in second["inputRequests"][key2]["params"]["message"]

            tampered = await client.call("mr_steps", requestState=state2 + "-TAMPERED", inputResponses={
                key2: {"action": "accept", "content": {"color": "blue"}}})
            assert tampered["error"]["code"] == -32602

            done = (await client.call("mr_steps", requestState=state2, inputResponses={
                key2: {"action": "accept", "content": {"color": "blue"}}}))["result"]
            assert done["resultType"] == "complete"
            assert done["content"][0]["text"] == "ada likes blue"

            # Last: a handshake-era upstream cannot tell which call its question belongs to,
            # so a test keeps one call in flight at a time.
            again = (await client.call("mr_steps", inputResponses={"wrong": {"action": "accept"}}))["result"]
            assert again["resultType"] == "input_required"  # a missing answer is asked again


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_several_questions_and_questions_of_prompts_and_resources_reach_the_client(
    tmp_path: Path, front: str, upstream: str, mode: str,
) -> None:
    """Two questions at once (elicitation and sampling), and the questions of
    ``prompts/get`` and ``resources/read``, are answered by the client of either era and
    the answers reach the server."""
    rec = Recorder()
    kwargs: dict[str, Any] = {"mode": mode, "cache": None, **rec.kwargs()}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_to(tmp_path, front, upstream, kwargs) as client:
            await client.list_tools()
            assert text_of(await client.call_tool("mr_both", {})) == "ada / from the client"
            prompt = await client.get_prompt("mr_intro")
            assert [m.content.text for m in prompt.messages] == ["Hi ada"]  # type: ignore[union-attr]
            read = await client.read_resource("mrtr://note")
            assert [c.text for c in read.contents] == ["note for ada"]  # type: ignore[union-attr]


@asynccontextmanager
async def proxied_to(tmp_path: Path, front: str, upstream: str,
                     kwargs: dict[str, Any]) -> AsyncIterator[Client]:
    """A real SDK client (``kwargs``) through the proxy's ``front`` to the mrtr fixture."""
    config = mrtr_config(tmp_path, upstream)
    if front == "stdio":
        async with embedded_front(config) as (send, receive), \
                Client(pipe_transport(receive, send), **kwargs) as client:
            yield client
        return
    async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
            trio.open_nursery() as nursery:
        await sup.wait_ready()
        url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
        async with Client(url, **kwargs) as client:
            yield client
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("front", "upstream", "mode"), MATRIX)
async def test_a_capability_the_client_did_not_declare_is_refused_with_32021(
    tmp_path: Path, front: str, upstream: str, mode: str,
) -> None:
    """A client that declared no sampling calls a tool that needs it: the call is refused
    with -32021 naming ``sampling``, as the server refuses that client directly (the
    proxy's own capabilities do not stand in for the client's), whichever era each side
    speaks; the connection goes on serving."""
    rec = Recorder()
    kwargs: dict[str, Any] = {"mode": mode, "cache": None, "elicitation_callback": rec.elicitation}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_to(tmp_path, front, upstream, kwargs) as client:
            await client.list_tools()
            with pytest.raises(MCPError) as refused:
                await client.call_tool("mr_needs_sampling", {})
            assert refused.value.error.code == -32021
            assert refused.value.error.data["requiredCapabilities"] == {"sampling": {}}
            prompt = await client.get_prompt("mr_intro")
            assert [m.content.text for m in prompt.messages] == ["Hi ada"]  # type: ignore[union-attr]


@pytest.mark.parametrize("upstream", UPSTREAM_ERAS)
async def test_a_32021_refusal_is_http_400(tmp_path: Path, upstream: str) -> None:
    """On streamable HTTP the refusal of an undeclared capability is a 400, as the
    direct server answers it."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with raw_modern(tmp_path, "http", upstream) as client:
            call = {"name": "mr_needs_sampling", "arguments": {}}
            answer, status = await client.request("tools/call", call, capabilities={"elicitation": {}})
            assert answer["error"]["code"] == -32021
            assert status == 400


@pytest.mark.parametrize(("front", "upstream"), PAIRINGS)
async def test_a_listen_stream_hears_every_list_change_and_resource_update(tmp_path: Path, front: str,
                                                                          upstream: str) -> None:
    """A 2026-07-28 client's ``subscriptions/listen`` stream hears the upstream's tools,
    prompts and resources list changes and the update of the resource it names, from an
    upstream of either era (the SDK client drops events not tagged with its subscription)."""
    kwargs: dict[str, Any] = {"mode": "2026-07-28", "cache": None}
    wanted = {ToolsListChanged, PromptsListChanged, ResourcesListChanged, ResourceUpdated}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxied_to(tmp_path, front, upstream, kwargs) as client:
            await client.list_tools()
            listening = client.listen(tools_list_changed=True, prompts_list_changed=True,
                                      resources_list_changed=True, resource_subscriptions=["mrtr://note"])
            async with listening as events:
                for kind in ("tools", "prompts", "resources"):
                    assert text_of(await client.call_tool("mr_change", {"kind": kind})).startswith("added")
                assert text_of(await client.call_tool("mr_touch", {})) == "touched mrtr://note"
                heard: set[type] = set()
                async for event in events:
                    heard.add(type(event))
                    if isinstance(event, ResourceUpdated):
                        assert event.uri == "mrtr://note"
                    if heard >= wanted:
                        break
            assert "mr_added_1" in {t.name for t in (await client.list_tools()).tools}
            assert "mr_added_1" in {p.name for p in (await client.list_prompts()).prompts}


SAMPLED: Final[dict[str, Any]] = {"role": "assistant", "content": {"type": "text", "text": "hi"},
                                  "model": "m"}


@pytest.mark.parametrize(("front", "upstream"), PAIRINGS)
async def test_questions_sent_together_are_one_round_and_an_unanswered_one_comes_back(
    tmp_path: Path, front: str, upstream: str,
) -> None:
    """The upstream needs two answers at once (a handshake-era one sends both requests
    before either is answered): a 2026-07-28 client gets them in ONE ``input_required``
    round, as from the server directly. A handshake-era request carries no key, so the
    proxy names it ``<kind>-<n>``. A retry that answers one question and adds keys nobody
    asked gets the other question again under the same key (at once, not after the
    client's wait runs out); answering it completes the call with both answers."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with raw_modern(tmp_path, front, upstream) as client:
            await client.request("tools/list", {})
            first = (await client.call("mr_both"))["result"]
            assert first["resultType"] == "input_required"
            asked = {r["method"]: key for key, r in first["inputRequests"].items()}
            assert set(asked) == {"elicitation/create", "sampling/createMessage"}, first
            if upstream == "legacy":
                who, draft = asked["elicitation/create"], asked["sampling/createMessage"]
                assert {who, draft} in ({"elicitation-1", "sampling-2"}, {"elicitation-2", "sampling-1"})
            else:
                assert asked == {"elicitation/create": "who", "sampling/createMessage": "draft"}
            state = {"requestState": first["requestState"]} if "requestState" in first else {}

            name = {"action": "accept", "content": {"name": "ada"}}
            extra = {"unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}}
            partial = await client.call("mr_both", **state, inputResponses={
                asked["elicitation/create"]: name, **extra})
            again = partial["result"]
            assert again["resultType"] == "input_required", partial
            draft_key = asked["sampling/createMessage"]
            assert again["inputRequests"][draft_key]["method"] == "sampling/createMessage"
            state = {"requestState": again["requestState"]} if "requestState" in again else {}

            done = (await client.call("mr_both", **state, inputResponses={
                asked["elicitation/create"]: name, asked["sampling/createMessage"]: SAMPLED, **extra}))
            assert done["result"]["resultType"] == "complete", done
            assert done["result"]["content"][0]["text"] == "ada / hi"


# --- issue 26: what a client is told through an HTTP upstream, and announcements --------------

@asynccontextmanager
async def mrtr_over_http() -> AsyncIterator[str]:
    """The mrtr fixture serving streamable HTTP in its own process; yields its URL and stops
    it (SIGTERM, then SIGKILL) when the block ends."""
    argv = [sys.executable, str(SERVERS_DIR / "mrtr.py"), "--http"]
    proc = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
    seen = bytearray()
    ready = trio.Event()

    async def drain() -> None:  # read stderr to its end, so the server never blocks writing it
        assert proc.stderr is not None
        async for chunk in proc.stderr:
            seen.extend(chunk)
            if b"mrtr ready " in seen:
                ready.set()
        ready.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await ready.wait()
            found = re.search(rb"mrtr ready (\S+)", seen)
            assert found is not None, f"mrtr --http did not start: {seen.decode(errors='replace')}"
            yield found.group(1).decode()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            proc.terminate()
            with trio.move_on_after(REAL_IO_BOUND_S / 4):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@asynccontextmanager
async def clients_through(config: Path,
                          front: str) -> AsyncIterator[Callable[..., AbstractAsyncContextManager[Client]]]:
    """A proxy in this process serving ``config`` on ``front``; yields ``connect(**kwargs)``,
    which opens one more real SDK client (``kwargs``) on it."""
    async with open_supervisor(config, state_dir=config.parent / "state", watch=False) as sup, \
            trio.open_nursery() as nursery:
        await sup.wait_ready()
        url = await nursery.start(serve_http, sup, "127.0.0.1", 0) if front == "http" else None

        @asynccontextmanager
        async def connect(**kwargs: Any) -> AsyncIterator[Client]:
            if url is not None:
                async with Client(url, cache=None, **kwargs) as client:
                    yield client
                return
            async with embedded_connection(sup) as (send, receive, _), \
                    Client(pipe_transport(receive, send), cache=None, **kwargs) as client:
                yield client

        yield connect
        nursery.cancel_scope.cancel()


# The SDK's streamable-HTTP client leaves its last connection to the upstream for the GC to
# close when the proxy stops (the same httpx2 streams pyproject's filters name); in this
# process the GC's close is reported as an unclosed socket (collected at the test's end).
# Nothing stays open afterwards.
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")  # see above
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("front", FRONTS)
def test_an_http_upstream_at_2026_07_28_is_told_the_clients_own_capabilities(tmp_path: Path,
                                                                             front: str) -> None:
    """Through an upstream reached over streamable HTTP and opened at 2026-07-28, the
    server hears each client's own capabilities (not the proxy's): a client of either
    era that declared no sampling is refused with -32021 naming it, one that declared
    sampling is asked and its answer reaches the tool."""

    async def scenario() -> None:
        rec = Recorder()
        with trio.fail_after(REAL_IO_BOUND_S):
            async with mrtr_over_http() as upstream_url:
                entry = {"type": "http", "url": upstream_url, "protocol": "2026-07-28"}
                config = write_config(tmp_path, {"mr": entry}, namespacing="prefix", fastPath=True)
                async with clients_through(config, front) as connect:
                    for mode in CLIENT_MODES:
                        async with connect(mode=mode, elicitation_callback=rec.elicitation) as client:
                            await client.list_tools()
                            with pytest.raises(MCPError) as refused:
                                await client.call_tool("mr_needs_sampling", {})
                            assert refused.value.error.code == -32021, (mode, refused.value.error)
                            assert refused.value.error.data["requiredCapabilities"] == {"sampling": {}}
                        async with connect(mode=mode, sampling_callback=rec.sampling) as client:
                            await client.list_tools()
                            sampled = text_of(await client.call_tool("mr_needs_sampling", {}))
                            assert sampled == "sampled: from the client", mode

    trio.run(scenario)  # its own run: the sockets the GC closes are all reported below
    gc.collect()  # that socket's report lands here, under this test's filter, not in the next test


class ChangeRecorder(Recorder):
    """A `Recorder` that says when a handshake-era client has heard given list_changed
    notifications."""

    def __init__(self) -> None:
        super().__init__()
        self.heard = trio.Event()

    async def handler(self, message: Any) -> None:
        await super().handler(message)
        self.heard.set()
        self.heard = trio.Event()

    async def wait_for(self, kinds: set[type]) -> None:
        while not kinds <= {type(m) for m in self.messages}:
            await self.heard.wait()


@pytest.mark.parametrize(("front", "upstream"), PAIRINGS)
async def test_an_upstreams_announcement_reaches_clients_though_its_list_is_the_same(
    tmp_path: Path, front: str, upstream: str,
) -> None:
    """The server announces its tools and prompts changed but lists the same items (as a
    server that adds and removes one does): a client of either era hears both, as it
    would from the server directly (a 2026-07-28 one on its ``subscriptions/listen``
    stream), though the proxy's own view of the lists did not change."""
    rec = ChangeRecorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with clients_through(mrtr_config(tmp_path, upstream), front) as connect, \
                connect(mode="legacy", message_handler=rec.handler) as legacy, \
                connect(mode="2026-07-28") as modern:
            before = await modern.list_tools()
            await legacy.list_tools()
            async with modern.listen(tools_list_changed=True, prompts_list_changed=True) as events:
                for kind in ("tools", "prompts"):
                    said = text_of(await modern.call_tool("mr_announce", {"kind": kind}))
                    assert said == f"announced {kind}"
                heard: set[type] = set()
                async for event in events:
                    heard.add(type(event))
                    if heard >= {ToolsListChanged, PromptsListChanged}:
                        break
            await rec.wait_for({types.ToolListChangedNotification, types.PromptListChangedNotification})
            assert (await modern.list_tools()).tools == before.tools
