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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from mcpvisor import open_supervisor, serve_http
from tests.helpers import (
    REAL_IO_BOUND_S,
    Recorder,
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
