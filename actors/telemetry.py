"""OpenTelemetry traces of the proxy: client → mcpvisor → upstream, in one trace.

Owns:

* `TelemetryConfig` / `config_from`: whether tracing is on and where spans go, from the
  standard ``OTEL_*`` variables and ``settings.telemetry`` (off unless one names an
  endpoint; a variable that is set wins over the file);
* `configure` / `shutdown`: the tracer provider, its batch processor and the OTLP
  exporter (``http/protobuf`` or ``grpc``), imported only here and only when tracing is
  on, so a proxy without tracing never loads the OpenTelemetry SDK;
* the hooks the call paths call. Each caller first checks the one module attribute
  `tracer` (None: off), so a call pays that check and nothing else while tracing is off:

  - `SdkMiddleware`: one SERVER span per request the SDK front handles (stdio slow path,
    streamable HTTP, websocket), its parent the request's ``params._meta`` trace context
    (``traceparent``, ``tracestate``, ``baggage``) or, on HTTP, the ``traceparent`` header;
  - `traced_request`: one CLIENT span per request sent upstream, the child of the current
    span, its context injected into the request's ``_meta`` (and, to HTTP upstreams, into
    the headers: `inject_headers`), so a traced upstream continues the trace;
  - `FastTrace` (`mcpvisor.actors.fastspans`): both spans of a fast-path call (stdio and
    HTTP), which no task waits on, kept as data until the export batch;
  - `api_span`: the embedding API's call (``Supervisor.call_tool``);
  - `lifecycle`: restarts, breaker trips, equips and lazy loads, as an event of the span
    they happen under, or a short span of their own.

Span names and attributes follow the OpenTelemetry semantic conventions for MCP: a span
is named ``{mcp.method.name} {target}`` (the tool or prompt), and carries
``mcp.method.name``, ``gen_ai.tool.name`` / ``gen_ai.prompt.name``, ``gen_ai.operation.name``,
``mcp.protocol.version``, ``mcp.session.id``, ``jsonrpc.request.id``, ``network.transport``
and, on failure, ``error.type``; plus ours: ``mcpvisor.server`` (the upstream that served
it) and ``mcpvisor.toolset`` (the toolset the client sees through). No argument, result,
header value or token is ever put on a span.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final

import msgspec
import trio

from mcpvisor.actors import fastspans, span_export
from mcpvisor.actors.core.vocabulary import OTLP_PROTOCOLS
from mcpvisor.actors.errors import UpstreamDied
from mcpvisor.actors.spans import (
    TRACE_KEYS,
    carrier_of,
    error_type,
    parent_context,
    request_attributes,
    sampler_choice,
    span_name,
    trace_id_of,
)
from mcpvisor.actors.spans import current as _current
from mcpvisor.actors.spans import error_message as _message
from mcpvisor.actors.spans import is_error_result as _is_error_result

logger = logging.getLogger(__name__)

tracer: Any = None
"""The tracer while tracing is on; None (the default) is off. Every hook's caller checks
this one attribute before anything else."""

_provider: Any = None

PROTOCOLS: Final = OTLP_PROTOCOLS
"""The OTLP protocols the exporter speaks (``OTEL_EXPORTER_OTLP_PROTOCOL``)."""

DEFAULT_SERVICE: Final = "mcpvisor"

INSTALL_HINT: Final = "pip install 'mcpvisor[otel]'"
SHUTDOWN_S: Final = 3.0
"""Bound on flushing the spans still queued when the proxy stops (an unreachable collector
must not hold the exit)."""



class TelemetryError(ValueError):
    """Tracing is configured in a way that cannot work (the message says which setting)."""


class TelemetryConfig(msgspec.Struct, frozen=True):
    """Where spans go. ``endpoint`` None: the exporter reads its ``OTEL_EXPORTER_OTLP_*`` variables."""

    endpoint: str | None
    protocol: str = "http/protobuf"
    service_name: str = DEFAULT_SERVICE
    sample_ratio: float | None = None
    """None: the SDK's sampler from ``OTEL_TRACES_SAMPLER`` (default: parent-based, always on)."""
    source: str = "environment"
    """Where tracing was switched on (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``settings.telemetry``): for errors."""


