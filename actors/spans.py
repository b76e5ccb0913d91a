"""What every traced path shares: span names and attributes, outcomes, the W3C trace
context, and the sampler choice.

Owns:

* the span vocabulary of the OpenTelemetry semantic conventions for MCP (`span_name`,
  `request_attributes`, `error_type`, `is_error_result`);
* the W3C context of a request (`parent_context`, `carrier_of`, `TRACE_KEYS`) and the
  current span of a task (`current`);
* `SamplerChoice`: the sampler the provider is built with (``settings.telemetry.sampleRatio``
  or ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, read as the SDK reads them),
  so the fast paths' decision (`mcpvisor.actors.fastspans`) and the SDK's sampler are
  made from one choice.

The OpenTelemetry packages are imported inside the functions: with tracing off none of
them is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import msgspec
import trio

logger = logging.getLogger(__name__)

TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")
"""The W3C trace-context keys a request's ``_meta`` (and an HTTP request's headers) carry."""

TOOL_METHODS: Final = frozenset({"tools/call"})

TRACE_ID_LIMIT: Final = (1 << 64) - 1
"""The low 64 bits of a trace id, which a ratio sampler compares (as the SDK's does)."""

SAMPLERS: Final = ("always_on", "always_off", "parentbased_always_on", "parentbased_always_off",
                   "traceidratio", "parentbased_traceidratio")
"""``OTEL_TRACES_SAMPLER`` values the SDK knows (anything else: it warns and uses the default)."""

# --- the span vocabulary ------------------------------------------------------------------
def span_name(method: str, target: str | None) -> str:
    return f"{method} {target}" if target else method


def request_attributes(method: str, target: str | None, *, request_id: Any = None,
                       protocol_version: str | None = None, session_id: str | None = None,
                       transport: str | None = None, toolset: str | None = None) -> dict[str, Any]:
    """The semantic-convention attributes of a request (no argument or result travels here)."""
    attrs: dict[str, Any] = {"mcp.method.name": method}
    if method in TOOL_METHODS:
        attrs["gen_ai.operation.name"] = "execute_tool"
        if target:
            attrs["gen_ai.tool.name"] = target
    elif method == "prompts/get" and target:
        attrs["gen_ai.prompt.name"] = target
    if request_id is not None:
        attrs["jsonrpc.request.id"] = str(request_id)
    if protocol_version:
        attrs["mcp.protocol.version"] = protocol_version
    if session_id:
        attrs["mcp.session.id"] = session_id
    if transport == "http":
        attrs["network.transport"] = "tcp"
        attrs["network.protocol.name"] = "http"
    elif transport == "ws":
        attrs["network.transport"] = "tcp"
        attrs["network.protocol.name"] = "websocket"
    elif transport == "stdio":
        attrs["network.transport"] = "pipe"
    if toolset:
        attrs["mcpvisor.toolset"] = toolset
    return attrs


def error_type(error: BaseException) -> str:
    """``error.type``: the JSON-RPC code the client is answered with (as the conventions
    say for an error answer), ``cancelled``, else the exception's type. Why the code came
    (the upstream died, a timeout) is the span's status message and events."""
    code = getattr(error, "code", None)
    if code is None:  # the SDK's MCPError keeps it on .error
        code = getattr(getattr(error, "error", None), "code", None)
    if isinstance(error, trio.Cancelled) or type(error).__name__ == "CancelledByClient":
        return "cancelled"
    if isinstance(code, int):
        return str(code)
    return type(error).__qualname__


def error_message(error: BaseException) -> str:
    message = getattr(error, "message", None)
    if message is None:
        message = getattr(getattr(error, "error", None), "message", None)
    return str(message if message is not None else error)[:300]


def is_error_result(result: Any) -> bool:
    """Whether a tool's result says ``"isError": true`` (a dict, or the fast path's raw JSON)."""
    kind = type(result)
    if kind is msgspec.Raw or kind is bytes or isinstance(result, bytearray | memoryview):
        data = bytes(result)
        at = data.find(b'"isError"')
        return at >= 0 and data.find(b"true", at + 10, at + 16) >= 0
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return False


def parent_context(meta: Any, headers: Any = None) -> Any:
    """The trace context a request names: its ``_meta`` keys, else its HTTP headers (None: a root)."""
    carrier = request_carrier(meta, headers)
    return extract_context(carrier) if carrier is not None else None


def request_carrier(meta: Any, headers: Any) -> dict[str, str] | None:
    """The W3C keys a request carries: its ``_meta``'s, else its headers' (None: no ``traceparent``)."""
    carrier: dict[str, str] = {}
    if isinstance(meta, Mapping):
        carrier = {k: v for k in TRACE_KEYS if isinstance(v := meta.get(k), str)}
    if "traceparent" not in carrier and headers is not None:
        carrier = {k: v for k in TRACE_KEYS if isinstance(v := headers.get(k), str)}
    return carrier if "traceparent" in carrier else None


def extract_context(carrier: Mapping[str, str]) -> Any:
    """The context the propagators read from ``carrier`` (None: no valid span context in it)."""
    from opentelemetry import propagate, trace

    try:
        context = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def carrier_of(span: Any, parent: Any = None) -> dict[str, str]:
    """``span``'s context as the W3C keys (``traceparent``, ``tracestate``, ``baggage``)."""
    from opentelemetry import propagate, trace

    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span, parent))
    return carrier


