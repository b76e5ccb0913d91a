"""One harness run in its own process: episodes against a supervisor embedded with the API.

``python -m mcpvisor.bench.harness_run --episodes 100 --pool 10 --concurrency 10 --workdir DIR``
prints one JSON object: wall time, each episode's start-to-first-successful-call time
(p50/p99), peak RSS of this process (the harness and the supervisor, ``VmHWM``) and of
the whole tree (sampled), the servers started, and the processes still alive after the
supervisor's block ended (must be 0). ``--latency N`` instead measures N sequential calls
to the shared server, half through a supervisor with a journal and half through one
without, in alternating blocks (the journal's cost as a ratio).

Each episode: ``async with sup.session(label)``, call the session-scoped server until a
call succeeds (the first-call time), then a few calls to each server, then the session
ends (its instance stopped). The servers are ``bench/upstream.py``: ``box`` with
``"scope": "session"`` (and ``"pool"``), ``shared`` an ordinary one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Final

import psutil
import trio

UPSTREAM: Final = Path(__file__).parent / "upstream.py"
CALLS_PER_SERVER: Final = 3
"""Calls each episode makes to each server after its first (a short agent turn)."""

SAMPLE_S: Final = 0.05
"""How often the whole tree's RSS is sampled for its peak."""


def config(pool: int, journal: Path | None) -> dict[str, Any]:
    box: dict[str, Any] = {"command": sys.executable, "args": [str(UPSTREAM), "--name", "box"],
                           "scope": "session"}
    if pool:
        box["pool"] = pool
    settings: dict[str, Any] = {"exposure": "all", "startupWait": "60s"}
    if journal is not None:
        settings["journal"] = str(journal)
    return {"mcpServers": {"box": box, "shared": {"command": sys.executable,
                                                   "args": [str(UPSTREAM), "--name", "shared"]}},
            "settings": settings}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(me: psutil.Process) -> int:
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


async def episodes(args: argparse.Namespace) -> dict[str, Any]:
    from mcpvisor.tree import open_supervisor

    workdir = Path(args.workdir)
    journal = None if args.no_journal else workdir / "journal.db"
    me = psutil.Process()
    peak_tree = 0
    first_call: list[float] = []
    failures = 0
    limiter = trio.CapacityLimiter(args.concurrency)

    async def sample() -> None:
        nonlocal peak_tree
        while True:
            peak_tree = max(peak_tree, tree_rss(me))
            await trio.sleep(SAMPLE_S)

    async def episode(sup: Any, i: int) -> None:
        nonlocal failures
        async with limiter, sup.session(f"episode-{i}") as s:
            t0 = time.perf_counter()
            while True:
                try:
                    await s.call_tool("box_echo", {"text": "hi"})
                    break
                except Exception:
                    failures += 1
                    await trio.sleep(0.005)
            first_call.append(time.perf_counter() - t0)
            for _ in range(CALLS_PER_SERVER):
                await s.call_tool("box_echo", {"text": "again"})
                await s.call_tool("shared_echo", {"text": "shared"})

    started = time.perf_counter()
    async with trio.open_nursery() as outer:
        outer.start_soon(sample)
        async with open_supervisor(config(args.pool, journal), state_dir=workdir / "state",
                                   watch=False) as sup:
            await sup.wait_ready()
            for up in list(sup.scoped._pools.get("box", ())):  # episodes start once the pool is warm
                while up.state.value != "ready":
                    await up.wait_changed()
            ready = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(args.episodes):
                    nursery.start_soon(episode, sup, i)
            done = time.perf_counter()
            started_instances = sup.scoped.statistics().started
        outer.cancel_scope.cancel()
    left = [p for p in me.children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return {
        "episodes": args.episodes, "pool": args.pool, "concurrency": args.concurrency,
        "journal": journal is not None, "wall_s": round(done - ready, 3),
        "startup_s": round(ready - started, 3), "first_call_p50_ms": _ms(percentile(first_call, 0.5)),
        "first_call_p99_ms": _ms(percentile(first_call, 0.99)),
        "peak_rss_mb": round(vm_hwm(me.pid) / 1e6, 1), "peak_tree_rss_mb": round(peak_tree / 1e6, 1),
        "instances_started": started_instances, "retried_first_calls": failures, "processes_left": len(left),
    }


async def latency(args: argparse.Namespace) -> dict[str, Any]:
    """Sequential calls to the shared server through two supervisors in this process, one
    journalling and one not, in alternating blocks (A B B A ...): per-block p50s, and the
    median of the per-pair ratios (a machine that slows down slows both alike)."""
    from mcpvisor.tree import open_supervisor

    workdir = Path(args.workdir)
    per_block = max(50, args.latency // (4 * args.rounds))
    on: list[float] = []
    off: list[float] = []
    ratios: list[float] = []
    async with open_supervisor(config(0, workdir / "journal.db"), state_dir=workdir / "state-on",
                               watch=False) as with_journal, \
            open_supervisor(config(0, None), state_dir=workdir / "state-off", watch=False) as without:
        await with_journal.wait_ready()
        await without.wait_ready()
        async with with_journal.session("latency") as a, without.session("latency") as b:
            for s in (a, b):
                for _ in range(args.warmup):
                    await s.call_tool("shared_echo", {"text": "warm"})
            for rnd in range(2 * args.rounds):
                order = (a, b) if rnd % 2 == 0 else (b, a)
                medians: dict[Any, float] = {}
                for s in order:
                    times = []
                    for _ in range(per_block):
                        t0 = time.perf_counter()
                        await s.call_tool("shared_echo", {"text": "x" * 64})
                        times.append(time.perf_counter() - t0)
                    (on if s is a else off).extend(times)
                    medians[s] = percentile(times, 0.5) or 0.0
                if medians[b]:
                    ratios.append(medians[a] / medians[b])
    ratios.sort()
    return {"calls": len(on) + len(off), "blocks": len(ratios), "on_p50_ms": _ms(percentile(on, 0.5)),
            "off_p50_ms": _ms(percentile(off, 0.5)), "on_p99_ms": _ms(percentile(on, 0.99)),
            "off_p99_ms": _ms(percentile(off, 0.99)),
            "ratio_p50": round(ratios[len(ratios) // 2], 3) if ratios else None}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcpvisor.bench.harness_run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--pool", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--no-journal", action="store_true")
    p.add_argument("--latency", type=int, default=0, metavar="N", help="measure N calls instead of episodes")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--rounds", type=int, default=10, help="--latency: pairs of alternating blocks")
    args = p.parse_args(argv)
    result = trio.run(latency if args.latency else episodes, args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
