"""Spans for the fast paths' calls, at a few microseconds a call: the call keeps what its
spans need, and the SDK's span objects are made later, in the export batch.

Owns:

* `FastTrace`: the SERVER and CLIENT spans of one fast-path ``tools/call`` (stdio and
  HTTP). Starting two OpenTelemetry SDK spans, filling and ending them cost about 55 us
  a call; a `FastTrace` instead draws the ids from the provider's id generator, decides
  sampling as the provider's sampler would, reads the clock twice and, when the call ends,
  hands itself to the `BatchSpanProcessor` as one queued item;
* `expanding`: the exporter's wrapper, which sends those items to the span export process
  (`mcpvisor.actors.span_export`) or, without one, turns each into the two SDK
  `ReadableSpan`\\ s on the processor's thread. The spans are the same as the SDK's would
  be: names, attributes, parentage, status, events, resource and scope; only the two
  spans share their start (and end) time, one reading each;
* `install`: what the fast paths need of the running provider (its id generator, the
  sampler choice of `mcpvisor.actors.spans`, its processor).

The W3C ``traceparent`` the upstream is told is formatted here when the propagators are
the default ones (trace context and baggage) and the client sent a bare ``traceparent``;
a ``tracestate``, a ``baggage`` or other propagators take the SDK's propagator both ways.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Final

import msgspec

from mcpvisor.actors.spans import (
    TRACE_ID_LIMIT,
    TRACE_KEYS,
    SamplerChoice,
    carrier_of,
    current,
    error_message,
    error_type,
    extract_context,
    is_error_result,
    request_attributes,
    request_carrier,
    span_name,
)

logger = logging.getLogger(__name__)

_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""A version-00 ``traceparent`` exactly as the W3C spec writes it; any other form is left to
the SDK's propagator (which also accepts surrounding space and later versions)."""


# --- what the fast path's spans need, set when tracing is switched on --------------------------
class Made(msgspec.Struct, frozen=True):
    """What the SDK spans of a `FastTrace` are made with (in the proxy, or the export process)."""

    resource: Any
    scope: Any
    server_kind: Any
    client_kind: Any


class _On:
    """The pieces of the running provider a `FastTrace` uses (one object: one global read)."""

    __slots__ = ("bound", "client_kind", "ids", "parent_based", "processor", "resource", "scope",
                 "server_kind", "textmap")

    def __init__(self, provider: Any, processor: Any, choice: SamplerChoice, version: str) -> None:
        from opentelemetry import propagate
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanKind

        self.processor = processor
        self.ids = provider.id_generator
        self.resource = provider.resource
        self.scope = InstrumentationScope("mcpvisor", version or None)
        self.parent_based = choice.parent_based
        self.bound = choice.bound
        textmap = propagate.get_global_textmap()
        self.textmap = textmap if set(textmap.fields) == set(TRACE_KEYS) else None
        """The W3C propagators (the default): ``traceparent`` is parsed and formatted here."""
        self.server_kind = SpanKind.SERVER
        self.client_kind = SpanKind.CLIENT


_on: _On | None = None


def install(provider: Any, processor: Any, choice: SamplerChoice, version: str = "") -> None:
    """Tracing is on: fast-path calls record spans for ``processor`` (a `BatchSpanProcessor`
    whose exporter is `expanding`)."""
    global _on
    from opentelemetry.trace import SpanContext, TraceFlags

    # What BatchSpanProcessor.on_end reads to keep an item: a `FastTrace` is queued only
    # when sampled, so every one says so.
    FastTrace.context = SpanContext(1, 1, False, TraceFlags(TraceFlags.SAMPLED))
    _on = _On(provider, processor, choice, version)


def uninstall() -> None:
    global _on
    _on = None


