"""``mcpvisor journal PATH``: what a harness run called, summarised from its journal.

PATH is the SQLite file, or the replicas' shared store (a ``postgresql://`` URL, default
``$MCPVISOR_STORE``), whose one table holds every replica's calls.

Per server and tool: calls, errors, latency p50/p99; per run (episode label): calls and
failures; the outcome counts. ``--run LABEL`` narrows it to one run; ``--format json``
gives the same as one JSON object (`mcpvisor.journal.summarise`). ``--calls N`` lists the
last N calls instead, each with its OpenTelemetry trace id, so a row leads to its trace.
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
  mcpvisor serve --journal runs.db             # record every call while serving
  mcpvisor journal runs.db                     # per tool and per run
  mcpvisor journal runs.db --run episode-7     # one run only
  mcpvisor journal runs.db --calls 20          # the last 20 calls, with their trace ids
  mcpvisor journal runs.db --format json
  mcpvisor journal "$MCPVISOR_STORE"            # every replica's calls, from the shared store

outcomes: ok, tool_error (a result with isError), timeout, server_down, cancelled, error.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("journal", help="summarise a call journal (serve --journal, settings.journal)",
                       description="Summarise the calls recorded in a journal: per server and tool "
                                   "(calls, errors, p50/p99 latency) and per run (calls, failures).",
                       formatter_class=Formatter, epilog=EPILOG)
    p.add_argument("path", metavar="PATH", nargs="?",
                   help="the journal file, or the replicas' shared store (a postgresql:// URL; default: "
                        "$MCPVISOR_STORE): every replica's calls, with how many each served")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="output format (default: table)")
    p.add_argument("--run", metavar="LABEL", help="only the calls of this run")
    p.add_argument("--calls", metavar="N", type=int, default=0,
                   help="list the last N calls instead, each with its trace id (when traced)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mcpvisor.journal import format_table, summarise
    from mcpvisor.journal._summary import JournalMissing
    from mcpvisor.pgstore import STORE_ENV

    if args.path is None:
        args.path = os.environ.get(STORE_ENV, "").strip() or None
        if args.path is None:
            print(f"mcpvisor journal: name a journal file (or set ${STORE_ENV} to the shared store)",
                  file=sys.stderr)
            return EXIT_USAGE
    try:
        if args.calls > 0:
            from mcpvisor.journal._summary import format_calls, recent_calls

            calls = recent_calls(args.path, args.calls, run=args.run)
            print(json.dumps(calls, indent=2) if args.format == "json" else format_calls(calls))
            return EXIT_OK
        summary = summarise(args.path, run=args.run)
    except JournalMissing as exc:
        print(f"mcpvisor journal: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(format_table(summary))
    return EXIT_OK