def config_from(environ: Mapping[str, str] | None = None, *, endpoint: str | None = None,
                protocol: str | None = None, service_name: str | None = None,
                sample_ratio: float | None = None, enabled: bool = True) -> TelemetryConfig | None:
    """Whether tracing is on and how, from the ``OTEL_*`` variables and ``settings.telemetry``.

    Off (None) unless an endpoint is named, by ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``settings.telemetry.endpoint``; off also when
    ``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none`` or ``enabled`` is False.
    A variable that is set wins over the file's value.

    Raises:
        TelemetryError: an unknown protocol (named with where it came from).
    """
    env = os.environ if environ is None else environ
    if not enabled or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    env_endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not env_endpoint and not endpoint:
        return None
    source = "OTEL_EXPORTER_OTLP_ENDPOINT" if env_endpoint else "settings.telemetry"
    env_protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    chosen = (env_protocol or protocol or "http/protobuf").strip()
    if chosen not in PROTOCOLS:
        where = "OTEL_EXPORTER_OTLP_PROTOCOL" if env_protocol else 'settings.telemetry field "protocol"'
        raise TelemetryError(f"{where}: unknown OTLP protocol {chosen!r} "
                             f"(choose one of {', '.join(PROTOCOLS)})")
    service = env.get("OTEL_SERVICE_NAME") or service_name or DEFAULT_SERVICE
    return TelemetryConfig(None if env_endpoint else endpoint, chosen, service, sample_ratio, source)


def configure(config: TelemetryConfig | None, *, version: str = "", exporter: Any = None,
              environ: Mapping[str, str] | None = None) -> None:
    """Switch tracing on as ``config`` says (None: leave it off). Imports the SDK and exporter.

    The provider is the proxy's own, not the process-wide one: an embedding program's
    global provider is left alone, and the SDK's own client spans stay off (ours replace them).
    Its sampler is built here from `mcpvisor.actors.spans.sampler_choice` (``settings.telemetry.sampleRatio``,
    else ``OTEL_TRACES_SAMPLER`` from ``environ``, the process's by default), the very choice
    the fast paths decide by. ``exporter``: a span exporter to use instead of OTLP's (tests).

    Raises:
        TelemetryError: the exporter ``config`` names is not installed (says how to install it).
    """
    global tracer, _provider
    if config is None:
        return
    grpc = config.protocol == "grpc"
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        own_exporter = exporter is None
        if own_exporter:
            exporter = span_export.otlp_exporter(config.endpoint, config.protocol)
    except ImportError as exc:
        package = f"opentelemetry-exporter-otlp-proto-{'grpc' if grpc else 'http'}"
        raise TelemetryError(
            f"tracing is switched on by {config.source} (protocol {config.protocol}), but "
            f"{exc.name or package} is not installed: {INSTALL_HINT} (or pip install {package})") from None
    choice = sampler_choice(config.sample_ratio, os.environ if environ is None else environ)
    attributes = {"service.name": config.service_name}
    if version:
        attributes["service.version"] = version
    resource = fastspans.stable_resource(Resource.create(attributes))
    provider = TracerProvider(resource=resource, sampler=choice.sampler())
    # The fast paths queue their calls' spans as data. With the OTLP exporter they are made
    # and exported by a process of its own (`mcpvisor.actors.span_export`: encoding them is
    # most of their cost); otherwise the exporter's wrapper makes them on the processor's thread.
    process = None
    if own_exporter:
        try:
            process = span_export.ExportProcess(config.endpoint, config.protocol, resource,
                                                InstrumentationScope("mcpvisor", version or None))
        except OSError as exc:
            logger.warning("cannot start the span export process (%s); the proxy exports its spans", exc)
    processor = BatchSpanProcessor(fastspans.expanding(exporter, process))
    provider.add_span_processor(processor)
    fastspans.install(provider, processor, choice, version)
    _provider = provider
    tracer = provider.get_tracer("mcpvisor", version or None)
    logger.info("tracing on: spans to %s (%s), service %s", config.source, config.protocol,
                config.service_name)


