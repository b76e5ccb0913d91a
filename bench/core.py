"""The pieces every scenario shares: run parameters, results, statistics, interleaving.

Owns:

* `Params`: how long each scenario runs (``--quick`` or full, plus overrides);
* `Result`: one scenario's outcome — a row per subject with its metrics, the subjects
  skipped and why, the targets and whether they were met — and its JSON form (one object
  per scenario, ``{"scenario": ..., ...}``);
* `METRICS`: each metric's unit, which direction is better, and whether a change in it is
  a regression `--compare` should flag (ratios, memory and bytes; absolute times depend on
  the machine);
* statistics (median, percentiles) and `ratio_rows`: per-round ratios against the direct
  row of the same round, so a machine that slows down between rounds does not fake a result.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final


@dataclass(frozen=True)
class Params:
    """Sizes of one run: `quick_run()` small, `full_run()` the one the README reports
    (about 10 minutes of machine time on 2 cores)."""

    quick: bool
    rounds: int
    calls: int  # sequential latency calls per subject per round
    throughput_calls: int  # calls per throughput measurement (each concurrency, each round)
    payload_calls: int
    payload_bytes: int
    startup_rounds: int
    fleet: int  # upstreams in the startup / RSS / size scenarios
    fleet_tools: int
    toolset_size: int
    menu_rounds: int
    recovery_rounds: int
    recovery_timeout_s: float
    work_ms: float
    concurrency: int
    fleet_timeout_s: float = 90.0
    """How long a subject may take to list every tool of the fleet before it is skipped."""
    measure_s: float = 8.0
    """A latency or throughput measurement stops after this many seconds even if it made fewer
    calls than asked (the calls made are reported): a slow subject cannot stretch the run."""
    import_runs: int = 7
    """Launches per command in the imports scenario (the median is reported)."""
    workdir: Path | None = None

    @classmethod
    def quick_run(cls) -> Params:
        return cls(quick=True, rounds=2, calls=150, throughput_calls=300, payload_calls=5,
                   payload_bytes=1 << 20, startup_rounds=1, fleet=20, fleet_tools=10, toolset_size=5,
                   menu_rounds=3, recovery_rounds=1, recovery_timeout_s=5.0, work_ms=1.0, concurrency=32,
                   fleet_timeout_s=45.0, measure_s=3.0, import_runs=3)

    @classmethod
    def full_run(cls) -> Params:
        return cls(quick=False, rounds=3, calls=1000, throughput_calls=2000, payload_calls=20,
                   payload_bytes=1 << 20, startup_rounds=2, fleet=20, fleet_tools=10, toolset_size=5,
                   menu_rounds=10, recovery_rounds=7, recovery_timeout_s=15.0, work_ms=1.0, concurrency=32,
                   measure_s=6.0)


@dataclass(frozen=True)
class Metric:
    unit: str
    lower_is_better: bool
    flag: bool  # --compare flags a regression in it
    label: str


METRICS: Final[dict[str, Metric]] = {
    "p50_ms": Metric("ms", True, False, "p50 ms"),
    "p99_ms": Metric("ms", True, False, "p99 ms"),
    "ratio_p50": Metric("x", True, True, "p50 ratio"),
    "ratio_p99": Metric("x", True, True, "p99 ratio"),
    "added_p50_ms": Metric("ms", True, False, "p50 added ms"),
    "c1_calls_s": Metric("calls/s", False, False, "c=1 calls/s"),
    "cN_calls_s": Metric("calls/s", False, False, "c=32 calls/s"),
    "ratio_c1": Metric("x", False, True, "c=1 ratio"),
    "ratio_cN": Metric("x", False, True, "c=32 ratio"),
    "cN_p50_ms": Metric("ms", True, False, "c=32 p50 ms"),
    "raw_calls_s": Metric("calls/s", False, False, "calls/s"),
    "raw_ratio": Metric("x", False, True, "ratio"),
    # The peers scenarios: short labels, fifteen columns share one table.
    **{f"at{c}_calls_s": Metric("calls/s", False, False, f"{c}: /s") for c in (1, 8, 32)},
    **{f"at{c}_ratio": Metric("x", False, True, f"{c}: x") for c in (1, 8, 32)},
    **{f"at{c}_p{q}_ms": Metric("ms", True, False, f"{c}: p{q}") for c in (1, 8, 32) for q in (50, 95, 99)},
    "rss_mb": Metric("MB", True, True, "RSS MB"),
    "peak_rss_mb": Metric("MB", True, True, "peak RSS MB"),
    "upstream_rss_mb": Metric("MB", True, False, "per-upstream RSS MB"),
    "startup_1_s": Metric("s", True, False, "1 upstream s"),
    "startup_N_s": Metric("s", True, False, "20 upstreams s"),
    "ratio_1": Metric("x", True, True, "1 ratio"),
    "ratio_N": Metric("x", True, True, "20 ratio"),
    "overlap": Metric("x", True, True, "20/1"),
    "equip_ms": Metric("ms", True, False, "equip -> list_changed ms"),
    "enter_ms": Metric("ms", True, False, "enter-configuration-mode -> list_changed ms"),
    "call_ms": Metric("ms", True, False, "equip call ms"),
    "bytes": Metric("B", True, True, "bytes"),
    "tokens": Metric("tokens", True, True, "~tokens"),
    "tools": Metric("", True, False, "tools"),
    "ratio_bytes": Metric("x", True, True, "bytes ratio"),
    "recovery_s": Metric("s", True, True, "recovery s"),
    "upstream_ms": Metric("ms", True, False, "upstream's own start ms"),
    "rest_ms": Metric("ms", True, True, "the rest ms"),
    "recovered": Metric("", False, False, "recovered"),
    "cpu_ms_per_call": Metric("ms", True, False, "server CPU ms/call"),
    "wall_s": Metric("s", True, False, "wall s"),
    "first_call_p50_ms": Metric("ms", True, False, "first call p50 ms"),
    "first_call_p99_ms": Metric("ms", True, False, "first call p99 ms"),
    "peak_tree_rss_mb": Metric("MB", True, False, "peak RSS with upstreams MB"),
    "processes_left": Metric("", True, True, "processes left"),
    "journal_ratio": Metric("x", True, True, "journal on/off p50"),
    "import_ms": Metric("ms", True, False, "import ms"),
    "modules": Metric("", True, True, "modules imported"),
    "start_ms": Metric("ms", True, False, "exec -> ready ms"),
}


@dataclass
class Result:
    """One scenario's outcome. ``rows`` are dicts: ``subject``, ``kind``, metrics, optional ``note``."""

    scenario: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def skip(self, subject: str, reason: str) -> None:
        self.skipped.append({"subject": subject, "reason": reason.strip()})

    def row(self, subject: str) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["subject"] == subject), None)

    def target(self, subject: str, metric: str, op: str, bound: float, what: str) -> None:
        """Record a target (reported, never asserted): ``value op bound`` for ``subject``'s ``metric``."""
        row = self.row(subject)
        value = row.get(metric) if row else None
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        self.targets.append({"subject": subject, "metric": metric, "target": f"{op} {bound:g}",
                             "value": value, "met": met, "what": what})

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "title": self.title, "columns": self.columns, "rows": self.rows,
            "skipped": self.skipped, "targets": self.targets, "notes": self.notes, "params": self.params,
            "error": self.error, "seconds": round(self.seconds, 2),
        }


