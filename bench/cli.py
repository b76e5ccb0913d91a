"""``python -m mcpvisor.bench`` / ``mcpvisor bench``: run the scenarios, print the table and the JSON lines.

Owns the command line, the order scenarios run in, the temporary directory every config,
state directory and log goes into, and the guarantee that nothing the bench started
outlives it (Ctrl-C, SIGTERM, SIGHUP and failing scenarios included): a stop signal cancels
the run like Ctrl-C does, sessions stop their process groups on the way out, and a final
sweep kills anything still carrying this run's token. SIGKILL cannot be caught; the
subjects then outlive the bench (they run in their own sessions), and the next run's
sweep does not know their token: they are the processes with ``MCPVISOR_BENCH_TOKEN`` in
their environment.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

SCENARIOS: Final = ("latency", "latency_work", "throughput", "payload", "peers", "raw", "http_latency",
                    "http_throughput", "http_peers", "imports", "startup", "first_list", "rss",
                    "tools_list_size", "list_changed", "recovery", "harness")
EXIT_OK: Final = 0
EXIT_REGRESSION: Final = 1
EXIT_USAGE: Final = 2
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived: the run is cancelled, its processes stopped, the exit code 128+N."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    """Outside trio (peer installs): a stop signal unwinds like Ctrl-C, through the sweep."""
    raise Stopped(signum)

EPILOG: Final = """\
scenarios: """ + ", ".join(SCENARIOS) + """