# --- the fast path's two spans --------------------------------------------------------------------
class FastTrace:
    """The SERVER and CLIENT spans of one fast-path call, kept as data until exported.

    No task waits on a fast-path call, so nothing is current while it runs; its `end`
    closes both spans. `current` makes the SERVER span current for a slow-way retry
    (its requests then nest under it, and events of that task land on it).
    """

    __slots__ = ("attributes", "client_id", "end_ns", "ended", "error", "events", "message", "method",
                 "parent", "parent_ctx", "protocol_version", "request_id", "sampled", "server",
                 "server_id", "session_id", "start_ns", "tool", "toolset", "trace_int", "trace_state",
                 "transport", "upstream_tool")

    context: ClassVar[Any] = None
    """Set by `install` (see there)."""

    def __init__(self, method: str, tool: str, upstream_tool: str, server: str, *, meta: Mapping[str, Any],
                 request_id: Any, protocol_version: str | None, toolset: str | None,
                 headers: Mapping[str, str] | None = None, transport: str = "stdio",
                 session_id: str | None = None) -> None:
        self.start_ns = time.time_ns()
        on = _on
        assert on is not None, "FastTrace while tracing is off"
        self.method = method
        self.tool = tool
        self.upstream_tool = upstream_tool
        self.server = server
        self.request_id = request_id
        self.protocol_version = protocol_version
        self.toolset = toolset
        self.transport = transport
        self.session_id = session_id
        self.attributes: dict[str, Any] | None = None
        """Set on the SERVER span while it was current (a slow-way retry's)."""
        self.events: list[tuple[str, dict[str, Any], int]] | None = None
        self.ended = False
        self.error: str | None = None
        self.message: str | None = None
        self.end_ns = 0
        self.parent: tuple[int, int, int] | None = None
        """The client's span: (trace id, span id, trace flags)."""
        self.parent_ctx: Any = None
        """The extracted context, when the SDK's propagator read it (it then writes the carrier too)."""
        self.trace_state: Any = None
        carrier = request_carrier(meta, headers)
        if carrier is not None:
            bare = None
            if on.textmap is not None and len(carrier) == 1:
                bare = _TRACEPARENT.fullmatch(carrier["traceparent"])
            if bare is not None and int(bare[1], 16) and int(bare[2], 16):
                self.parent = (int(bare[1], 16), int(bare[2], 16), int(bare[3], 16))
            else:  # a tracestate or baggage, another form, other propagators: as the SDK reads it
                self._parent_from_sdk(carrier)
        ids = on.ids
        parent = self.parent
        self.trace_int = parent[0] if parent is not None else ids.generate_trace_id()
        self.server_id = ids.generate_span_id()
        self.client_id = ids.generate_span_id()
        if parent is not None and on.parent_based:
            self.sampled = bool(parent[2] & 1)
        else:
            self.sampled = (self.trace_int & TRACE_ID_LIMIT) < on.bound

    def _parent_from_sdk(self, carrier: Mapping[str, str]) -> None:
        from opentelemetry import trace

        context = extract_context(carrier)
        if context is None:
            return
        span_context = trace.get_current_span(context).get_span_context()
        self.parent = (span_context.trace_id, span_context.span_id, int(span_context.trace_flags))
        self.parent_ctx = context
        self.trace_state = span_context.trace_state

    def carrier(self) -> dict[str, str]:
        """The CLIENT span's context, for the upstream request's ``_meta``."""
        if self.parent_ctx is None and _on is not None and _on.textmap is not None:
            return {"traceparent": f"00-{self.trace_int:032x}-{self.client_id:016x}-{int(self.sampled):02x}"}
        from opentelemetry.trace import NonRecordingSpan

        return carrier_of(NonRecordingSpan(self._context(self.client_id)), self.parent_ctx)

    def carrier_raw(self) -> dict[str, msgspec.Raw]:
        """`carrier` as JSON values, ready for a raw ``_meta``."""
        if self.parent_ctx is None and _on is not None and _on.textmap is not None:
            return {"traceparent": msgspec.Raw(b'"00-%032x-%016x-%02x"' % (self.trace_int, self.client_id,
                                                                           int(self.sampled)))}
        return {k: msgspec.Raw(msgspec.json.encode(v)) for k, v in self.carrier().items()}

    def _context(self, span_id: int) -> Any:
        from opentelemetry.trace import SpanContext, TraceFlags

        return SpanContext(self.trace_int, span_id, False, TraceFlags(int(self.sampled)), self.trace_state)

    @property
    def trace_id(self) -> str | None:
        return format(self.trace_int, "032x") if self.sampled else None

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """An event of the SERVER span."""
        if self.sampled and not self.ended:
            if self.events is None:
                self.events = []
            self.events.append((name, dict(attributes), time.time_ns()))

    def set_attribute(self, key: str, value: Any) -> None:
        if self.sampled and not self.ended:
            if self.attributes is None:
                self.attributes = {}
            self.attributes[key] = value

    @contextmanager
    def current(self) -> Iterator[None]:
        """The call's SERVER span as the current one (its slow-way retry's requests nest under it)."""
        with current(_call_span(self), self.parent_ctx):
            yield

    def end(self, error: BaseException | None, result: Any = None) -> None:
        """The call finished (idempotent: a span ends once)."""
        if self.ended:
            return
        self.ended = True
        if not self.sampled:
            return
        self.end_ns = time.time_ns()
        if error is not None:
            self.error = error_type(error)
            self.message = error_message(error)
        elif is_error_result(result):
            self.error = "tool_error"
        on = _on
        if on is not None:
            on.processor.on_end(self)

    def packed(self) -> tuple[Any, ...]:
        """This call's spans as plain values (msgpack: the 128-bit trace id as bytes)."""
        parent = None
        if self.parent is not None:
            parent = (self.parent[0].to_bytes(16, "big"), self.parent[1], self.parent[2])
        state = self.trace_state.to_header() if self.trace_state is not None else None
        return (self.trace_int.to_bytes(16, "big"), self.server_id, self.client_id, parent, state,
                self.start_ns, self.end_ns, self.method, self.tool, self.upstream_tool, self.server,
                None if self.request_id is None else str(self.request_id), self.protocol_version,
                self.toolset, self.transport, self.session_id, self.attributes, self.events, self.error,
                self.message)

    @classmethod
    def unpacked(cls, values: Any) -> FastTrace:
        """A finished call as `packed` gave it (in the export process)."""
        from opentelemetry.trace import TraceState

        self = cls.__new__(cls)
        (trace, self.server_id, self.client_id, parent, state, self.start_ns, self.end_ns, self.method,
         self.tool, self.upstream_tool, self.server, self.request_id, self.protocol_version, self.toolset,
         self.transport, self.session_id, self.attributes, events, self.error, self.message) = values
        self.trace_int = int.from_bytes(trace, "big")
        self.parent = (int.from_bytes(parent[0], "big"), parent[1], parent[2]) if parent is not None else None
        self.trace_state = TraceState.from_header([state]) if state is not None else None
        self.events = [tuple(event) for event in events] if events else None
        self.parent_ctx = None
        self.sampled = self.ended = True
        return self

    def spans(self, on: Made | _On) -> tuple[Any, Any]:
        """The two SDK spans (made on the export thread)."""
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)
        server_context = SpanContext(self.trace_int, self.server_id, False, flags, self.trace_state)
        client_context = SpanContext(self.trace_int, self.client_id, False, flags, self.trace_state)
        parent = None
        if self.parent is not None:
            trace_id, span_id, parent_flags = self.parent
            parent = SpanContext(trace_id, span_id, True, TraceFlags(parent_flags), self.trace_state)
        attrs = request_attributes(self.method, self.tool, request_id=self.request_id,
                                   protocol_version=self.protocol_version, transport=self.transport,
                                   session_id=self.session_id, toolset=self.toolset)
        attrs["mcpvisor.server"] = self.server
        if self.attributes:
            attrs.update(self.attributes)
        up_attrs = request_attributes(self.method, self.upstream_tool)
        up_attrs["mcpvisor.server"] = self.server
        status = Status(StatusCode.UNSET)
        if self.error is not None:
            attrs["error.type"] = up_attrs["error.type"] = self.error
            status = Status(StatusCode.ERROR, self.message)
        events: Sequence[Any] = ()
        if self.events:
            events = tuple(Event(name, event_attrs, at) for name, event_attrs, at in self.events)
        common = {"resource": on.resource, "instrumentation_scope": on.scope, "status": status,
                  "start_time": self.start_ns, "end_time": self.end_ns}
        server = ReadableSpan(span_name(self.method, self.tool), server_context, parent, attributes=attrs,
                              events=events, kind=on.server_kind, **common)
        client = ReadableSpan(span_name(self.method, self.upstream_tool), client_context, server_context,
                              attributes=up_attrs, kind=on.client_kind, **common)
        return server, client


