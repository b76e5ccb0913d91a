"""Showing results: the table, the JSON lines, the results file, and the comparison with an older one.

Owns:

* `machine_info`: CPU model, cores, load, Python, OS, mcp/trio versions, git commit;
* `print_tables`: one rich table per scenario (rows per subject, skipped subjects and the
  targets underneath);
* `json_lines`: one compact JSON object per scenario, ``{"scenario": ..., ...}``;
* `compare`: per scenario, subject and metric, the change against an older results file,
  flagging a regression when a metric that is comparable across runs (ratios, memory,
  bytes) got worse by more than the threshold (10 % by default).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Final

from mcpvisor.bench.core import METRICS, Result

REGRESSION_THRESHOLD: Final = 0.10


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_commit(repo: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def machine_info(repo: Path) -> dict[str, Any]:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    try:
        import psutil

        mem_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:
        mem_gb = None
    return {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gb": mem_gb, "load_avg": load,
        "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}",
        "mcp": _version("mcp"), "trio": _version("trio"), "mcpvisor": _version("mcpvisor"),
        "git_commit": _git_commit(repo),
    }


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def label(metric: str, result: Result) -> str:
    m = METRICS.get(metric)
    text = m.label if m else metric
    conc = result.params.get("concurrency")
    if isinstance(conc, list) and len(conc) == 2:
        text = text.replace("c=32", f"c={conc[1]}")
    ups = result.params.get("upstreams")
    if isinstance(ups, list) and len(ups) == 2:
        text = text.replace("20", str(ups[1]))
    return text


def print_tables(results: Sequence[Result], info: dict[str, Any], file: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=140, highlight=False)
    console.print(f"[bold]mcpvisor bench[/bold] on {info.get('cpu')} ({info.get('cores')} cores), "
                  f"Python {info.get('python')}, mcp {info.get('mcp')}, trio {info.get('trio')}, "
                  f"load average at start {info.get('load_avg_start')}")
    for result in results:
        table = Table(title=f"{result.scenario}: {result.title}", title_justify="left", show_lines=False)
        table.add_column("subject", no_wrap=True)
        for col in result.columns:
            table.add_column(label(col, result), justify="right")
        for row in result.rows:
            name = row["subject"] + ("" if row.get("kind") != "peer" else " (peer)")
            table.add_row(name, *(fmt(row.get(c)) for c in result.columns))
        console.print(table)
        for skip in result.skipped:
            console.print(f"  skipped {skip['subject']}: {skip['reason']}")
        for t in result.targets:
            mark = {True: "[green]met[/green]", False: "[red]missed[/red]", None: "n/a"}[t["met"]]
            extra = f" (best peer {fmt(t['best_peer'])})" if "best_peer" in t else ""
            console.print(f"  target {t['what']}: {t['subject']} {t['metric']} = {fmt(t['value'])}, "
                          f"want {t['target']}{extra}: {mark}")
        for note in result.notes:
            console.print(f"  note: {note}")
        if result.error:
            console.print(f"  [red]error:[/red] {result.error}")


def json_lines(results: Sequence[Result]) -> list[str]:
    return [json.dumps(r.to_json(), separators=(",", ":"), default=str) for r in results]


def write_results(path: Path, results: Sequence[Result], info: dict[str, Any], argv: Sequence[str],
                  peers: dict[str, Any]) -> None:
    doc = {"machine": info, "argv": list(argv), "peers": peers, "scenarios": [r.to_json() for r in results]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def compare(old_doc: dict[str, Any], new: Sequence[Result],
            threshold: float = REGRESSION_THRESHOLD) -> list[dict[str, Any]]:
    """Per scenario, subject and metric present in both: old, new, relative change, regression flag.

    ``change`` is signed so that positive means better, whatever the metric's direction.
    A regression is a flagged metric (`Metric.flag`) whose change is below ``-threshold``.
    """
    old_rows: dict[tuple[str, str], dict[str, Any]] = {}
    for scenario in old_doc.get("scenarios", []):
        for row in scenario.get("rows", []):
            old_rows[(scenario["scenario"], row["subject"])] = row
    out = []
    for result in new:
        for row in result.rows:
            before = old_rows.get((result.scenario, row["subject"]))
            if before is None:
                continue
            for metric, spec in METRICS.items():
                a, b = before.get(metric), row.get(metric)
                if not isinstance(a, int | float) or not isinstance(b, int | float) or a == 0:
                    continue
                rel = (b - a) / abs(a)
                change = -rel if spec.lower_is_better else rel
                out.append({"scenario": result.scenario, "subject": row["subject"], "metric": metric,
                            "old": a, "new": b, "change": round(change, 4),
                            "regression": bool(spec.flag and change < -threshold)})
    return out


def print_comparison(rows: Sequence[dict[str, Any]], old_path: str, threshold: float,
                     file: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=140, highlight=False)
    table = Table(title=f"compared with {old_path} (change: + is better; regression = a ratio, "
                        f"memory or size worse by more than {threshold:.0%})", title_justify="left")
    for col in ("scenario", "subject", "metric", "old", "new", "change", ""):
        table.add_column(col, justify="right" if col in ("old", "new", "change") else "left")
    for r in rows:
        flag = "[red]REGRESSION[/red]" if r["regression"] else ""
        table.add_row(r["scenario"], r["subject"], r["metric"], fmt(r["old"]), fmt(r["new"]),
                      f"{r['change']:+.1%}", flag)
    console.print(table)
    n = sum(1 for r in rows if r["regression"])
    console.print(f"{n} regression(s)" if n else "no regressions")
