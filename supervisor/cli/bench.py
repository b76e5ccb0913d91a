"""``mcpvisor bench``: run the benchmark suite (``python -m mcpvisor.bench``) with the same flags."""

from __future__ import annotations

import argparse
from typing import Any

from mcpvisor.cli import Formatter

DESCRIPTION = ("Measure what mcpvisor costs: tool-call latency and throughput (stdio and streamable HTTP), "
               "a 1 MiB result, start-up with 1 and 20 upstreams, memory, tools/list size, list_changed "
               "delivery and recovery, as ratios against calling the upstream directly and against peer "
               "proxies (FastMCP's proxy and others, installed under bench/.peers). Prints a table and one "
               "JSON object per scenario.")


def register(sub: Any) -> None:
    try:
        from mcpvisor.bench.cli import EPILOG, add_arguments
    except ImportError:  # an install without the bench package (it ships with the source tree)
        return
    p = sub.add_parser("bench", help="run the benchmark suite (ratios against direct and peer proxies)",
                       description=DESCRIPTION, formatter_class=Formatter, epilog=EPILOG)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mcpvisor.bench.cli import run as run_bench

    return run_bench(args)
