"""OpenTelemetry traces across client → mcpvisor → upstream, seen by a real OTLP receiver.

A real ``mcpvisor serve`` (stdio, then streamable HTTP) exports to `tests.otlp.OtlpReceiver`
on 127.0.0.1 (``OTEL_EXPORTER_OTLP_ENDPOINT``); its upstreams record the ``traceparent``
they were sent. Each test checks what an operator would see in their tracing backend:
the client's context (``_meta`` over stdio, the header over HTTP) is the parent of the
proxy's SERVER span, the upstream call is a CLIENT span under it, the upstream was told
that CLIENT span (so it continues the same trace), the spans carry the MCP attributes,
and a restart shows as an event. The stdio proxy also journals the call's trace id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio

from mcpvisor.actors.wire import CONNECTION_CLOSED
from tests.helpers import PY, REAL_IO_BOUND_S, flaky, read_record, write_config
from tests.integration.test_upstream_http_stamps import recording
from tests.otlp import OtlpReceiver, Span
from tests.polling import poll_until
from tests.security.proxy import HTTP_HEADERS, INIT, STOP_BOUND_S, running_proxy

pytestmark = pytest.mark.slow

TRACE: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN: Final = "00f067aa0ba902b7"
TRACEPARENT: Final = f"00-{TRACE}-{CLIENT_SPAN}-01"
INIT_PARAMS: Final[dict[str, Any]] = dict(INIT["params"])  # type: ignore[call-overload]
VERSION: Final = str(INIT_PARAMS["protocolVersion"])


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    """Tracing on, to ``receiver``, exported within 50 ms of a span ending."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "mcpvisor-under-test",
            "OTEL_TRACES_SAMPLER": "parentbased_always_on"}


async def spans_named(receiver: OtlpReceiver, name: str, kind: str) -> list[Span]:
    await poll_until(lambda: bool(receiver.named(name, kind)))
    return receiver.named(name, kind)


