"""Reading a journal back: the summary ``mcpvisor journal PATH`` prints.

Owns `summarise` (per server and tool: calls, errors, latency p50/p99; per run: calls
and failures; the outcome counts) and `format_table` (that summary as text). Works on a
journal whose writer was killed mid-run: SQLite replays the committed WAL on open.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mcpvisor.pgstore import is_store_url, shown_url

RUNS_SHOWN: Final = 50
"""Runs listed in the table at most (the JSON has them all); a harness runs hundreds."""


class JournalMissing(Exception):
    """The file does not exist or is not a journal."""


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (``q`` in 0..100)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarise(path: str | Path, *, run: str | None = None) -> dict[str, Any]:
    """The journal at ``path`` summarised (only run ``run`` when given).

    Raises:
        JournalMissing: no such file, or it has no ``calls`` table.
    """
    def query(conn: sqlite3.Connection) -> list[Any]:
        where, args = ("WHERE run = ?", (run,)) if run is not None else ("", ())
        return conn.execute(
            "SELECT server, tool, run, session, outcome, latency_ms, retries FROM calls "
            f"{where} ORDER BY id",
            args,
        ).fetchall()

    rows = _read(path, query)
    latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
    errors: dict[tuple[str, str], int] = defaultdict(int)
    runs: dict[str, dict[str, int]] = {}
    outcomes: dict[str, int] = defaultdict(int)
    sessions: set[str] = set()
    retries = 0
    for server, tool, run_label, session, outcome, latency, retried in rows:
        key = (server, tool)
        latencies[key].append(latency)
        outcomes[outcome] += 1
        retries += retried or 0
        failed = outcome != "ok"
        if failed:
            errors[key] += 1
        if session:
            sessions.add(session)
        label = run_label or ""
        entry = runs.setdefault(label, {"calls": 0, "failures": 0})
        entry["calls"] += 1
        entry["failures"] += int(failed)
    tools = []
    for (server, tool), values in sorted(latencies.items()):
        values.sort()
        tools.append({"server": server, "tool": tool, "calls": len(values), "errors": errors[(server, tool)],
                      "p50_ms": round(percentile(values, 50), 3), "p99_ms": round(percentile(values, 99), 3)})
    out = {
        "path": shown_url(str(path)) if is_store_url(str(path)) else str(Path(path)),
        "run": run,
        "calls": len(rows),
        "outcomes": dict(sorted(outcomes.items())),
        "retries": retries,
        "sessions": len(sessions),
        "tools": tools,
        "runs": [{"run": label or None, **counts} for label, counts in runs.items()],
    }
    if is_store_url(str(path)):  # one table for every replica: how many calls each served
        from mcpvisor.pgstore.journal import replicas

        try:
            out["replicas"] = replicas(str(path), run)
        except Exception as exc:  # the summary is already read; this part is extra
            raise JournalMissing(str(exc)) from None
    return out


def recent_calls(path: str | Path, limit: int, *, run: str | None = None) -> list[dict[str, Any]]:
    """The last ``limit`` calls, oldest first, each with its trace id (None: not traced).

    Raises:
        JournalMissing: no such file, or it has no ``calls`` table.
    """
    def query(conn: sqlite3.Connection) -> list[Any]:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
        trace = "trace_id" if "trace_id" in columns else "NULL"  # a version 1 journal has none
        where, args = ("WHERE run = ?", (run,)) if run is not None else ("", ())
        return conn.execute(
            f"SELECT time, run, server, tool, outcome, latency_ms, {trace} FROM calls {where} "
            "ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()

    rows = _read(path, query)
    return [{"time": t, "run": r, "server": server, "tool": tool, "outcome": outcome,
             "latency_ms": round(latency, 3), "trace_id": trace_id}
            for t, r, server, tool, outcome, latency, trace_id in reversed(rows)]


def _read(path: str | Path, query: Callable[[sqlite3.Connection], list[Any]]) -> list[Any]:
    """``query``'s rows from the journal at ``path``, the connection closed after.

    Raises:
        JournalMissing: no such file, or not a journal (no ``calls`` table).
    """
    if is_store_url(str(path)):  # the shared journal of several replicas
        from mcpvisor.pgstore import StoreError
        from mcpvisor.pgstore.journal import read_rows

        try:
            return read_rows(str(path), query)
        except StoreError as exc:
            raise JournalMissing(str(exc)) from None
    p = Path(path)
    if not p.is_file():
        raise JournalMissing(f"no journal at {p}")
    try:
        conn = sqlite3.connect(p)
        try:
            return query(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise JournalMissing(f"{p} is not a journal: {exc}") from None


def format_calls(calls: list[dict[str, Any]]) -> str:
    """The calls as aligned text, one a line, with their trace ids ("-": not traced)."""
    header = ("time", "run", "server", "tool", "outcome", "ms", "trace id")
    body: list[tuple[str, ...]] = [
        (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["time"])), c["run"] or "-", c["server"],
         c["tool"], c["outcome"], f"{c['latency_ms']:.2f}", c["trace_id"] or "-") for c in calls]
    return "\n".join(_columns(header, body, left=5))


def format_table(summary: dict[str, Any]) -> str:
    """The summary as aligned text: totals, then per tool, then per run."""
    totals = f"{summary['calls']} calls, {summary['sessions']} sessions, {summary['retries']} retries"
    outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
    lines = [f"journal {summary['path']}" + (f" (run {summary['run']})" if summary["run"] else ""),
             totals + (f"; {outcomes}" if outcomes else "")]
    if summary.get("replicas"):
        shares = ", ".join(f"{name} {calls}" for name, calls in summary["replicas"].items())
        lines.append(f"replicas: {shares}")
    if summary["tools"]:
        lines.append("")
        header = ("server", "tool", "calls", "errors", "p50 ms", "p99 ms")
        body: list[tuple[str, ...]] = [
            (t["server"], t["tool"], str(t["calls"]), str(t["errors"]), f"{t['p50_ms']:.2f}",
             f"{t['p99_ms']:.2f}") for t in summary["tools"]]
        lines += _columns(header, body)
    runs = summary["runs"]
    if runs:
        lines.append("")
        runs_body: list[tuple[str, ...]] = [(r["run"] or "-", str(r["calls"]), str(r["failures"]))
                                            for r in runs[:RUNS_SHOWN]]
        lines += _columns(("run", "calls", "failures"), runs_body)
        if len(runs) > RUNS_SHOWN:
            lines.append(f"... and {len(runs) - RUNS_SHOWN} more runs (--format json lists them all)")
    return "\n".join(lines)


def _columns(header: tuple[str, ...], body: list[tuple[str, ...]], *, left: int = 2) -> list[str]:
    """Aligned rows: the first ``left`` columns to the left, the numbers to the right."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    out = []
    for row in [header, *body]:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [cell.ljust(w) if i < left or i == len(row) - 1 else cell.rjust(w) for i, (cell, w) in pairs]
        out.append("  ".join(cells).rstrip())
    return out