_span_class: Any = None


def _call_span(trace: FastTrace) -> Any:
    """An OpenTelemetry API span standing for ``trace``'s SERVER span: what is set on it
    while it is current goes into ``trace``."""
    global _span_class
    if _span_class is None:
        from opentelemetry import trace as api

        class CallSpan(api.Span):
            def __init__(self, of: FastTrace) -> None:
                self._of = of
                self._context = of._context(of.server_id)

            def get_span_context(self) -> Any:
                return self._context

            def is_recording(self) -> bool:
                return self._of.sampled and not self._of.ended

            def set_attribute(self, key: str, value: Any) -> None:
                self._of.set_attribute(key, value)

            def set_attributes(self, attributes: Mapping[str, Any]) -> None:
                for key, value in attributes.items():
                    self._of.set_attribute(key, value)

            def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
                self._of.event(name, attributes or {})

            def update_name(self, name: str) -> None:
                pass  # the call's span keeps its convention name

            def set_status(self, status: Any, description: str | None = None) -> None:
                pass  # the call's outcome sets it when the call ends

            def record_exception(self, exception: BaseException, attributes: Any = None,
                                 timestamp: int | None = None, escaped: bool = False) -> None:
                self._of.event("exception", {"exception.type": type(exception).__qualname__})

            def end(self, end_time: int | None = None) -> None:
                pass  # `FastTrace.end` ends it, with the call

        _span_class = CallSpan
    return _span_class(trace)


