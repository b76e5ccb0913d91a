"""The fast paths' spans leave through an export process, to a real OTLP receiver.

With the OTLP exporter, a fast-path call's spans are made and posted by a process of
its own (`mcpvisor.actors.span_export`). What an operator relies on: every span reaches
the collector with its parentage, attributes and events; switching tracing off (the
proxy stopping) posts what was queued and ends that process; and if the process dies,
the proxy exports the spans itself rather than losing them.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator

import psutil
import pytest

from mcpvisor.actors import fastspans, span_export, telemetry
from mcpvisor.actors.errors import UpstreamDied
from tests.otlp import OtlpReceiver

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver().running() as running:
        telemetry.configure(telemetry.TelemetryConfig(running.url), version="1.2", environ={})
        try:
            yield running
        finally:
            telemetry.shutdown_now()


def export_process() -> psutil.Process:
    assert fastspans._on is not None
    process = fastspans._on.processor.span_exporter.process
    assert process is not None
    return psutil.Process(process.pid)


def calls(n: int, *, died: bool = False) -> list[fastspans.FastTrace]:
    traces = []
    for i in range(n):
        trace = fastspans.FastTrace("tools/call", "fl_echo", "echo", "fl",
                                    meta={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
                                          "tracestate": "vendor=1"},
                                    request_id=i, protocol_version="2025-06-18", toolset=None)
        if died:
            trace.event("mcpvisor.upstream.died", {"mcpvisor.server": "fl", "reason": "exited with status 1"})
        trace.end(UpstreamDied("fl", "exited with status 1") if died else None)
        traces.append(trace)
    return traces


def test_the_export_process_posts_every_span_and_ends_when_tracing_is_switched_off(
        receiver: OtlpReceiver) -> None:
    child = export_process()
    assert child.pid != os.getpid()
    assert child.ppid() == os.getpid()
    calls(200)
    (failed,) = calls(1, died=True)
    telemetry.shutdown_now()  # what the proxy does as it stops: the queue is posted, the process ends
    assert not child.is_running()
    servers = receiver.named("tools/call fl_echo", "server")
    clients = receiver.named("tools/call echo", "client")
    assert len(servers) == len(clients) == 201
    assert {s.trace_id for s in servers} == {CLIENT_TRACE}
    assert {s.parent_span_id for s in servers} == {CLIENT_SPAN}
    assert {c.parent_span_id for c in clients} == {s.span_id for s in servers}
    assert {s.service for s in servers} == {"mcpvisor"}
    (crashed,) = [s for s in servers if s.status_code == 2]
    assert crashed.span_id == format(failed.server_id, "016x")
    assert [name for name, _ in crashed.events] == ["mcpvisor.upstream.died"]
    assert crashed.attributes["error.type"] == telemetry.error_type(UpstreamDied("fl", "x"))
    assert crashed.attributes["jsonrpc.request.id"] == "0"
    assert crashed.attributes["mcpvisor.server"] == "fl"


def test_if_the_export_process_dies_the_proxy_exports_the_spans_itself(
        receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture) -> None:
    child = export_process()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    with caplog.at_level(logging.WARNING, logger="mcpvisor.actors.fastspans"):
        calls(3)
        telemetry._provider.force_flush()
    assert len(receiver.named("tools/call fl_echo", "server")) == 3  # posted by the proxy: none lost
    assert len(receiver.named("tools/call echo", "client")) == 3
    assert any("span export process is gone" in r.getMessage() for r in caplog.records)


def test_if_the_export_process_cannot_start_the_proxy_exports_the_spans_itself(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(span_export.sys, "executable", "/nonexistent/python3")
    with OtlpReceiver().running() as running:
        with caplog.at_level(logging.WARNING, logger="mcpvisor.actors.telemetry"):
            telemetry.configure(telemetry.TelemetryConfig(running.url), environ={})
        try:
            calls(2)
            telemetry._provider.force_flush()
            assert len(running.named("tools/call fl_echo", "server")) == 2
        finally:
            telemetry.shutdown_now()
    assert any("cannot start the span export process" in r.getMessage() for r in caplog.records)
