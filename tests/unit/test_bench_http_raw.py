"""`python -m mcpvisor.bench.http_raw` judges the HTTP rows against the speed issue's targets:
at least 3x the SDK's own HTTP server at the many-clients row, one client's p50 at most 0.7 ms."""

from __future__ import annotations

from mcpvisor.bench.http_raw import report


def _rows(one_p50: float, many_calls: float) -> list[dict[str, float]]:
    return [{"p50_ms": one_p50, "p99_ms": one_p50 * 2, "calls_per_s": 1000.0},
            {"p50_ms": 10.0, "p99_ms": 20.0, "calls_per_s": many_calls}]


def test_the_report_says_which_http_targets_are_met() -> None:
    results = {"sdk-http": _rows(1.0, 700.0), "mcpvisor-sdk-path": _rows(1.5, 600.0),
               "mcpvisor": _rows(0.4, 3500.0)}
    text = report(results, 50)
    assert "| mcpvisor | 50 | 10.00 | 20.00 | 3500 | 5.00x |" in text
    assert "target: at 50 clients, at least 3x the SDK's HTTP server: 5.00x, met" in text
    assert "target: one client's p50 at most 0.7 ms: 0.40 ms, met" in text

    results["mcpvisor"] = _rows(0.9, 1400.0)
    text = report(results, 50)
    assert "at least 3x the SDK's HTTP server: 2.00x, missed" in text
    assert "one client's p50 at most 0.7 ms: 0.90 ms, missed" in text