def expanding(exporter: Any, process: Any = None) -> Any:
    """``exporter`` behind a wrapper that turns each queued `FastTrace` into its two SDK
    spans as a batch is exported (on the batch processor's thread, off the call path);
    with ``process`` (`mcpvisor.actors.span_export.ExportProcess`) they are sent there to be
    made and exported instead, and made here only if it is gone."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Expanding(SpanExporter):
        def __init__(self, inner: Any, process: Any) -> None:
            self.inner = inner
            self.process = process

        def export(self, spans: Sequence[Any]) -> Any:
            calls = [item for item in spans if type(item) is FastTrace]
            out = [item for item in spans if type(item) is not FastTrace]
            if calls and self.process is not None:
                try:
                    self.process.send(calls)
                    calls = []
                except OSError as exc:
                    logger.warning("the span export process is gone (%s); exporting from the proxy", exc)
                    gone, self.process = self.process, None
                    gone.close()
            on = _on
            if on is not None:
                for call in calls:
                    out.extend(call.spans(on))
            return self.inner.export(out) if out else SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            if self.process is not None:
                self.process.close()
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.inner.force_flush(timeout_millis))

    return Expanding(exporter, process)


def stable_resource(resource: Any) -> Any:
    """``resource`` with its hash computed once: the OTLP encoder groups every span by its
    resource, and the SDK's `Resource` hashes its attributes as JSON each time (a few
    microseconds a span)."""
    from opentelemetry.sdk.resources import Resource

    class StableResource(Resource):
        _hash: int | None = None

        def __hash__(self) -> int:
            value = self._hash
            if value is None:
                value = self._hash = super().__hash__()
            return value

        def __eq__(self, other: object) -> bool:
            return self is other or super().__eq__(other)

    return StableResource(resource.attributes, resource.schema_url)
