"""The fast paths' spans (`mcpvisor.actors.fastspans`) are the spans the SDK would have made.

A fast-path call keeps its SERVER and CLIENT spans as data and the export batch makes
them SDK spans. What a tracing backend shows must not change for it: the client's
context is the SERVER span's parent, the CLIENT span is its child, the upstream is told
the CLIENT span (with the client's tracestate and baggage), attributes and status are
the conventions', the configured sampler decides (a parent's "not sampled" included),
and what a slow-way retry does under the call lands in the same trace. Each test runs
the real provider, batch processor and exporter wrapper, with the SDK's in-memory
exporter in place of OTLP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind, StatusCode

from mcpvisor.actors import fastspans, telemetry
from mcpvisor.actors.errors import UpstreamDied

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def traced(environ: dict[str, str] | None = None,
           ratio: float | None = None) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.configure(telemetry.TelemetryConfig("http://127.0.0.1:9", sample_ratio=ratio),
                        version="9.9", exporter=exporter, environ=environ or {})
    try:
        yield exporter
    finally:
        telemetry.shutdown_now()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield from traced()


def flushed(exporter: InMemorySpanExporter) -> dict[str, Any]:
    telemetry._provider.force_flush()
    return {span.name: span for span in exporter.get_finished_spans()}


def call(meta: dict[str, str] | None = None, **kwargs: Any) -> fastspans.FastTrace:
    return fastspans.FastTrace("tools/call", "fl_echo", "echo", "fl", meta=meta or {}, request_id=7,
                               protocol_version="2025-06-18", toolset="research", **kwargs)


def test_the_clients_span_is_the_parent_and_the_upstream_is_told_the_client_span(
        exporter: InMemorySpanExporter) -> None:
    trace_ = call({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    told = trace_.carrier_raw()
    trace_.end(None, msgspec.Raw(b'{"content":[]}'))
    spans = flushed(exporter)
    server, client = spans["tools/call fl_echo"], spans["tools/call echo"]
    assert server.kind == SpanKind.SERVER
    assert client.kind == SpanKind.CLIENT
    assert format(server.context.trace_id, "032x") == CLIENT_TRACE == trace_.trace_id
    assert format(server.parent.span_id, "016x") == CLIENT_SPAN
    assert server.parent.is_remote
    assert client.parent.span_id == server.context.span_id
    assert client.context.trace_id == server.context.trace_id
    assert msgspec.json.decode(told["traceparent"]) == f"00-{CLIENT_TRACE}-{client.context.span_id:016x}-01"
    assert dict(server.attributes) == {
        "mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "fl_echo", "jsonrpc.request.id": "7", "mcp.protocol.version": "2025-06-18",
        "network.transport": "pipe", "mcpvisor.toolset": "research", "mcpvisor.server": "fl"}
    assert dict(client.attributes) == {
        "mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo", "mcpvisor.server": "fl"}
    assert server.status.status_code == StatusCode.UNSET
    assert server.resource.attributes["service.name"] == "mcpvisor"
    assert server.resource.attributes["service.version"] == "9.9"
    assert server.instrumentation_scope.name == "mcpvisor"
    assert server.start_time <= server.end_time


def test_a_call_without_context_starts_a_trace_and_a_tool_error_fails_both_spans(
        exporter: InMemorySpanExporter) -> None:
    trace_ = call(headers=None, transport="http", session_id="s-1")
    trace_.end(None, msgspec.Raw(b'{"content":[],"isError": true}'))
    spans = flushed(exporter)
    server, client = spans["tools/call fl_echo"], spans["tools/call echo"]
    assert server.parent is None
    assert server.attributes["network.protocol.name"] == "http"
    assert server.attributes["mcp.session.id"] == "s-1"
    for span in (server, client):
        assert span.attributes["error.type"] == "tool_error"
        assert span.status.status_code == StatusCode.ERROR


def test_an_http_header_is_the_parent_where_meta_names_none(exporter: InMemorySpanExporter) -> None:
    trace_ = call({}, headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}, transport="http")
    trace_.end(None)
    assert format(flushed(exporter)["tools/call fl_echo"].parent.span_id, "016x") == CLIENT_SPAN


def test_tracestate_and_baggage_reach_the_upstream_as_the_sdk_propagator_writes_them(
        exporter: InMemorySpanExporter) -> None:
    meta = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "vendor=1,other=x",
            "baggage": "user=alice"}
    trace_ = call(meta)
    told = {k: msgspec.json.decode(v) for k, v in trace_.carrier_raw().items()}
    trace_.end(None)
    client = flushed(exporter)["tools/call echo"]
    assert told == {"traceparent": f"00-{CLIENT_TRACE}-{client.context.span_id:016x}-01",
                    "tracestate": "vendor=1,other=x", "baggage": "user=alice"}
    assert client.context.trace_state.to_header() == "vendor=1,other=x"


def test_an_unsampled_parent_is_followed_nothing_is_exported_and_the_upstream_hears_so(
        exporter: InMemorySpanExporter) -> None:
    trace_ = call({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"})
    told = msgspec.json.decode(trace_.carrier_raw()["traceparent"])
    trace_.end(None)
    assert told.startswith(f"00-{CLIENT_TRACE}-")
    assert told.endswith("-00")
    assert trace_.trace_id is None  # the journal names no trace that was not recorded
    assert flushed(exporter) == {}


@pytest.mark.parametrize(("environ", "ratio"), [
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.3"}, None),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, None),
    ({"OTEL_TRACES_SAMPLER": "always_off"}, None),
    ({"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": "not a number"}, None),
    ({}, 0.2),
])
def test_the_fast_decision_is_the_configured_samplers(environ: dict[str, str], ratio: float | None) -> None:
    for _ in traced(environ, ratio):
        sampler = telemetry._provider.sampler
        for parent_flags in (None, "00", "01"):
            for i in range(200):
                # Trace ids spread over the whole range, as a ratio sampler compares their low bits.
                spread = hashlib.sha256(str(i).encode()).hexdigest()[:32]
                meta = {"traceparent": f"00-{spread}-{CLIENT_SPAN}-{parent_flags}"} if parent_flags else {}
                trace_ = call(meta)
                parent = telemetry.parent_context(meta)
                sdk = sampler.should_sample(parent, trace_.trace_int, "tools/call fl_echo", SpanKind.SERVER)
                assert trace_.sampled == (sdk.decision == Decision.RECORD_AND_SAMPLE), (environ, meta)
                trace_.end(None)


def test_a_slow_way_retry_nests_under_the_call_and_its_events_land_on_it(
        exporter: InMemorySpanExporter) -> None:
    trace_ = call({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    trace_.event("mcpvisor.upstream.died", {"mcpvisor.server": "fl", "reason": "exited with status 1"})
    with trace_.current():
        retry = telemetry.tracer.start_span("tools/call echo", kind=SpanKind.CLIENT)
        retry.end()
        telemetry.lifecycle("mcpvisor.upstream.retry", "fl", method="tools/call")
        assert telemetry.current_trace_id() == CLIENT_TRACE
    trace_.end(UpstreamDied("fl", "exited with status 1"))
    trace_.end(None)  # a span ends once
    telemetry._provider.force_flush()
    spans: list[Any] = list(exporter.get_finished_spans())
    (server,) = [s for s in spans if s.kind == SpanKind.SERVER]
    assert [e.name for e in server.events] == ["mcpvisor.upstream.died", "mcpvisor.upstream.retry"]
    assert server.status.status_code == StatusCode.ERROR
    assert server.attributes["error.type"] == telemetry.error_type(UpstreamDied("fl", "x"))
    retried = [s for s in spans if s.kind == SpanKind.CLIENT and s.parent.span_id == server.context.span_id]
    assert len(retried) == 2  # the fast call's own CLIENT span and the retry's
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing left current
