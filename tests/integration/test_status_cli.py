"""``mcpvisor status`` (supervisor/cli/status.py) against a control server on the test's
own trio loop (a stub supervisor), and its formatting helpers.

What must hold: with no running proxy it says so and exits 1; otherwise it prints one
table per proxy with each server's state, uptime, restarts, circuit, retry time, last
error and tool count (or the same as JSON), and ``--watch`` redraws until stopped.
The end-to-end run against a real ``mcpvisor serve`` is in test_chaos_proxy.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import trio

from mcpvisor.cli import main as cli_main
from mcpvisor.cli.status import LAST_ERROR_WIDTH, fmt_duration, fmt_retry, render, shorten
from mcpvisor.control import serve_control
from mcpvisor.control_ops import status_report
from tests.fakes.supervisor import StubSupervisor, a_status

BOUND_S = 30.0


async def run_cli(*args: str, width: int = 200) -> tuple[int, str, str]:
    def run() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["status", *args])
        return code, out.getvalue(), err.getvalue()

    return await trio.to_thread.run_sync(run)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def a_fleet() -> StubSupervisor:
    now = trio.current_time()
    return StubSupervisor([
        a_status("git", uptime=3723.0, tool_count=12, protocol_version="2026-07-28"),
        a_status("flaky", state="backing_off", uptime=None, restarts=2, retry_at=now + 4, pid=None,
                 last_error="exited with status 3: Traceback (most recent call last): boom",
                 healthy_lives=2, failed_starts=0, restarts_last_minute=2, calls=9, answered=6,
                 availability=6 / 9),
        a_status("never", state="circuit_open", circuit="open", uptime=None, restarts=5, retry_at=now + 30,
                 last_error="exited with status 2: fatal: no API key", tool_count=0, pid=None),
    ])


async def test_no_running_proxy_is_a_clear_message_and_exit_1(tmp_path: Path) -> None:
    code, out, err = await run_cli("--state-dir", str(tmp_path))
    assert code == 1
    assert out == ""
    assert f"no running mcpvisor proxy found in {tmp_path}" in err


async def test_json_with_no_running_proxy_is_an_empty_list(tmp_path: Path) -> None:
    """A script asking for JSON gets valid JSON (no proxies) besides the message and exit 1."""
    code, out, err = await run_cli("--state-dir", str(tmp_path), "--format", "json")
    assert code == 1
    assert json.loads(out) == []
    assert "no running mcpvisor proxy" in err


async def test_the_table_shows_every_column_for_every_server(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_control(a_fleet(), tmp_path, transport="stdio",
                                                                  task_status=task_status))
            code, out, err = await run_cli("--state-dir", str(tmp_path))
            nursery.cancel_scope.cancel()
    assert code == 0, err
    for text in ("server", "state", "uptime", "restarts", "circuit", "retry at", "last error", "tools",
                 "protocol", "git", "ready", "1h 02m", "12", "2026-07-28",
                 "flaky", "backing_off", "exited with status 3",
                 "lives ok/failed", "avail.", "2 (2/min)", "2/0", "67%",
                 "never", "circuit_open", "open", "fatal: no API key",
                 "exposure menu", "toolset dev", "stdio", "config /etc/mcpvisor.json"):
        assert text in out, text
    assert len(re.findall(r"\(in \d+\.\ds\)", out)) == 2  # retry at: "(in 3.9s)", "(in 29.9s)"


async def test_json_format_is_the_status_reply_per_proxy(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, a_fleet(), tmp_path)
            code, out, _ = await run_cli("--state-dir", str(tmp_path), "--format", "json")
            nursery.cancel_scope.cancel()
    assert code == 0
    [report] = json.loads(out)
    assert [s["name"] for s in report["servers"]] == ["git", "flaky", "never"]
    assert report["servers"][2]["circuit"] == "open"
    assert report["servers"][2]["retryAt"].endswith("Z")
    assert "ok" not in report


async def test_watch_redraws_until_stopped(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, a_fleet(), tmp_path)
            code, out, _ = await run_cli("--state-dir", str(tmp_path), "--watch", "--count", "2")
            nursery.cancel_scope.cancel()
    assert code == 0
    assert "circuit_open" in out
    assert "Ctrl-C to stop" in out


async def test_watch_without_a_proxy_keeps_waiting(tmp_path: Path) -> None:
    code, out, _ = await run_cli("--state-dir", str(tmp_path), "--watch", "--count", "1")
    assert code == 0
    assert "no running mcpvisor proxy" in out
    assert "watching" in out


def test_formatting_helpers() -> None:
    assert [fmt_duration(s) for s in (None, 0.25, 59.9, 61, 3600 + 120, 86400 * 2 + 3600)] == [
        "-", "0.2s", "59.9s", "1m 01s", "1h 02m", "2d 01h"]
    assert fmt_retry({"retryAt": None}) == "-"
    assert fmt_retry({"retryAt": "2030-01-01T00:00:00.000Z", "retryInSeconds": 12.0}).endswith("(in 12.0s)")
    assert shorten(None) == "-"
    assert shorten("a\n  b") == "a b"
    assert len(shorten("x" * 1000)) == LAST_ERROR_WIDTH


async def test_render_of_a_proxy_without_servers() -> None:
    from rich.console import Console

    report = status_report(StubSupervisor([]))
    console = Console(file=io.StringIO(), width=200)
    console.print(render(report))
    assert "(no servers)" in console.file.getvalue()  # type: ignore[attr-defined]


async def test_an_80_column_terminal_still_shows_every_server_and_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a narrow terminal the detail columns (lives, availability, protocol) give way, so
    each server's name and state stay readable instead of being squeezed to nothing, and
    each last error is whole on its own line under the table (in a cell it came out one
    letter per line)."""
    monkeypatch.setenv("COLUMNS", "80")
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_control(a_fleet(), tmp_path, transport="stdio",
                                                                  task_status=task_status))
            code, out, err = await run_cli("--state-dir", str(tmp_path))
            nursery.cancel_scope.cancel()
    assert code == 0, err
    for text in ("git", "flaky", "never", "ready", "backing_off", "circuit_open"):
        assert text in out, text
    assert "lives ok/failed" not in out
    assert "avail." not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "  flaky: exited with status 3: Traceback (most recent call last): boom" in out.splitlines()
    assert "  never: exited with status 2: fatal: no API key" in out.splitlines()
    assert "restarts" in out
    assert "2 (2/min)" in out
    assert "(in " not in out  # the countdown after "retry at" is a detail too


