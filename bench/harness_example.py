"""An example harness: 50 episodes against one embedded supervisor, then the journal summary.

Each episode gets its own instance of a session-scoped stdio server (``scratch``: state
must not leak from one episode to the next) and shares an ordinary one (``lookup``);
it makes a few calls, and its calls are journalled under its run label. Run it from a
checkout::

    python bench/harness_example.py                # 50 episodes, 8 at a time
    python bench/harness_example.py --episodes 10 --journal runs.db
    mcpvisor journal runs.db --run episode-3       # afterwards, one episode's calls

The servers are ``bench/upstream.py`` (standard library + msgspec, starts in tens of
milliseconds); put your own commands in ``CONFIG`` the same way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from mcpvisor import open_supervisor
from mcpvisor.journal import format_table, summarise

UPSTREAM = str(Path(__file__).resolve().parent / "upstream.py")

CONFIG: dict[str, Any] = {
    "mcpServers": {
        # One process per episode, stopped when the episode ends; 4 kept started ahead.
        "scratch": {"command": sys.executable, "args": [UPSTREAM, "--name", "scratch"],
                    "scope": "session", "pool": 4},
        # One process for everybody.
        "lookup": {"command": sys.executable, "args": [UPSTREAM, "--name", "lookup"]},
    },
    "settings": {"exposure": "all"},
}


async def episode(sup: Any, n: int, limiter: trio.CapacityLimiter) -> None:
    async with limiter, sup.session(f"episode-{n}") as s:  # its own "scratch" instance
        await s.call_tool("scratch_echo", {"text": f"start {n}"})
        await s.call_tool("lookup_echo", {"text": "what is the capital of France?"})
        await s.call_tool("scratch_work", {"ms": 1})
        await s.call_tool("scratch_echo", {"text": f"done {n}"})


async def main(episodes: int, concurrency: int, journal: Path, state_dir: Path) -> None:
    async with open_supervisor(CONFIG, journal=journal, state_dir=state_dir, watch=False) as sup:
        await sup.wait_ready()
        limiter = trio.CapacityLimiter(concurrency)
        async with trio.open_nursery() as nursery:
            for n in range(episodes):
                nursery.start_soon(episode, sup, n, limiter)
    # Leaving the block stopped every process and wrote the journal's last batch.
    print(format_table(summarise(journal)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--journal", type=Path, help="the journal file (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcpvisor-harness-") as tmp:
        trio.run(main, args.episodes, args.concurrency, args.journal or Path(tmp) / "journal.db",
                 Path(tmp) / "state")
