"""``/metrics``: the proxy's figures in the Prometheus text format, and ``serve --metrics-port``.

Owns the one place `prometheus_client` is imported (only when metrics are served: the
import is inside the functions here, and nothing else imports this module before then):

* `ProxyCollector`: a collector that reads `mcpvisor.metrics.Metrics` and the running
  supervisor at each scrape: the histograms and counters the hooks recorded, the gauges
  read from the tree as it is now (upstream states, requests in flight, sessions open,
  the journal's queue);
* `exposition`: one scrape (the registry with the collector and the process collector);
* `metrics_route`: the ``GET /metrics`` Starlette route, behind the dashboard's guard (the
  Host and Origin rules, and a token whenever the front has one, as ``/api``); with
  ``settings.metrics.public`` and a loopback bind, no token is asked for;
* `serve_metrics_port`: the route alone on its own port (``serve --metrics-port N``), for
  the stdio and websocket fronts, which have no HTTP listener of their own.

Family names follow the OpenTelemetry semantic conventions for MCP in their Prometheus
form (dots to underscores, the unit as a suffix); labels likewise: ``mcp_method_name``,
``gen_ai_tool_name``, ``error_type``, plus ours, ``mcpvisor_server`` and ``outcome`` (the
journal's outcome of the call).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors.upstream import State
from mcpvisor.metrics import Histogram, Metrics, OpKey

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from mcpvisor.dashboard import DashboardGuard
    from mcpvisor.proxy import Supervisor

logger = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
DEFAULT_METRICS_HOST: Final = "127.0.0.1"
"""``--metrics-port`` listens on loopback unless ``--metrics-host`` says otherwise."""

OP_LABELS: Final = ("mcp_method_name", "gen_ai_tool_name", "mcpvisor_server", "outcome", "error_type")
"""The labels of an operation histogram, in `mcpvisor.metrics.OpKey` order."""

STATES: Final = tuple(s.value for s in State)
"""Every lifecycle state: the upstream-state gauge has a series for each (1 for the current one)."""

GRACEFUL_CLOSE_S: Final = 1.0
"""How long the metrics port lets a scrape in progress finish when the proxy stops."""


class ProxyCollector:
    """Reads `Metrics` and ``sup`` at each scrape (the `prometheus_client` collector protocol)."""

    def __init__(self, sup: Supervisor, metrics: Metrics) -> None:
        self.sup = sup
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []  # the families vary with what was recorded: collected afresh at each scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m, sup = self.metrics, self.sup
        yield _histograms("mcp_server_operation_duration_seconds",
                          "MCP requests the proxy served: from receipt until the answer was sent",
                          m.server_ops)
        yield _histograms("mcp_client_operation_duration_seconds",
                          "MCP requests the proxy sent to an upstream server: until its answer came",
                          m.client_ops)
        in_flight = GaugeMetricFamily("mcpvisor_requests_in_flight",
                                      "Requests sent to an upstream server and not answered yet",
                                      labels=["mcpvisor_server"])
        state = GaugeMetricFamily("mcpvisor_upstream_state",
                                  "1 for the state each upstream server is in, 0 for the others",
                                  labels=["mcpvisor_server", "state"])
        for name, up in list(sup.upstreams.items()):
            link = up.link
            in_flight.add_metric([name], link.in_flight() if link is not None else 0)
            for value in STATES:
                state.add_metric([name, value], 1.0 if up.state.value == value else 0.0)
        for name, spec in sup.config.servers.items():
            if name not in sup.upstreams and not spec.enabled:
                for value in STATES:
                    state.add_metric([name, value], 1.0 if value == State.DISABLED.value else 0.0)
        yield in_flight
        yield state
        yield _counters(CounterMetricFamily("mcpvisor_upstream_restarts",
                                            "Restarts of an upstream server, by reason (a failure's "
                                            "kind, or requested)", labels=["mcpvisor_server", "reason"]),
                        m.restarts)
        yield _counters(CounterMetricFamily("mcpvisor_upstream_breaker_opens",
                                            "Times an upstream server's circuit breaker opened, by the "
                                            "kind of its last failure", labels=["mcpvisor_server", "reason"]),
                        m.breaker_opens)
        changes = CounterMetricFamily("mcpvisor_list_changes_sent",
                                      "list_changed announcements sent to clients, by list",
                                      labels=["kind"])
        for kind, n in sorted(m.list_changes.items()):
            changes.add_metric([kind], n)
        yield changes
        yield GaugeMetricFamily("mcpvisor_sessions_open", "Client sessions connected now",
                                value=len(sup.front.clients))
        journal = sup.journal
        yield GaugeMetricFamily("mcpvisor_journal_queue_depth",
                                "Call records waiting to be written to the journal",
                                value=journal.statistics().queued if journal is not None else 0)


def _histograms(name: str, doc: str, family: Mapping[OpKey, Histogram]) -> Any:
    from prometheus_client.core import HistogramMetricFamily

    out = HistogramMetricFamily(name, doc, labels=list(OP_LABELS), unit="")
    for key, hist in list(family.items()):
        out.add_metric(list(key), hist.cumulative(), hist.total)
    return out


def _counters(out: Any, values: Mapping[tuple[str, str], int]) -> Any:
    for labels, n in sorted(values.items()):
        out.add_metric(list(labels), n)
    return out


def registry_for(sup: Supervisor, metrics: Metrics) -> CollectorRegistry:
    """A registry of its own (not the library's global one) with the proxy's collector and
    the process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``...)."""
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(sup, metrics))
    ProcessCollector(registry=registry)
    return registry


class Exporter:
    """One supervisor's scrape: the registry is built on the first scrape and kept."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self._registry: CollectorRegistry | None = None

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type of one scrape (OpenMetrics if ``accept`` asks for it).

        Raises:
            LookupError: the supervisor records no metrics.
        """
        from prometheus_client.exposition import choose_encoder

        metrics = self.sup.metrics
        if metrics is None:
            raise LookupError("this proxy records no metrics")
        if self._registry is None:
            self._registry = registry_for(self.sup, metrics)
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self._registry), content_type


def metrics_route(sup: Supervisor, guard: DashboardGuard, *, loopback: bool) -> BaseRoute:
    """``GET /metrics`` behind ``guard``. On a ``loopback`` bind, ``settings.metrics.public``
    (read at each scrape: a reload applies it) lifts the token; the Host and Origin rules
    always apply."""
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    exporter = Exporter(sup)

    async def scrape(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        public = loopback and sup.settings.metrics_public
        refused = await guard.check("GET", headers, login=public)
        if refused is not None:
            return JSONResponse({"error": refused.error}, status_code=refused.status)
        try:
            body, content_type = exporter.exposition(request.headers.get("accept"))
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return Response(body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})

    return Route(METRICS_PATH, scrape, methods=["GET"])


async def serve_metrics_port(sup: Supervisor, host: str, port: int, guard: DashboardGuard, *,
                             task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``/metrics`` alone at ``http://host:port/metrics`` until cancelled.

    Guarded as the HTTP front's ``/metrics`` is, by ``guard`` (built for ``host:port``):
    its Host rules, and a token when the proxy has one (``settings.metrics.public`` lifts
    the token on loopback). ``task_status.started``
    receives the URL bound (``port=0`` picks a free port).
    """
    import hypercorn.config
    import hypercorn.trio
    from starlette.applications import Starlette

    from mcpvisor.actors.fronts.hosts import is_loopback

    app = Starlette(routes=[metrics_route(sup, guard, loopback=is_loopback(host))])
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = GRACEFUL_CLOSE_S
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            lambda task_status: hypercorn.trio.serve(app, config, task_status=task_status))  # type: ignore[arg-type]
        url = binds[0].rstrip("/") + METRICS_PATH
        logger.info("metrics at %s", url)
        task_status.started(url)
