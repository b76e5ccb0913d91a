"""``mcpvisor dashboard``: the dashboard of a proxy that is already running.

A proxy under a client (stdio) has no HTTP front of its own. This command serves the same
page and API (`mcpvisor.dashboard`) on loopback, in its own process, against the proxy's
control socket (`mcpvisor.control`): status is the socket's ``status`` op, polled;
edits go through the config store to the proxy's config file, then the socket's
``reload`` op applies them at once (the proxy's file watcher would too); ``test`` runs the
``mcp test`` probe here. Calls per minute and latency are not on the control channel and
show as unknown. Only loopback: the page changes the user's config. When the proxy wants
a bearer token from its clients, reading the page and the API needs the login too.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Final

from mcpvisor.cli._base import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Formatter, quiet_exit

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
        trio.run(_until_stopped, proxy.socket, proxy.config, directory, args.port, not args.no_open)
    except BaseException as exc:
        # Ctrl-C is how this command is stopped (its banner says so): a normal end, no traceback,
        # also when trio delivers it inside the server nursery's exception group.
        if quiet_exit(exc) != EXIT_INTERRUPTED:
            raise
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


def proxy_tokens(config: str | None) -> dict[str, str]:
    """The bearer tokens the proxy's clients need: ``settings.authToken(s)`` of its config
    file and ``$MCPVISOR_TOKEN``; empty when it needs none (or its config cannot be read:
    the proxy then reports its own state, and the page stays loopback-only)."""
    import os

    from mcpvisor.config import ConfigError, load_config

    tokens: dict[str, str] = {}
    if os.environ.get("MCPVISOR_TOKEN", "").strip():
        tokens["env"] = os.environ["MCPVISOR_TOKEN"].strip()
    if config:
        with contextlib.suppress(OSError, ConfigError):
            tokens.update(load_config(Path(config)).settings.auth_tokens)
    return tokens


async def _until_stopped(socket: Path, config: str | None, directory: Path, port: int,
                         open_browser: bool) -> None:
    """`serve_dashboard` until Ctrl-C (or SIGTERM), which cancels it: a signal taken as a
    message, not a `KeyboardInterrupt` raised wherever the interpreter happens to be (inside
    a lock's acquire, a library's cleanup), so the first Ctrl-C always stops it."""
    import signal

    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_at_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel(reason="Ctrl-C or SIGTERM")
                    return

            nursery.start_soon(stop_at_signal)
            await serve_dashboard(socket, config, directory, port, open_browser)
            nursery.cancel_scope.cancel(reason="the dashboard ended")


async def serve_dashboard(socket: Path, config: str | None, directory: Path, port: int, open_browser: bool,
                          *, task_status: Any = None) -> None:
    """Serve the dashboard of the proxy at ``socket`` on ``HOST:port`` until cancelled."""
    import logging

    import hypercorn.config
    import hypercorn.trio
    import trio
    from starlette.applications import Starlette

    from mcpvisor.actors.fronts.auth import StaticTokens, host_rules
    from mcpvisor.dashboard import (
        ControlSource,
        DashboardGuard,
        Hub,
        dashboard_routes,
        ensure_token,
        login_url,
    )

    hub = Hub(ControlSource(socket, config), metrics=False)
    tokens = proxy_tokens(config)
    # A proxy that wants a token from its clients has a dashboard that wants one too: its
    # page shows every server and its state, so reading needs the login (or that token).
    verifier = StaticTokens(lambda: tokens) if tokens else None
    guard = DashboardGuard(host_rules(HOST), ensure_token(directory), verifier)
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
