"""The ``harness`` scenario: episodes of a benchmark harness against the supervisor API.

Each subject is a fresh process running `mcpvisor.bench.harness_run`: 100 episodes (10 at a time),
each with its own instance of a session-scoped server and calls to a shared one, with
no warm pool (``pool-0``) and with a pool as large as the concurrency (``pool-10``);
rounds alternate the two. Reported: wall time of the episodes, episode start to first
successful call (p50/p99), peak RSS of the harness process (supervisor included) and
of its whole tree (upstreams included), processes left after the supervisor's block
(must be 0). The ``journal`` row is the journal's cost: sequential calls through two
supervisors in one process, with and without a journal, in alternating blocks; its
``journal_ratio`` is the median per-pair ratio of p50s (target: under 1.1). The
``journal-stdio`` row is the same ratio through ``mcpvisor serve`` over stdio (the
fast path a client meets), in alternating rounds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.bench.core import Params, Result, median, rnd

EPISODES: Final = 100
CONCURRENCY: Final = 10
"""Episodes in flight at once: a harness on a 2-core machine runs about this many."""

POOL: Final = CONCURRENCY
"""The warm pool for the pooled subject: one instance per episode in flight."""

RUN_TIMEOUT_S: Final = 300.0
"""One harness run (100 episodes) may take this long before it is reported as failed."""

COLUMNS: Final = ["wall_s", "first_call_p50_ms", "first_call_p99_ms", "peak_rss_mb", "peak_tree_rss_mb",
                  "processes_left", "journal_ratio"]


async def _run(argv: list[str], workdir: Path) -> dict[str, Any]:
    from mcpvisor.bench.drivers import PYTHON, REPO_DIR
    from mcpvisor.bench.procs import base_env

    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    with trio.fail_after(RUN_TIMEOUT_S):
        done = await trio.run_process([PYTHON, "-m", "mcpvisor.bench.harness_run",
                                       "--workdir", str(workdir), *argv],
                                      capture_stdout=True, capture_stderr=True, env=base_env(),
                                      cwd=str(REPO_DIR), check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"harness run failed ({done.returncode}): {' / '.join(tail)}")
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


def _this_checkout(subject: Any) -> Any:
    """``subject`` running this checkout's mcpvisor (the harness runs import it from here
    too), whatever an installed copy elsewhere holds."""
    from dataclasses import replace

    from mcpvisor.bench.drivers import REPO_DIR

    def launch(*args: Any) -> Any:
        got = subject.launch(*args)
        got.env["PYTHONPATH"] = str(REPO_DIR)
        return got

    return replace(subject, launch=launch)


async def stdio_journal_ratio(params: Params, workdir: Path) -> dict[str, Any]:
    """The journal's cost on the lean path a client meets: ``mcpvisor serve`` over stdio
    (the fast path), with ``settings.journal`` and without, sequential ``echo`` calls in
    alternating rounds; the median of per-round p50 ratios."""
    from mcpvisor.bench.drivers import ServerDef, mcpvisor_subject, open_session
    from mcpvisor.bench.scenarios_calls import latency

    plain = _this_checkout(mcpvisor_subject("mcpvisor"))
    journalled = _this_checkout(mcpvisor_subject("mcpvisor-journal", journal="journal.db"))  # by its config
    servers = [ServerDef("bench")]
    rounds = 3 if params.quick else 5
    on: list[float] = []
    off: list[float] = []
    ratios: list[float] = []
    async with open_session(plain, servers, workdir) as a, open_session(journalled, servers, workdir) as b:
        for session in (a, b):
            # A proxy lists at once what it knows: the upstream's tools may come a moment later.
            await session.wait_tool("echo")
            await latency(session, "echo", {"text": "warm"}, 30)
        for i in range(rounds):
            got: dict[str, float] = {}
            for session in ((a, b) if i % 2 == 0 else (b, a)):
                m = await latency(session, "echo", {"text": "x" * 64}, params.calls, params.measure_s)
                got[session.subject.name] = m["p50_ms"]
            on.append(got["mcpvisor-journal"])
            off.append(got["mcpvisor"])
            ratios.append(got["mcpvisor-journal"] / got["mcpvisor"])
    return {"ratio_p50": rnd(median(ratios)), "on_p50_ms": rnd(median(on)), "off_p50_ms": rnd(median(off)),
            "rounds": rounds}


async def run_harness(params: Params, workdir: Path) -> Result:
    """Run the scenario (see the module docstring)."""
    result = Result("harness", f"{EPISODES} episodes x (1 session-scoped + 1 shared server), "
                               f"{CONCURRENCY} at a time", list(COLUMNS))
    rounds = 1 if params.quick else 2
    latency_calls = 2000 if params.quick else 8000
    result.params = {"episodes": EPISODES, "concurrency": CONCURRENCY, "pool": POOL, "rounds": rounds,
                     "latency_calls": latency_calls}
    started = time.perf_counter()
    per_subject: dict[str, list[dict[str, Any]]] = {"pool-0": [], f"pool-{POOL}": []}
    try:
        for rnd_i in range(rounds):
            order = [0, POOL] if rnd_i % 2 == 0 else [POOL, 0]
            for pool in order:
                got = await _run(["--episodes", str(EPISODES), "--concurrency", str(CONCURRENCY),
                                  "--pool", str(pool)], workdir / f"harness-{rnd_i}-{pool}")
                per_subject[f"pool-{pool}"].append(got)
        latency = await _run(["--latency", str(latency_calls)], workdir / "harness-latency")
        stdio = await stdio_journal_ratio(params, workdir)
    except (RuntimeError, trio.TooSlowError, ValueError, KeyError) as exc:
        result.error = str(exc) or type(exc).__name__
        result.seconds = time.perf_counter() - started
        return result
    for subject, runs in per_subject.items():
        row: dict[str, Any] = {"subject": subject, "kind": "mcpvisor"}
        for metric in COLUMNS[:-1]:
            values = [r[metric] for r in runs if r.get(metric) is not None]
            row[metric] = max(values) if metric == "processes_left" else rnd(median(values))
        row["instances_started"] = max(r["instances_started"] for r in runs)
        result.rows.append(row)
    result.rows.append({"subject": "journal", "kind": "mcpvisor", "journal_ratio": latency["ratio_p50"],
                        "on_p50_ms": latency["on_p50_ms"], "off_p50_ms": latency["off_p50_ms"]})
    result.rows.append({"subject": "journal-stdio", "kind": "mcpvisor", "journal_ratio": stdio["ratio_p50"],
                        "on_p50_ms": stdio["on_p50_ms"], "off_p50_ms": stdio["off_p50_ms"]})
    result.notes.append(f"journal-stdio: mcpvisor serve over stdio (fast path), p50 {stdio['on_p50_ms']} ms "
                        f"with the journal vs {stdio['off_p50_ms']} ms without, {stdio['rounds']} "
                        "alternating rounds")
    result.notes.append(f"journal on/off: p50 {latency['on_p50_ms']} ms vs {latency['off_p50_ms']} ms over "
                        f"{latency['calls']} calls in {latency['blocks']} alternating block pairs (API path, "
                        f"the smallest denominator: a trivial upstream, no front)")
    for subject in per_subject:
        result.target(subject, "processes_left", "<=", 0, "no process left after the block")
    result.target("journal", "journal_ratio", "<=", 1.1, "journal cost (p50 on / off), API path")
    result.target("journal-stdio", "journal_ratio", "<=", 1.1, "journal cost (p50 on / off), stdio fast path")
    result.seconds = time.perf_counter() - started
    return result
