"""``mcpvisor serve``: run the proxy."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Final

import msgspec

from mcpvisor.actors.core.vocabulary import EXPOSURES
from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Formatter
from mcpvisor.config import DEFAULT_HOST, DEFAULT_PORT
from mcpvisor.redact import remember, scrub_known, secret_values

logger = logging.getLogger("mcpvisor")

EPILOG: Final = """\
examples:
  mcpvisor serve                                 # stdio, config found by the lookup order
  mcpvisor serve --demo --transport http         # the bundled demo servers at http://127.0.0.1:8848/mcp
  mcpvisor serve --config ~/mcp.json --toolset dev
  mcpvisor serve --exposure discovery            # discover_tool, use_tool, load_mcp instead of every tool
  claude mcp add mcpvisor -- mcpvisor serve      # use it from Claude Code
  mcpvisor serve --transport http --host 0.0.0.0 --token-file ~/.mcpvisor-token \\
      --certfile cert.pem --keyfile key.pem      # beyond this machine: a token (and TLS)

config lookup order: --config, $MCPVISOR_CONFIG, $MCP_PROXY_CONFIG_PATH, ./mcpvisor.json, \
./.mcp.json, the user config dir
"""


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the proxy (stdio by default)", description="Run the MCP proxy.",
                       formatter_class=Formatter, epilog=EPILOG)
    p.add_argument("--config", metavar="PATH", help="config file (default: the lookup order below)")
    p.add_argument("--demo", action="store_true", help="use the bundled demo config and its demo servers")
    p.add_argument("--transport", choices=("stdio", "http", "ws"), default="stdio",
                   help="how clients connect (default: stdio)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address for http/ws (default: {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port for http/ws (default: {DEFAULT_PORT})")
    p.add_argument("--token-file", metavar="PATH",
                   help="bearer token clients must send (a file only you can read; also settings.authToken, "
                        "$MCPVISOR_TOKEN)")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="allow a non-loopback --host without a token (trusted networks only; warns)")
    p.add_argument("--certfile", metavar="PATH", help="TLS certificate (PEM) for https/wss")
    p.add_argument("--keyfile", metavar="PATH", help="TLS private key (PEM) for --certfile")
    p.add_argument("--toolset", metavar="NAME", help="equip this toolset at start")
    p.add_argument("--exposure", choices=EXPOSURES,
                   help="what clients see (default: $MCPVISOR_EXPOSURE, else settings.exposure, else menu)")
    p.add_argument("--state-dir", metavar="DIR", help="where toolsets are kept (default: $MCPVISOR_STATE_DIR "
                                                      "or ~/.local/state/mcpvisor)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   help="log verbosity (default: settings.logLevel, else info)")
    p.add_argument("--log-file", metavar="PATH", help="also write the log to this file")
    p.add_argument("--journal", metavar="PATH",
                   help="record every tool call in this SQLite file (also settings.journal; "
                        "read it with `mcpvisor journal PATH`); with a shared store (settings.store, "
                        "$MCPVISOR_STORE) the calls go to its one table instead")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help="serve Prometheus /metrics on this port (for stdio and ws; the http front "
                        "serves /metrics itself; 0: any free port)")
    p.add_argument("--metrics-host", default=DEFAULT_HOST, metavar="ADDR",
                   help=f"address of --metrics-port (default: {DEFAULT_HOST}; elsewhere needs a token)")
    p.add_argument("--replica", metavar="NAME",
                   help="this replica's name behind a load balancer: HTTP session ids begin with NAME. "
                        "and the log names it (default: $MCPVISOR_REPLICA)")
    p.set_defaults(func=run)


FRONT_CLOSE_S: Final = 3.0
"""After a stop signal's drain, how long the front may take to close its connections on
its own: the HTTP front's graceful close (hypercorn's ``graceful_timeout``, 2 s) and 1 s
for the last writes; then the front is cancelled and the children stopped."""


def secrets_of(config: Any, extra: Any = ()) -> list[str]:
    """Every value a log line must never show (`mcpvisor.redact.secret_values`)."""
    return secret_values(config, extra)


class _Format(logging.Formatter):
    """``HH:MM:SS LEVEL [server] line`` for upstream stderr, ``mcpvisor:`` for our own.

    Scrubs every value `mcpvisor.redact.remember` was given from every line, whoever
    wrote it (an upstream's stderr, the SDK, hypercorn): no token, header, env value or
    key in a command line reaches a log. The list is read at every line, so a hot reload
    that adds a server with its own secrets scrubs them from its first line on.
    """

    replica: str | None = None
    """This replica's name (``--replica``, ``$MCPVISOR_REPLICA``): every line of its log
    says it, so the logs of several replicas gathered in one place can be told apart."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub_known(self._format(record))

    def _format(self, record: logging.LogRecord) -> str:
        name = record.name
        if name.startswith("mcpvisor.upstream."):
            who = f"[{name[len('mcpvisor.upstream.'):]}]"
        else:
            who = "mcpvisor:" if self.replica is None else f"mcpvisor@{self.replica}:"
        text = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} {who} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(level: str, log_file: str | None, secrets: Any = ()) -> None:
    remember(secrets)
    root = logging.getLogger()
    root.handlers.clear()
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format())
    root.addHandler(handler)
    if log_file:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(_Format())
        root.addHandler(file_handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for noisy in ("hypercorn.error", "hypercorn.access", "httpx2", "httpcore", "mcp", "sse_starlette",
                  "trio_websocket", "client"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def resolve_config(args: argparse.Namespace) -> tuple[Path, str]:
    from mcpvisor.config import demo_config_path, find_config

    if args.demo:
        return demo_config_path(), "--demo: the bundled demo config"
    path, why = find_config(args.config)
    if path is None:
        raise FileNotFoundError(
            f"{why}\nCreate one with `mcpvisor mcp add NAME -- COMMAND ARGS...`, "
            "or try `mcpvisor serve --demo`."
        )
    return path, why


def proxy_ancestor(env: dict[str, str] | os._Environ[str] | None = None) -> int | None:
    """The pid of the mcpvisor this process was started by as an upstream server, if any.

    Its children carry `mcpvisor.actors.process.PARENT_ENV`; the variable counts only when it names
    a live ancestor of this process, so one leaked into an unrelated shell blocks nothing.
    """
    from mcpvisor.actors.process import PARENT_ENV

    value = (os.environ if env is None else env).get(PARENT_ENV, "")
    if not value.isdigit():
        return None
    import psutil

    try:
        ancestors = {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        return None
    return int(value) if int(value) in ancestors else None


def run(args: argparse.Namespace) -> int:
    import trio

    parent = proxy_ancestor()
    if parent is not None:
        from mcpvisor.actors.process import SELF_REFUSAL

        # Before the config is even read: this process must spawn nothing.
        print(f"mcpvisor: {SELF_REFUSAL} (pid {parent}); a proxy never runs itself as one of its own "
              "servers (it would read the same config and start itself again, without end). Remove the "
              "server that runs mcpvisor from that proxy's config.", file=sys.stderr)
        return EXIT_USAGE

    from mcpvisor._config_types import REPLICA_ENV, replica_name
    from mcpvisor._serve import (
        PortUnavailable,
        TokenFileError,
        UnsafeBind,
        check_bind,
        check_port,
        start_tokens,
        tls_context,
    )
    from mcpvisor.config import ConfigError, load_config

    try:
        replica = replica_name(os.environ, getattr(args, "replica", None))
    except ConfigError as exc:
        print(f"mcpvisor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if replica is not None:  # the HTTP front reads it there, as an embedding program's would
        os.environ[REPLICA_ENV] = replica
        _Format.replica = replica
    try:
        path, why = resolve_config(args)
        config = load_config(path, isolate_servers=True)  # one bad server stays one bad server
    except FileNotFoundError as exc:
        print(f"mcpvisor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"mcpvisor: invalid config:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args.tokens = start_tokens(token_file=args.token_file)
    except TokenFileError as exc:
        print(f"mcpvisor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from mcpvisor.actors.process import withhold_values

    withhold_values(args.tokens.values())  # under whatever name the token came in
    setup_logging(args.log_level or config.settings.log_level, args.log_file,
                  secrets_of(config, args.tokens.values()))
    if args.transport != "stdio":
        try:  # before any server starts: a refused bind costs nothing
            tls_context(args.certfile, args.keyfile)
            guarded = bool(args.tokens or config.settings.auth_tokens or config.settings.auth)
            check_bind(args.host, guarded=guarded, insecure_no_auth=False)
        except UnsafeBind as exc:
            if not args.insecure_no_auth:
                print(f"mcpvisor: {exc}", file=sys.stderr)
                return EXIT_USAGE
        except (OSError, ValueError) as exc:
            print(f"mcpvisor: cannot use --certfile/--keyfile: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:  # a busy port found after every server was spawned cost seconds and a traceback
            check_port(args.host, args.port)
        except PortUnavailable as exc:
            print(f"mcpvisor: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.metrics_port is not None:
        try:
            guarded = bool(args.tokens or config.settings.auth_tokens or config.settings.auth)
            check_bind(args.metrics_host, guarded=guarded, insecure_no_auth=False)
            check_port(args.metrics_host, args.metrics_port)
        except (UnsafeBind, PortUnavailable) as exc:
            print(f"mcpvisor: --metrics-port: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.exposure:  # the flag wins over $MCPVISOR_EXPOSURE, which wins over the file
        from mcpvisor.settings import EXPOSURE_ENV

        # Through the variable every reload applies too: a reload compares the file with
        # the settings in force, and the flag must not read as a change of the file.
        os.environ[EXPOSURE_ENV] = args.exposure
        settings = msgspec.structs.replace(config.settings, exposure=args.exposure)
        config = msgspec.structs.replace(config, settings=settings)
    logger.info("config: %s (%s)", path, why)
    for warning in config.warnings:
        logger.warning("%s", warning)
    from mcpvisor.actors.core.toolsets import ToolsetError
    from mcpvisor.pgstore import StoreError

    try:
        trio.run(_main, args, config)
    except ConfigError as exc:  # settings.exposure / $MCPVISOR_EXPOSURE, checked before anything starts
        print(f"mcpvisor: invalid config:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except ToolsetError as exc:  # --toolset names no toolset
        print(f"mcpvisor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:  # settings.store / $MCPVISOR_STORE unreachable at start (no password shown)
        print(f"mcpvisor: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _print_login(sup: Any, url: str) -> None:
    """Print the dashboard's login URL on stderr, outside the log (a log file must never
    hold a token; the terminal that started the proxy may)."""
    from mcpvisor.dashboard import ensure_token, login_url

    base = url.removesuffix("/mcp")
    token = ensure_token(Path(sup.store.directory))
    print(f"mcpvisor: dashboard at {base}/ (log in to change servers: {login_url(base, token)})",
          file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace, config: Any) -> None:
    import trio

    from mcpvisor._serve import serve
    from mcpvisor.settings import state_dir as user_state_dir
    from mcpvisor.tree import open_supervisor

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with open_supervisor(config, state_dir=args.state_dir, toolset=args.toolset,
                                   journal=getattr(args, "journal", None),
                                   control=user_state_dir(args.state_dir),
                                   control_transport=args.transport,
                                   metrics=args.transport == "http"
                                   or args.metrics_port is not None) as sup, \
                trio.open_nursery() as nursery:

            async def stop_gracefully() -> None:
                if args.transport == "http":  # behind a balancer: the whole drain the settings give
                    await sup.front.drain.run(sup.settings.drain_timeout)
                else:
                    await sup.front.drain.run()
                # Each front returns on its own once its last answers are written (and
                # that cancels this); a wedged client connection cannot hold the exit.
                await trio.sleep(FRONT_CLOSE_S)
                nursery.cancel_scope.cancel(reason="the front did not close in time")

            async def watch_signals() -> None:
                draining = False
                async for signum in signals:
                    if signum == signal.SIGHUP and hasattr(sup, "reload"):
                        await sup.reload()
                        continue
                    name = signal.Signals(signum).name
                    if draining:
                        logger.info("received %s again: stopping now", name)
                        nursery.cancel_scope.cancel(reason=f"{name} twice")
                        return
                    logger.info("received %s: shutting down", name)
                    draining = True
                    nursery.start_soon(stop_gracefully)

            async def banner(where: str) -> None:
                await sup.wait_startup()
                servers = ", ".join(
                    f"{s.name} {s.state}" + (f" ({s.tool_count} tools)" if s.state == "ready" else "")
                    for s in sup.status()
                ) or "none"
                tools = sup.tools()
                logger.info("serving %s; servers: %s", where, servers)
                logger.info("exposing %d tools (exposure %s): %s", len(tools), sup.settings.exposure,
                            ", ".join(t["name"] for t in tools[:20]) + (" ..." if len(tools) > 20 else ""))

            nursery.start_soon(watch_signals)
            if args.metrics_port is not None:
                from mcpvisor._serve import build_guard
                from mcpvisor.dashboard import guard_for
                from mcpvisor.metrics_export import METRICS_PATH, serve_metrics_port

                guard = guard_for(sup, build_guard(sup, args.metrics_host, args.metrics_port,
                                                   tokens=args.tokens, path=METRICS_PATH, sdk_auth=False))
                metrics_url = await nursery.start(lambda task_status: serve_metrics_port(
                    sup, args.metrics_host, args.metrics_port, guard, task_status=task_status))
                print(f"mcpvisor: metrics at {metrics_url}", file=sys.stderr, flush=True)
            if args.transport == "stdio":
                async def stdio() -> None:
                    await serve(sup, "stdio")
                    # The client closed stdin, or a stop signal's drain is done: we are done.
                    nursery.cancel_scope.cancel()

                nursery.start_soon(stdio)
                nursery.start_soon(banner, "MCP over stdio")
            else:
                async def network(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
                    await serve(sup, args.transport, host=args.host, port=args.port, tokens=args.tokens,
                                insecure_no_auth=args.insecure_no_auth, certfile=args.certfile,
                                keyfile=args.keyfile, task_status=task_status)
                    nursery.cancel_scope.cancel()  # closed after a stop signal's drain

                url = await nursery.start(network)
                nursery.start_soon(banner, url)
                if args.transport == "http":
                    _print_login(sup, url)
