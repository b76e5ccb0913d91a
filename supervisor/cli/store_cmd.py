"""``mcpvisor store migrate|check``: the operators' commands of the shared PostgreSQL store.

The store is ``$MCPVISOR_STORE``, else ``settings.store`` of the config (found as every
command finds it, or ``--config``). ``migrate`` applies the schema migrations this
version has and the store lacks (replicas do it too when they start) and says which;
``check`` says whether the store is reachable, its schema current, and
``$MCPVISOR_STORE_KEY`` present and able to decrypt a stored token. The URL's password
is never printed: the store is shown as ``postgresql://host:port/database``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Final

from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Formatter

EPILOG: Final = """\
examples:
  MCPVISOR_STORE=postgresql://mcpvisor@db:5432/mcpvisor mcpvisor store migrate
  mcpvisor store check --config mcpvisor.json
  mcpvisor store check --format json

exit codes: 0 ok; 1 unreachable, schema not current, or the key missing or wrong;
2 no store configured, or a bad config.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("store", help="migrate or check the shared PostgreSQL store (settings.store)",
                       description="The PostgreSQL store several replicas share ($MCPVISOR_STORE or "
                                   "settings.store): apply its schema migrations, or check it.",
                       formatter_class=Formatter, epilog=EPILOG)
    cmds = p.add_subparsers(dest="store_command", metavar="COMMAND", required=True)
    for name, text in (("migrate", "create or migrate the store's tables; print what was applied"),
                       ("check", "reachable, schema current, $MCPVISOR_STORE_KEY able to decrypt a token")):
        c = cmds.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".",
                            formatter_class=Formatter, epilog=EPILOG)
        c.add_argument("--config", metavar="PATH", help="config file whose settings.store to use "
                       "(default: $MCPVISOR_STORE, else the usual config lookup)")
        c.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        c.set_defaults(func=run)


def _url(args: argparse.Namespace) -> str | None:
    """The store URL: ``$MCPVISOR_STORE``, else the config's ``settings.store``."""
    from mcpvisor.pgstore import STORE_ENV

    value = os.environ.get(STORE_ENV, "").strip()
    if value:
        return value
    from mcpvisor.cli.config_cmd import load_lenient, locate

    target = locate(args)
    if target is None or not target.exists:
        return None
    config, _ = load_lenient(target)
    return config.settings.store


def run(args: argparse.Namespace) -> int:
    from mcpvisor.cli.config_cmd import CommandError
    from mcpvisor.config import ConfigError
    from mcpvisor.pgstore import STORE_ENV, StoreError, is_store_url

    try:
        url = _url(args)
    except (CommandError, ConfigError) as exc:
        print(f"mcpvisor store: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if url is None:
        print(f"mcpvisor store: no store: set ${STORE_ENV} or settings.store to a postgresql:// URL",
              file=sys.stderr)
        return EXIT_USAGE
    if not is_store_url(url):
        print(f"mcpvisor store: ${STORE_ENV} is not a PostgreSQL URL (postgresql://user@host:port/database)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        from mcpvisor.pgstore.store import PgStore
    except ImportError as exc:
        print(f"mcpvisor store: needs the postgres extra (pip install 'mcpvisor[postgres]'): {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    from mcpvisor.settings import state_dir

    store = PgStore(url, state_dir=state_dir())
    try:
        if args.store_command == "migrate":
            return _migrate(store, args.format)
        return _check(store, args.format)
    except StoreError as exc:
        print(f"mcpvisor store: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        store.close()


def _migrate(store: Any, fmt: str) -> int:
    from mcpvisor.pgstore.schema import LATEST

    applied = store.migrate()
    if fmt == "json":
        done = [{"version": m.version, "description": m.description} for m in applied]
        print(json.dumps({"store": store.shown, "applied": done, "version": LATEST}))
        return EXIT_OK
    if not applied:
        print(f"{store.shown}: schema already at version {LATEST}; nothing to do")
    for m in applied:
        print(f"{store.shown}: applied migration {m.version}: {m.description}")
    return EXIT_OK


def _check(store: Any, fmt: str) -> int:
    report = store.check()
    ok = not report.problems
    if fmt == "json":
        print(json.dumps({"store": report.store, "reachable": True, "version": report.version,
                          "latest": report.latest, "key": report.key, "problems": list(report.problems),
                          "ok": ok}))
    else:
        print(f"store {report.store}: reachable")
        print(f"schema: version {report.version} (this mcpvisor: {report.latest})")
        print(f"key: {report.key}")
        for problem in report.problems:
            print(f"problem: {problem}")
    return EXIT_OK if ok else EXIT_FAILED
