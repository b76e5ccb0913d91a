"""The live dashboard and the management API of the HTTP front (docs/design.md "HTTP front extras").

``mcpvisor serve --transport http`` serves, next to ``/mcp``: the page at ``/`` (one
static bundle in ``static/``, nothing from elsewhere), the JSON API under ``/api/``, the
live feed at ``/api/events`` (websocket) and ``/healthz``. ``mcpvisor dashboard`` serves
the same against a running proxy's control socket.

Modules: `_guard` (the dashboard token, cookie, Host/Origin), `_entries` (server entries
through the CLI's config store and checks), `_hub` (status, metrics and events from a
proxy), `_metrics` (per-server call figures), `_app` (the routes). The routes and the hub
load when first used: a stdio ``serve --metrics-port`` needs only the guard.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpvisor.dashboard._guard import TOKEN_FILE, DashboardGuard, ensure_token

if TYPE_CHECKING:
    from mcpvisor.dashboard._app import dashboard_routes
    from mcpvisor.dashboard._hub import ControlSource, Hub, LocalSource

__all__ = [
    "TOKEN_FILE",
    "ControlSource",
    "DashboardGuard",
    "Hub",
    "LocalSource",
    "dashboard_routes",
    "ensure_token",
    "for_supervisor",
    "guard_for",
    "login_url",
]


def login_url(base: str, token: str) -> str:
    """The URL that logs a browser in (``base`` is ``scheme://host:port``)."""
    return f"{base.rstrip('/')}/login?token={token}"


def guard_for(sup: Any, guard: Any) -> DashboardGuard:
    """The dashboard's guard behind the front's ``guard`` (`mcpvisor._serve.Guard`); the
    dashboard token lives in ``sup``'s state directory. ``/metrics`` is behind it too."""
    token = ensure_token(Path(sup.store.directory))
    views = getattr(sup.front, "views", None)
    return DashboardGuard(guard.rules, token, guard.verifier, tls=guard.tls is not None,
                          bound=views.bound if views is not None else None)


def for_supervisor(sup: Any, guard: Any) -> tuple[Hub, list[Any]]:
    """The hub and routes for the supervisor in this process behind ``guard``
    (`mcpvisor._serve.Guard`)."""
    from mcpvisor.dashboard._app import dashboard_routes
    from mcpvisor.dashboard._hub import Hub, LocalSource

    hub = Hub(LocalSource(sup))
    return hub, dashboard_routes(hub, guard_for(sup, guard))


_LAZY = {"dashboard_routes": "_app", "ControlSource": "_hub", "Hub": "_hub", "LocalSource": "_hub"}
"""Names whose modules (the routes: Starlette; the hub) load when first asked for: the
metrics port of a stdio ``serve`` needs only the guard."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