examples:
  python -m mcpvisor.bench --quick                         # everything, small sizes (minutes: peers are slow)
  python -m mcpvisor.bench --out bench/results/latest.json # the full run, saved
  python -m mcpvisor.bench --compare bench/results/latest.json --only latency,throughput
  python -m mcpvisor.bench --only latency --calls 20 --no-peers --json
  python -m mcpvisor.bench --setup-peers                   # install the peers (npm ones pinned) first
  python -m mcpvisor.bench --only peers,http_peers         # every peer at 1, 8 and 32 in flight
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="small sizes: 2 rounds, 150 calls, 3 s per measurement")
    p.add_argument("--out", metavar="FILE", help="write all results and machine info to this JSON file")
    p.add_argument("--compare", metavar="OLD.json",
                   help="compare with an earlier --out file; exit 1 on a regression")
    p.add_argument("--threshold", type=float, default=0.10, metavar="F",
                   help="--compare flags a ratio/memory/size worse by more than this fraction (default 0.10)")
    p.add_argument("--only", metavar="NAME,...", help="run only these scenarios (comma-separated)")
    p.add_argument("--no-peers", action="store_true", help="skip the peer proxies (no install, no runs)")
    p.add_argument("--peers", metavar="NAME,...",
                   help="run only these peers (fastmcp, magg, mcp-proxy, mcp-hub, supergateway)")
    p.add_argument("--setup-peers", action="store_true",
                   help="install every peer (PyPI venvs; the npm ones pinned in bench/peers/npm) and exit")
    p.add_argument("--no-install", action="store_true",
                   help="use peers already installed under bench/.peers only")
    p.add_argument("--json", action="store_true", help="print only the JSON lines (no table)")
    p.add_argument("--calls", type=int, metavar="N", help="sequential calls per subject per round (latency)")
    p.add_argument("--rounds", type=int, metavar="N", help="alternating rounds per scenario")
    p.add_argument("--no-nofast", action="store_true", help="do not run mcpvisor with settings.fastPath off")
    p.add_argument("--no-metrics", action="store_true",
                   help="do not run mcpvisor with metrics recorded (--metrics-port) beside it (stdio)")
    p.add_argument("--no-floor", action="store_true",
                   help="do not run the trio relay (bench/relay.py: the least a trio proxy costs) "
                   "beside them (stdio)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (configs, logs)")
    p.add_argument("--load", metavar="FILE",
                   help="run nothing: show (and --compare) the results saved in FILE")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcpvisor.bench",
                                description="Measure what mcpvisor costs, as ratios against calling "
                                "the upstream directly and against peer proxies.",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    add_arguments(p)
    return p


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def selected(only: str | None) -> list[str]:
    if not only:
        return list(SCENARIOS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s): {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    return [n for n in SCENARIOS if n in names]


def run(args: argparse.Namespace) -> int:
    """Run the bench for parsed ``args``; returns the exit code."""
    from dataclasses import replace

    try:
        from mcpvisor.bench import procs
        from mcpvisor.bench.core import Params
        from mcpvisor.bench.drivers import DIRECT, METRICS_SUBJECT, REPO_DIR, TRIO_RELAY, mcpvisor_subject
        from mcpvisor.bench.report import json_lines, machine_info, print_tables, write_results
    except ModuleNotFoundError as exc:  # an install older than psutil in the main dependencies
        err(f"bench: the bench needs the Python package {exc.name!r}, which is not installed: "
            f"pip install 'mcpvisor[bench]' (from a checkout: pip install -e '.[bench]')")
        return EXIT_USAGE

    try:
        wanted = selected(args.only)
    except ValueError as exc:
        err(f"bench: {exc}")
        return EXIT_USAGE
    old_doc = None
    if args.compare:
        try:
            old_doc = json.loads(Path(args.compare).read_text())
        except (OSError, ValueError) as exc:
            err(f"bench: cannot read {args.compare}: {exc}")
            return EXIT_USAGE
    if args.load:
        return show_saved(args, old_doc)
    if args.setup_peers:
        from mcpvisor.bench.peers import setup_peers

        failed = setup_peers(echo=err)
        for name, reason in failed:
            err(f"bench: peer {name} not installed: {reason}")
        return EXIT_OK if not failed else EXIT_USAGE
    params = Params.quick_run() if args.quick else Params.full_run()
    if args.calls:
        params = replace(params, calls=args.calls, throughput_calls=max(args.calls, params.concurrency),
                         payload_calls=max(1, min(params.payload_calls, args.calls)))
    if args.rounds:
        params = replace(params, rounds=args.rounds, startup_rounds=args.rounds,
                         recovery_rounds=min(args.rounds, params.recovery_rounds))

    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)
    peers: list[Any] = []
    peer_skips: list[tuple[str, str]] = []
    if not args.no_peers:
        from mcpvisor.bench.peers import peer_subjects

        names = [n.strip() for n in args.peers.split(",")] if args.peers else None
        try:
            peers, peer_skips = peer_subjects(names, install=not args.no_install, echo=err)
        except Stopped as exc:
            err(f"bench: stopped by {exc} while installing peers")
            return 128 + exc.signum
    ours = [mcpvisor_subject("mcpvisor", fast_path=True)]
    # Rows beside mcpvisor that are neither direct nor a peer: its own variants and the floor.
    variants = [] if args.no_nofast else [mcpvisor_subject("mcpvisor-nofast", fast_path=False)]
    if not args.no_metrics:  # the cost of metrics: a variant beside the others (stdio call scenarios)
        variants.append(mcpvisor_subject(METRICS_SUBJECT, metrics=True))
    if not args.no_floor:  # stdio only: the HTTP scenarios leave it out by its transports
        variants.append(TRIO_RELAY)

    workdir = Path(tempfile.mkdtemp(prefix="mcpvisor-bench-"))
    info = machine_info(REPO_DIR)
    info["load_avg_start"] = info.pop("load_avg")
    started = time.perf_counter()
    results: list[Any] = []
    try:
        import trio

        partial = Path(args.out + ".partial") if args.out else None
        if partial is not None:
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.unlink(missing_ok=True)
        results = trio.run(_guarded, wanted, params, workdir, [DIRECT, *ours], variants, peers, partial)
        if partial is not None:
            partial.unlink(missing_ok=True)
    except Stopped as exc:
        err(f"bench: stopped by {exc}; stopped everything it started")
        return 128 + exc.signum
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        err("bench: interrupted; stopped everything it started")
        return 130
    finally:
        killed = procs.sweep()
        if killed:
            err(f"bench: killed {len(killed)} leftover process(es): {killed[:3]}")
        if args.keep:
            err(f"bench: kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    for result in results:
        for name, reason in peer_skips:
            result.skip(name, reason)
    from mcpvisor.bench.stalls import WATCH

    end_info = machine_info(REPO_DIR)
    info["load_avg_end"] = end_info["load_avg"]
    info["machine_stalled_s"] = round(WATCH.total, 1)
    info["seconds"] = round(time.perf_counter() - started, 1)
    info["mode"] = "quick" if params.quick else "full"
    peer_info = {"ran": [p.name for p in peers], "notes": {p.name: p.note for p in peers},
                 "skipped": dict(peer_skips)}
    if not args.json:
        print_tables(results, info)
        print(f"total {info['seconds']} s, of which the machine was paused {info['machine_stalled_s']} s "
              f"(bench/stalls.py); load average at start {info['load_avg_start']}, "
              f"at end {info['load_avg_end']}")
    for line in json_lines(results):
        print(line, flush=True)
    if args.out:
        write_results(Path(args.out), results, info, sys.argv, peer_info)
        if not args.json:
            print(f"results written to {args.out}")
    return compare_with(args, old_doc, results)


def compare_with(args: argparse.Namespace, old_doc: dict[str, Any] | None, results: Sequence[Any]) -> int:
    """Print the comparison with ``old_doc`` (if any); the exit code says whether something regressed."""
    from mcpvisor.bench.report import compare, print_comparison

    if old_doc is None:
        return EXIT_OK
    rows = compare(old_doc, results, args.threshold)
    if args.json:
        print(json.dumps({"compare": args.compare, "changes": rows}, separators=(",", ":")))
    else:
        print_comparison(rows, args.compare, args.threshold)
    return EXIT_REGRESSION if any(r["regression"] for r in rows) else EXIT_OK


def show_saved(args: argparse.Namespace, old_doc: dict[str, Any] | None) -> int:
    """``--load FILE``: the table and JSON lines of a saved run, and its comparison with ``--compare``."""
    from mcpvisor.bench.core import Result
    from mcpvisor.bench.report import json_lines, print_tables

    try:
        doc = json.loads(Path(args.load).read_text())
        results = [Result(**scenario) for scenario in doc["scenarios"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        err(f"bench: cannot read results from {args.load}: {exc}")
        return EXIT_USAGE
    if not args.json:
        print_tables(results, doc.get("machine", {}))
    for line in json_lines(results):
        print(line, flush=True)
    return compare_with(args, old_doc, results)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, bare or inside the exception groups trio's nurseries wrap it in."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(KeyboardInterrupt)[0] is not None
    return False


async def _guarded(*args: Any) -> list[Any]:
    """`_main` under the stop signals: the first one cancels the run (every session stops its
    processes on the way out, shielded) and the run ends with `Stopped`."""
    import trio

    from mcpvisor.bench.stalls import WATCH

    got: list[int] = []
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                async for signum in signals:
                    got.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            await nursery.start(WATCH.run)  # the stall canary: bench/stalls.py
            results = await _main(*args)
            nursery.cancel_scope.cancel()
    if got:
        raise Stopped(got[0])
    return results


async def _main(wanted: Sequence[str], params: Any, workdir: Path, core: list[Any], variants: list[Any],
                peers: list[Any], partial: Path | None = None) -> list[Any]:
    from mcpvisor.bench.core import Result
    from mcpvisor.bench.scenarios_calls import HTTP_SCENARIOS, STDIO_SCENARIOS, run_call_group
    from mcpvisor.bench.scenarios_fleet import fleet_memory_and_size, run_menu, run_recovery, run_startup

    results: dict[str, Result] = {}

    from mcpvisor.bench.scenarios_calls import note_stalls
    from mcpvisor.bench.stalls import WATCH

    stalls_at = WATCH.total

    def done(items: Sequence[Result]) -> None:
        nonlocal stalls_at
        for r in items:
            if "machine_stalled_s" not in r.params:  # the call scenarios count their own
                note_stalls(r, WATCH.total - stalls_at)
            results[r.scenario] = r
            err(f"bench: {r.scenario} done in {r.seconds:.1f} s"
                + (f" (error: {r.error})" if r.error else ""))
            if partial is not None:  # an interrupted long run keeps what it measured
                with open(partial, "a", encoding="utf-8") as f:
                    f.write(json.dumps(r.to_json(), separators=(",", ":"), default=str) + "\n")
        stalls_at = WATCH.total

    multi_peers = [p for p in peers if p.multi]
    single = [p for p in peers if not p.multi]

    def note_single(result: Result) -> Result:
        for p in single:
            result.skip(p.name, "fronts one server per endpoint; it does not aggregate several upstreams")
        return result

    calls = [n for n in STDIO_SCENARIOS if n in wanted]
    if calls:
        err(f"bench: {', '.join(calls)} (stdio) ...")
        done(await run_call_group("stdio", calls, [*core, *variants, *peers], params, workdir))
    if "raw" in wanted:
        from mcpvisor.bench.scenarios_raw import run_raw

        err("bench: raw (stdio) ...")
        t0 = time.perf_counter()
        r = await run_raw([*core, *variants, *peers], params, workdir)
        r.seconds = time.perf_counter() - t0
        done([r])
    http = [n for n in HTTP_SCENARIOS if n in wanted]
    if http:
        err(f"bench: {', '.join(http)} ...")
        # Neither the metrics variant (the HTTP front always records them) nor the relay (stdio only).
        over_http = [s for s in variants if "http" in s.transports]
        done(await run_call_group("http", http, [*core, *over_http, *peers], params, workdir))
    if "imports" in wanted:
        from mcpvisor.bench.scenarios_imports import run_imports

        err("bench: imports (python -X importtime) ...")
        t0 = time.perf_counter()
        r = await run_imports(params, workdir)
        r.seconds = time.perf_counter() - t0
        for p in peers:
            r.skip(p.name, "measures mcpvisor's own start-up imports (no equivalent command)")
        done([r])
    if "startup" in wanted:
        err("bench: startup ...")
        t0 = time.perf_counter()
        r = note_single(await run_startup([*core, *multi_peers], params, workdir))
        r.seconds = time.perf_counter() - t0
        done([r])
    if "first_list" in wanted:
        from mcpvisor.bench.scenarios_startup import run_first_list

        err("bench: first_list ...")
        t0 = time.perf_counter()
        r = await run_first_list(params, workdir)
        r.seconds = time.perf_counter() - t0
        done([r])
    fleet_wanted = [n for n in ("rss", "tools_list_size") if n in wanted]
    size: Result | None = None
    if fleet_wanted:
        err(f"bench: {', '.join(fleet_wanted)} ...")
        t0 = time.perf_counter()
        got = [note_single(r) for r in await fleet_memory_and_size([*core, *multi_peers], params, workdir,
                                                                   fleet_wanted)]
        for r in got:
            r.seconds = time.perf_counter() - t0
            if r.scenario == "tools_list_size":
                size = r
        done(got)
    if "list_changed" in wanted or size is not None:
        err("bench: list_changed and the menu/toolset sizes ...")
        t0 = time.perf_counter()
        changed = await run_menu(params, workdir, size, "list_changed" in wanted)
        if changed is not None:
            changed.seconds = time.perf_counter() - t0
            for p in peers:
                changed.skip(p.name, "has no toolsets to equip (no equivalent operation)")
            done([changed])
    if size is not None:
        from mcpvisor.bench.scenarios_discovery import run_discovery

        err("bench: discovery sizes, load_mcp and use_tool ...")
        await run_discovery(params, workdir, size)
    if "recovery" in wanted:
        err("bench: recovery ...")
        t0 = time.perf_counter()
        r = await run_recovery([*core, *peers], params, workdir)
        r.seconds = time.perf_counter() - t0
        done([r])
    if "harness" in wanted:
        from mcpvisor.bench.scenarios_harness import run_harness

        err("bench: harness (100 episodes, session-scoped servers, the journal's cost) ...")
        r = await run_harness(params, workdir)
        for p in peers:
            r.skip(p.name, "has no session-scoped servers or journal (no equivalent)")
        done([r])
    return [results[n] for n in SCENARIOS if n in results]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)
