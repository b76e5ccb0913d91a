"""The live dashboard and the management API of the HTTP front (docs/design.md "HTTP front extras").

``mcpvisor serve --transport http`` serves, next to ``/mcp``: the page at ``/`` (one
static bundle in ``static/``, nothing from elsewhere), the JSON API under ``/api/``, the
live feed at ``/api/events`` (websocket) and ``/healthz``. ``mcpvisor dashboard`` serves
the same against a running proxy's control socket.

Modules: `_guard` (the dashboard token, cookie, Host/Origin), `_entries` (server entries
through the CLI's config store and checks), `_hub` (status, metrics and events from a
proxy), `_metrics` (per-server call figures), `_app` (the routes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcpvisor.dashboard._app import dashboard_routes
from mcpvisor.dashboard._guard import TOKEN_FILE, DashboardGuard, ensure_token
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
    hub = Hub(LocalSource(sup))
    return hub, dashboard_routes(hub, guard_for(sup, guard))
