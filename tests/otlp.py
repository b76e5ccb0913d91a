"""A real OTLP/HTTP trace receiver on 127.0.0.1, for the tracing tests.

The OpenTelemetry Collector is neither a Debian package nor a PyPI one here, so this is
the part of it the tests need: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (what ``opentelemetry-exporter-otlp-proto-http`` sends),
decoded with ``opentelemetry-proto`` into plain `Span` records. It runs on its own thread
(the exporter posts from the proxy's process); a test looks at `OtlpReceiver.spans` with
`tests.polling.poll_until`, since another process's export announces nothing here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SPAN_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    service: str | None = None
    status_code: int = 0
    """0 unset, 1 ok, 2 error."""


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which is not None else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = _attrs(resource_spans.resource.attributes).get("service.name")
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(Span(
                    name=s.name, kind=SPAN_KINDS.get(s.kind, str(s.kind)), trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                    attributes=_attrs(s.attributes),
                    events=[(e.name, _attrs(e.attributes)) for e in s.events],
                    service=service, status_code=s.status.code,
                ))
    return spans


class OtlpReceiver:
    """Collects the spans posted to it; `url` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver._lock:
                    receiver.paths.append(self.path)
                    if self.path == "/v1/traces":
                        receiver.spans.extend(decode(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    def named(self, name: str, kind: str | None = None) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name == name and (kind is None or s.kind == kind)]

    def in_trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def with_event(self, event: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if any(name == event for name, _ in s.events)]

    @contextmanager
    def running(self) -> Iterator[OtlpReceiver]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