class LineClient:
    """A stdio MCP client speaking raw JSON lines, so ``_meta`` is exactly what the test wrote."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buf = b""

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def answer(self, request_id: int) -> dict[str, Any]:
        """The response to ``request_id`` (notifications and other lines are skipped)."""
        assert self.process.stdout is not None
        while True:
            while b"\n" not in self._buf:
                chunk = await self.process.stdout.receive_some(65536)
                assert chunk, "the proxy closed its stdout"
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return dict(message)

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.answer(request_id)


@asynccontextmanager
async def stdio_proxy(config: Path, env: dict[str, str], *extra: str) -> AsyncIterator[LineClient]:
    argv = [PY, "-m", "mcpvisor", "serve", "--config", str(config), *extra]
    process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.DEVNULL, env={**os.environ, **env})
    try:
        yield LineClient(process)
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()  # EOF: the stdio front drains and the proxy exits
        with trio.move_on_after(STOP_BOUND_S) as scope:
            await process.wait()
        if scope.cancelled_caught:
            process.kill()
            await process.wait()


async def test_stdio_call_continues_the_clients_trace_to_the_upstream_and_a_restart_is_an_event(
        tmp_path: Path) -> None:
    record = tmp_path / "fl.jsonl"
    journal = tmp_path / "calls.db"
    config = write_config(tmp_path, {"fl": flaky("--record", str(record)), "crashy": flaky()})
    with OtlpReceiver().running() as receiver, trio.fail_after(REAL_IO_BOUND_S):
        async with stdio_proxy(config, otel_env(receiver), "--journal", str(journal)) as client:
            init = await client.request(1, "initialize", INIT_PARAMS)
            assert "result" in init, init
            await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            meta = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
            answer = await client.request(2, "tools/call", {"name": "fl_echo", "arguments": {"text": "hi"},
                                                            "_meta": meta})
            assert answer["result"]["content"][0]["text"] == "echo: hi", answer
            # The upstream dies under a call; its actor restarts it; a later call is served again.
            died = await client.request(3, "tools/call", {"name": "crashy_crash", "arguments": {}})
            assert "error" in died or died["result"].get("isError"), died
            again = await client.request(4, "tools/call",
                                         {"name": "crashy_echo", "arguments": {"text": "back"}})
            assert again["result"]["content"][0]["text"] == "echo: back", again

            (server,) = await spans_named(receiver, "tools/call fl_echo", "server")
            assert (server.trace_id, server.parent_span_id) == (TRACE, CLIENT_SPAN)  # the client's span
            assert server.service == "mcpvisor-under-test"
            attrs = server.attributes
            assert attrs["mcp.method.name"] == "tools/call"
            assert attrs["gen_ai.tool.name"] == "fl_echo"
            assert attrs["gen_ai.operation.name"] == "execute_tool"
            assert attrs["jsonrpc.request.id"] == "2"
            assert attrs["mcp.protocol.version"] == VERSION
            assert attrs["network.transport"] == "pipe"
            assert attrs["mcpvisor.server"] == "fl"
            assert "error.type" not in attrs
            (upstream,) = await spans_named(receiver, "tools/call echo", "client")
            assert (upstream.trace_id, upstream.parent_span_id) == (TRACE, server.span_id)
            assert upstream.attributes["mcpvisor.server"] == "fl"
            # The upstream was told the CLIENT span: a traced server there continues the trace.
            (call,) = [r for r in read_record(record) if r["event"] == "call"]
            assert call["traceparent"] == f"00-{TRACE}-{upstream.span_id}-01"

            (crash,) = await spans_named(receiver, "tools/call crashy_crash", "server")
            assert crash.parent_span_id == ""  # no context from the client: a new trace
            assert crash.attributes["error.type"] == str(CONNECTION_CLOSED)  # the code the client got
            assert crash.status_code == 2
            assert "mcpvisor.upstream.died" in [name for name, _ in crash.events]
            await poll_until(lambda: bool(receiver.with_event("mcpvisor.upstream.restart")))
            (restart,) = receiver.with_event("mcpvisor.upstream.restart")
            (event,) = [attrs for name, attrs in restart.events if name == "mcpvisor.upstream.restart"]
            assert event["mcpvisor.server"] == "crashy"
            assert event["restarts"] == 1
            assert event["reason"]
    # The journal (written as the proxy stopped) leads from the row to the trace.
    journal_cmd = [sys.executable, "-m", "mcpvisor", "journal", str(journal), "--calls", "5"]
    listed = await trio.run_process([*journal_cmd, "--format", "json"], capture_stdout=True)
    rows = {(row["server"], row["tool"]): row for row in json.loads(listed.stdout)}
    assert rows["fl", "echo"]["trace_id"] == TRACE
    assert rows["crashy", "crash"]["trace_id"] == crash.trace_id
    table = await trio.run_process(journal_cmd, capture_stdout=True)
    assert TRACE in table.stdout.decode()


async def test_http_header_is_the_parent_and_an_http_upstream_gets_the_context_both_ways(
        tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"
    header_trace = "0af7651916cd43dd8448eb211c80319c"
    header_span = "b7ad6b7169203331"
    with OtlpReceiver().running() as receiver, trio.fail_after(REAL_IO_BOUND_S):
        async with recording(record) as url:
            config = write_config(tmp_path, {"rec": {"type": "http", "url": url, "protocol": "legacy"}},
                                  authToken="t" * 32)
            async with running_proxy(config, "--transport", "http", "--port", "0",
                                     env=otel_env(receiver)) as proxy, httpx2.AsyncClient(timeout=60) as http:
                headers = {**HTTP_HEADERS, "Authorization": "Bearer " + "t" * 32}
                opened = await http.post(proxy.url, json=INIT, headers=headers)
                assert opened.status_code == 200, opened.text
                session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"],
                           "mcp-protocol-version": VERSION}
                await http.post(proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                headers=session)
                call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                        "params": {"name": "rec_lookup", "arguments": {"region": "eu"}}}
                traced = {**session, "traceparent": f"00-{header_trace}-{header_span}-01"}
                answered = await http.post(proxy.url, json=call, headers=traced)
                assert answered.status_code == 200, answered.text
                assert "region" in answered.text, answered.text  # the tool's answer: its arguments
                assert '"error"' not in answered.text, answered.text

                (server,) = await spans_named(receiver, "tools/call rec_lookup", "server")
                assert (server.trace_id, server.parent_span_id) == (header_trace, header_span)
                assert server.attributes["network.transport"] == "tcp"
                assert server.attributes["network.protocol.name"] == "http"
                assert server.attributes["mcp.session.id"] == opened.headers["mcp-session-id"]
                assert server.attributes["mcpvisor.server"] == "rec"
                assert server.attributes["jsonrpc.request.id"] == "7"
                (upstream,) = await spans_named(receiver, "tools/call lookup", "client")
                assert (upstream.trace_id, upstream.parent_span_id) == (header_trace, server.span_id)
    sent = f"00-{header_trace}-{upstream.span_id}-01"
    (post,) = [r for r in read_record(record)
               if r["http"] == "POST" and r["body"].get("method") == "tools/call"]
    assert post["body"]["params"]["_meta"]["traceparent"] == sent  # in _meta ...
    assert post["headers"]["traceparent"] == sent  # ... and as the header an HTTP hop reads


async def test_a_call_over_the_http_fast_path_continues_the_trace_of_its_header(tmp_path: Path) -> None:
    """A ``tools/call`` POST to a stdio upstream is served by the HTTP fast path (it bypasses
    the SDK's middleware): its ``traceparent`` header is still the parent of the SERVER span,
    the span says HTTP and the session, and the upstream is told the CLIENT span."""
    record = tmp_path / "fl.jsonl"
    header_trace = "5bf92f3577b34da6a3ce929d0e0e4737"
    header_span = "a7ad6b7169203332"
    config = write_config(tmp_path, {"fl": flaky("--record", str(record))})
    with OtlpReceiver().running() as receiver, trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0",
                                 env=otel_env(receiver)) as proxy, httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
            assert opened.status_code == 200, opened.text
            sid = opened.headers["mcp-session-id"]
            session = {**HTTP_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": VERSION}
            await http.post(proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers=session)
            call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "fl_echo", "arguments": {"text": "fast"}}}
            traced = {**session, "traceparent": f"00-{header_trace}-{header_span}-01"}
            answered = await http.post(proxy.url, json=call, headers=traced)
            assert answered.status_code == 200, answered.text
            assert answered.headers.get("mcpvisor-path") == "fast"  # not the SDK's path
            assert "echo: fast" in answered.text, answered.text

            (server,) = await spans_named(receiver, "tools/call fl_echo", "server")
            assert (server.trace_id, server.parent_span_id) == (header_trace, header_span)
            assert server.attributes["network.protocol.name"] == "http"
            assert server.attributes["mcp.session.id"] == sid
            (upstream,) = await spans_named(receiver, "tools/call echo", "client")
            assert (upstream.trace_id, upstream.parent_span_id) == (header_trace, server.span_id)
    (sent,) = [r for r in read_record(record) if r["event"] == "call"]
    assert sent["traceparent"] == f"00-{header_trace}-{upstream.span_id}-01"
