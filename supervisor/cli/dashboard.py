"""``mcpvisor dashboard``: the dashboard of a proxy that is already running.

A proxy under a client (stdio) has no HTTP front of its own. This command serves the same
page and API (`mcpvisor.dashboard`) on loopback, in its own process, against the proxy's
control socket (`mcpvisor.control`): status is the socket's ``status`` op, polled;
edits go through the config store to the proxy's config file, then the socket's
``reload`` op applies them at once (the proxy's file watcher would too); ``test`` runs the
``mcp test`` probe here. Calls per minute and latency are not on the control channel and
show as unknown. Only loopback: the page changes the user's config.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Final

from mcpvisor.cli import EXIT_FAILED, EXIT_OK, Formatter

HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8849
"""Next to ``serve``'s 8848."""

EPILOG: Final = """\
examples:
  mcpvisor dashboard                 # the running proxy's dashboard at http://127.0.0.1:8849/
  mcpvisor dashboard --no-open --port 0
  mcpvisor dashboard --pid 4242      # when several proxies run

`mcpvisor serve --transport http` serves the dashboard itself, at / next to /mcp.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("dashboard", help="open a dashboard for a running proxy",
                       description="Serve the dashboard on loopback for a running proxy (found by its "
                                   "control socket in the state directory) and open it in a browser.",
                       formatter_class=Formatter, epilog=EPILOG)
    p.add_argument("--state-dir", metavar="DIR",
                   help="the proxies' state directory "
                        "(default: $MCPVISOR_STATE_DIR or ~/.local/state/mcpvisor)")
    p.add_argument("--pid", type=int, help="the proxy to show (default: the most recently started)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on {HOST} (default: {DEFAULT_PORT})")
    p.add_argument("--no-open", action="store_true", help="print the URL; do not start a browser")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from mcpvisor.cli.status import no_proxy_message
    from mcpvisor.control import list_running
    from mcpvisor.settings import state_dir

    directory = state_dir(args.state_dir)
    proxies = [p for p in list_running(directory) if args.pid in (None, p.pid)]
    if not proxies:
        which = f"proxy pid {args.pid}" if args.pid else "proxy"
        print(f"mcpvisor: {no_proxy_message(directory).replace('proxy', which, 1)}", file=sys.stderr)
        return EXIT_FAILED
    proxy = proxies[-1]
    try:
        trio.run(serve_dashboard, proxy.socket, proxy.config, directory, args.port, not args.no_open)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


LAUNCHER: Final = "dashboard-open.html"
"""A page in the state directory that sends the browser to the login URL (as Jupyter
does): a browser started with the login URL itself would show the token to every local
user in its command line (``/proc/PID/cmdline``)."""


def launcher(directory: Path, login: str) -> Path:
    """Write the launcher page (mode 0600, next to the token) and return its path."""
    import html
    import os

    path = directory / LAUNCHER
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    target = html.escape(login, quote=True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f'<!doctype html><meta http-equiv="refresh" content="0; url={target}">'
                f'<title>mcpvisor</title><a href="{target}">open the dashboard</a>\n')
    return path


async def serve_dashboard(socket: Path, config: str | None, directory: Path, port: int, open_browser: bool,
                          *, task_status: Any = None) -> None:
    """Serve the dashboard of the proxy at ``socket`` on ``HOST:port`` until cancelled."""
    import logging

    import hypercorn.config
    import hypercorn.trio
    import trio
    from starlette.applications import Starlette

    from mcpvisor.actors.fronts.auth import host_rules
    from mcpvisor.dashboard import (
        ControlSource,
        DashboardGuard,
        Hub,
        dashboard_routes,
        ensure_token,
        login_url,
    )

    hub = Hub(ControlSource(socket, config), metrics=False)
    guard = DashboardGuard(host_rules(HOST), ensure_token(directory))
    app = Starlette(routes=dashboard_routes(hub, guard))
    hconfig = hypercorn.config.Config()
    hconfig.bind = [f"{HOST}:{port}"]
    hconfig.accesslog = None
    hconfig.errorlog = logging.getLogger("hypercorn.error")
    hconfig.graceful_timeout = 2.0
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        binds: list[str] = await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                app, hconfig, task_status=task_status))  # type: ignore[arg-type]
        base = binds[0].rstrip("/")
        login = login_url(base, guard.token)
        print(f"mcpvisor: dashboard of proxy {socket.stem} at {base}/ (log in to change servers: {login}); "
              "Ctrl-C stops it", file=sys.stderr, flush=True)
        if open_browser:
            import webbrowser

            opener = launcher(directory, login)
            await trio.to_thread.run_sync(webbrowser.open, opener.as_uri())
        if task_status is not None:
            task_status.started(base)