def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..1)."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def rnd(value: float | None, digits: int = 3) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


def aggregate(per_round: Mapping[str, list[dict[str, float]]], metrics: Sequence[str],
              ratios: Mapping[str, str], baseline: str = "direct",
              differences: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Medians over rounds per subject, and per-round ratios against ``baseline``.

    Args:
        per_round: subject -> one dict of metric values per round (rounds aligned by index).
        metrics: the metrics to report as medians.
        ratios: ratio metric name -> the metric it divides (subject / baseline, same round).
        differences: difference metric name -> the metric it subtracts (subject - baseline,
            same round): what a subject adds, e.g. milliseconds per call.
    """
    base = per_round.get(baseline, [])
    out: dict[str, dict[str, Any]] = {}
    for subject, rounds in per_round.items():
        row: dict[str, Any] = {m: rnd(median([r[m] for r in rounds if m in r])) for m in metrics}
        for ratio_name, metric in ratios.items():
            values = []
            for i, r in enumerate(rounds):
                if i < len(base) and r.get(metric) and base[i].get(metric):
                    values.append(r[metric] / base[i][metric])
            row[ratio_name] = rnd(median(values))
        for diff_name, metric in (differences or {}).items():
            deltas = [r[metric] - base[i][metric] for i, r in enumerate(rounds)
                      if i < len(base) and metric in r and metric in base[i]]
            row[diff_name] = rnd(median(deltas))
        row["rounds"] = len(rounds)
        out[subject] = row
    return out


def mb(n_bytes: float | None) -> float | None:
    return None if n_bytes is None else round(n_bytes / 1e6, 1)