def shutdown_now() -> None:
    """Flush what is queued and switch tracing off (blocking: `shutdown` bounds it)."""
    global tracer, _provider
    provider, _provider, tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()  # the fast paths' queued spans are made on the way out: uninstall after
        fastspans.uninstall()


async def shutdown() -> None:
    """Flush the spans still queued and switch tracing off, bounded by `SHUTDOWN_S`."""
    if _provider is None:
        return
    with trio.move_on_after(SHUTDOWN_S, shield=True):
        await trio.to_thread.run_sync(shutdown_now, abandon_on_cancel=True)


@asynccontextmanager
async def tracing(config: TelemetryConfig | None, *, version: str = "") -> AsyncIterator[None]:
    """Tracing on as ``config`` says for the block (nothing when None, or when it is on
    already: the first to switch it on flushes and switches it off).

    Raises:
        TelemetryError: as `configure` does, before the block.
    """
    if config is None or tracer is not None:
        yield
        return
    configure(config, version=version)
    try:
        yield
    finally:
        await shutdown()


# --- spans -------------------------------------------------------------------------------
def finish(span: Any, error: BaseException | None = None, result: Any = None) -> None:
    """End ``span`` with its outcome: ``error.type`` and an error status for an error
    answer or a tool result with ``isError`` (a tool's failure is an answer, but a failure)."""
    from opentelemetry.trace import StatusCode

    if error is not None:
        span.set_attribute("error.type", error_type(error))
        span.set_status(StatusCode.ERROR, _message(error))
    elif _is_error_result(result):
        span.set_attribute("error.type", "tool_error")
        span.set_status(StatusCode.ERROR)
    span.end()


def current_trace_id() -> str | None:
    """The trace id of the span current in this task (None: tracing off or no span)."""
    if tracer is None:
        return None
    from opentelemetry import trace

    return trace_id_of(trace.get_current_span())