async def test_the_protocol_column_names_both_versions_of_a_dual_era_server(tmp_path: Path) -> None:
    """A dual-era HTTP server under ``auto`` (its session in the handshake era, 2026-07-28
    clients' calls on its session-less side) shows both versions it is reached in; a
    handshake-only server keeps its one version and era, in the table and the JSON."""
    fleet = StubSupervisor([
        a_status("dual", transport="http", protocol_version="2025-11-25",
                 protocol_versions=("2025-11-25", "2026-07-28")),
        a_status("old", protocol_version="2025-11-25", protocol_versions=("2025-11-25",)),
    ])
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, fleet, tmp_path)
            code, out, err = await run_cli("--state-dir", str(tmp_path))
            _, raw, _ = await run_cli("--state-dir", str(tmp_path), "--format", "json")
            nursery.cancel_scope.cancel()
    assert code == 0, err
    rows = {cells[0]: cells[-1] for line in out.splitlines()
            if len(cells := [c.strip() for c in line.split("│") if c.strip()]) > 1}
    assert rows["dual"] == "2025-11-25 + 2026-07-28 (both eras)"
    assert rows["old"] == "2025-11-25 (handshake era)"
    [report] = json.loads(raw)
    assert [(s["protocolVersion"], s["protocolVersions"]) for s in report["servers"]] == [
        ("2025-11-25", ["2025-11-25", "2026-07-28"]), ("2025-11-25", ["2025-11-25"])]