def trace_id_of(span: Any) -> str | None:
    """The 32-hex trace id of ``span`` (None when it is not sampled or not valid)."""
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid and ctx.trace_flags.sampled else None


@contextmanager
def current(span: Any, parent: Any = None) -> Iterator[None]:
    """``span`` as the current span of this task for the block."""
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span, parent))
    try:
        yield
    finally:
        context.detach(token)


# --- sampling ---------------------------------------------------------------------------------
class SamplerChoice(msgspec.Struct, frozen=True):
    """The provider's sampler: whether a parent's decision is followed, and the ratio of
    new traces sampled (1.0: every one, 0.0: none)."""

    name: str
    rate: float

    @property
    def parent_based(self) -> bool:
        return self.name.startswith("parentbased_")

    @property
    def bound(self) -> int:
        """A trace whose low 64 bits are below this is sampled (the SDK's ratio sampler's rule)."""
        if self.name.endswith("always_on"):
            return TRACE_ID_LIMIT + 1
        if self.name.endswith("always_off"):
            return 0
        return round(self.rate * (TRACE_ID_LIMIT + 1))

    def sampler(self) -> Any:
        """The SDK sampler of this choice (the one the provider is given)."""
        from opentelemetry.sdk.trace import sampling

        root: Any
        if self.name.endswith("always_on"):
            root = sampling.ALWAYS_ON
        elif self.name.endswith("always_off"):
            root = sampling.ALWAYS_OFF
        else:
            root = sampling.TraceIdRatioBased(self.rate)
        return sampling.ParentBased(root) if self.parent_based else root


def sampler_choice(sample_ratio: float | None, environ: Mapping[str, str]) -> SamplerChoice:
    """``settings.telemetry.sampleRatio`` (a parent's decision is followed), else
    ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG`` as the SDK reads them: an
    unknown name is the default, ``parentbased_always_on``; a ratio that is not a number
    from 0 to 1 is 1.0."""
    if sample_ratio is not None:
        return SamplerChoice("parentbased_traceidratio", sample_ratio)
    name = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").lower()
    if name not in SAMPLERS:
        logger.warning("OTEL_TRACES_SAMPLER: unknown sampler %r; using parentbased_always_on", name)
        name = "parentbased_always_on"
    rate = 1.0
    if name.endswith("traceidratio"):
        try:
            rate = float(environ.get("OTEL_TRACES_SAMPLER_ARG", ""))
        except ValueError:
            rate = 1.0
        if not 0.0 <= rate <= 1.0:
            rate = 1.0
    return SamplerChoice(name, rate)