# --- the SDK front ---------------------------------------------------------------------------
class SdkMiddleware:
    """The SDK front's middleware: one SERVER span per request while tracing is on."""

    def __init__(self, toolset_of: Callable[[Any], str | None]) -> None:
        self._toolset_of = toolset_of
        """The toolset a request sees through (its view's, else the equipped one), if any."""

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if tracer is None:
            return await call_next(ctx)
        return await self._traced(ctx, call_next)

    async def _traced(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        from opentelemetry.trace import SpanKind

        method = ctx.method
        params = ctx.params or {}
        name = params.get("name") if method in ("tools/call", "prompts/get") else None
        target = name if isinstance(name, str) else None
        transport, headers, session_id = _transport_of(ctx)
        parent = parent_context(params.get("_meta"), headers)
        try:
            toolset = self._toolset_of(ctx)
        except Exception:  # an attribute is never worth failing a request for
            toolset = None
        attrs = request_attributes(method, target, request_id=ctx.request_id,
                                   protocol_version=ctx.protocol_version, session_id=session_id,
                                   transport=transport, toolset=toolset)
        span = tracer.start_span(span_name(method, target), context=parent, kind=SpanKind.SERVER,
                                 attributes=attrs)
        error: BaseException | None = None
        result: Any = None
        try:
            with _current(span, parent):
                result = await call_next(ctx)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            finish(span, error, result)


def _transport_of(ctx: Any) -> tuple[str, Any, str | None]:
    """``(transport, headers, session id)`` of an SDK request."""
    headers = getattr(ctx.request, "headers", None)
    if headers is not None:
        return "http", headers, headers.get("mcp-session-id")
    return front_transport(), None, None


_FRONT_TRANSPORT: Any = None


def front_transport() -> str:
    """The transport of the connection this task serves (stdio unless the ws front said so)."""
    var = _FRONT_TRANSPORT
    return var.get() if var is not None else "stdio"


def set_front_transport(name: str) -> None:
    """Called by a front for the connection it serves (its tasks inherit it)."""
    global _FRONT_TRANSPORT
    import contextvars

    if _FRONT_TRANSPORT is None:
        _FRONT_TRANSPORT = contextvars.ContextVar("mcpvisor_front_transport", default="stdio")
    _FRONT_TRANSPORT.set(name)


# --- upstream requests -------------------------------------------------------------------------
async def traced_request(server: str, method: str, params: Mapping[str, Any] | None,
                         send: Callable[..., Awaitable[dict[str, Any]]], **kwargs: Any) -> dict[str, Any]:
    """``send(method, params, **kwargs)`` under a CLIENT span, the child of the current span.

    The span's context replaces any trace context in ``params._meta`` (the client's own
    is our server span's parent, never the upstream's). A request made outside any traced
    request (a ping, a list refresh) is sent as it is: no root span for housekeeping.
    """
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    current = trace.get_current_span()
    if not current.get_span_context().is_valid:
        return await send(method, params, **kwargs)
    if current.is_recording():
        current.set_attribute("mcpvisor.server", server)
    name = (params or {}).get("name") if method in ("tools/call", "prompts/get") else None
    target = name if isinstance(name, str) else None
    attrs = request_attributes(method, target)
    attrs["mcpvisor.server"] = server
    span = tracer.start_span(span_name(method, target), kind=SpanKind.CLIENT, attributes=attrs)
    out = dict(params) if params else {}
    meta = out.get("_meta")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    for key in TRACE_KEYS:
        meta.pop(key, None)
    meta.update(carrier_of(span))
    out["_meta"] = meta
    error: BaseException | None = None
    result: dict[str, Any] | None = None
    try:
        with _current(span):
            result = await send(method, out, **kwargs)
        return result
    except BaseException as exc:
        error = exc
        if isinstance(exc, UpstreamDied):  # on the call's span too: where a reader looks first
            died = {"mcpvisor.server": server, "reason": _message(exc)}
            span.add_event("mcpvisor.upstream.died", died)
            if current.is_recording():
                current.add_event("mcpvisor.upstream.died", died)
        raise
    finally:
        finish(span, error, result)


def inject_headers(request: Any) -> None:
    """Copy an HTTP request's JSON-RPC ``params._meta`` trace context into its headers
    (``traceparent``, ...): an HTTP upstream, or a gateway in front of it, reads either."""
    try:
        body = _meta_decoder.decode(request.content)
    except Exception:  # not one JSON-RPC request (a batch, a response, no body): nothing to copy
        return
    meta = body.params.meta if body.params is not None else None
    if meta is None:
        return
    for key in TRACE_KEYS:
        value = getattr(meta, key)
        if value is not None:
            request.headers[key] = value


class _Meta(msgspec.Struct):
    traceparent: str | None = None
    tracestate: str | None = None
    baggage: str | None = None


class _Params(msgspec.Struct):
    meta: _Meta | None = msgspec.field(default=None, name="_meta")


class _Body(msgspec.Struct):
    params: _Params | None = None


_meta_decoder = msgspec.json.Decoder(_Body)


# --- lifecycle ---------------------------------------------------------------------------------------
def lifecycle(event: str, server: str | None = None, **attributes: Any) -> None:
    """A restart, breaker trip, equip or lazy load: an event of the current span, or a
    short span of its own when nothing is current (the actor's own task)."""
    if tracer is None:
        return
    from opentelemetry import trace

    attrs: dict[str, Any] = {k: v for k, v in attributes.items() if v is not None}
    if server is not None:
        attrs["mcpvisor.server"] = server
    current = trace.get_current_span()
    if current.is_recording():
        current.add_event(event, attrs)
        return
    span = tracer.start_span(f"{event} {server}" if server else event, attributes=attrs)
    span.add_event(event, attrs)
    span.end()


@contextmanager
def api_span(method: str, target: str | None) -> Iterator[Any]:
    """A SERVER span for a call through the embedding API (no parent: the program is the client)."""
    from opentelemetry.trace import SpanKind

    span = tracer.start_span(span_name(method, target), kind=SpanKind.SERVER,
                             attributes=request_attributes(method, target))
    error: BaseException | None = None
    try:
        with _current(span):
            yield span
    except BaseException as exc:
        error = exc
        raise
    finally:
        finish(span, error)
