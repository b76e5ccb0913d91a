"""``mcpvisor bench``: run the benchmark suite (``python -m mcpvisor.bench``) with the same flags.

The benchmark is a tool that measures the package, so the command line never imports it:
the words after ``bench`` go to ``python -m mcpvisor.bench`` in a child process (its
``--help`` lists them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

DESCRIPTION = ("Measure what mcpvisor costs: tool-call latency and throughput (stdio and streamable HTTP), "
               "a 1 MiB result, start-up with 1 and 20 upstreams, memory, tools/list size, list_changed "
               "delivery and recovery, as ratios against calling the upstream directly and against peer "
               "proxies (FastMCP's proxy and others, installed under bench/.peers). Prints a table and one "
               "JSON object per scenario. `mcpvisor bench --help` lists the flags.")


def register(sub: Any) -> None:
    # The flags belong to the benchmark; `main` hands every word after `bench` to it.
    sub.add_parser("bench", help="run the benchmark suite (ratios against direct and peer proxies)",
                   description=DESCRIPTION, add_help=False,
                   formatter_class=argparse.RawDescriptionHelpFormatter,
                   epilog="examples:\n  mcpvisor bench --quick\n  mcpvisor bench --only stdio --no-peers\n")


def run(words: Sequence[str]) -> int:
    """Run ``python -m mcpvisor.bench WORDS`` and return its exit status."""
    try:
        return subprocess.call([sys.executable, "-m", "mcpvisor.bench", *words])
    except KeyboardInterrupt:
        return 130


