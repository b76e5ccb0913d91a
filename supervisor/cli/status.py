"""``mcpvisor status``: what the running proxies' supervisors see, as a table or JSON.

Each running proxy registers a control socket in the state directory
(`mcpvisor.control`); this command asks every one of them for its status. ``--watch``
redraws every second, so a crash, the backoff, the open circuit and the recovery of a
flaky server can be watched as they happen.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor.cli._base import EXIT_FAILED, EXIT_OK, Formatter
from mcpvisor.cli._output import spoken

if TYPE_CHECKING:
    from rich.console import RenderableType

EPILOG: Final = """\
examples:
  mcpvisor status                      # every proxy running with the default state directory
  mcpvisor status --watch              # redraw every second (Ctrl-C to stop)
  mcpvisor status --format json        # for scripts: one object per running proxy

states: starting, ready, backing_off (restart due at "retry at"), circuit_open (no start
until "retry at"; calls fail at once), half_open (one trial start), disabled, stopped, not loaded
(lazy, not started yet: load_mcp or a first use starts it), misconfigured (the entry cannot start as
it is: see its reason; never restarted until the config changes), needs_login (an OAuth server
wants a login: mcpvisor mcp login NAME). See docs/supervision.md.
"""

WATCH_INTERVAL_S: Final = 1.0
LAST_ERROR_WIDTH: Final = 200
"""Characters of a server's last error shown under the table, on its own line(s) (the JSON
has all of it)."""

STATE_STYLES: Final = {
    "ready": "green",
    "starting": "yellow",
    "half_open": "yellow",
    "backing_off": "dark_orange",
    "circuit_open": "bold red",
    "disabled": "dim",
    "stopped": "dim",
    "idle": "blue",
    "not loaded": "blue",
    "misconfigured": "bold red",
    "needs_login": "bold magenta",
}


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="show the state of every server of the running proxies",
                       description="Show each supervised server of every running proxy: state, uptime, "
                                   "restarts, circuit, next retry, last error, tool count.",
                       formatter_class=Formatter, epilog=EPILOG)
    p.add_argument("--state-dir", metavar="DIR",
                   help="the proxies' state directory "
                        "(default: $MCPVISOR_STATE_DIR or ~/.local/state/mcpvisor)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="output format (default: table)")
    p.add_argument("--watch", action="store_true", help="redraw every second until Ctrl-C")
    p.add_argument("--count", type=int, metavar="N", help=argparse.SUPPRESS)  # --watch: stop after N redraws
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for each proxy's answer (default: 5)")
    p.set_defaults(func=run)


def collect(state_dir: Path, timeout: float) -> tuple[list[dict[str, Any]], list[str]]:
    """(the status reply of every running proxy, a message per proxy that did not answer)."""
    from mcpvisor.control import ControlError, list_running, request

    reports, problems = [], []
    for proxy in list_running(state_dir):
        try:
            reports.append(request(proxy.socket, "status", timeout=timeout))
        except ControlError as exc:
            problems.append(f"proxy pid {proxy.pid}: {exc}")
    return reports, problems


def no_proxy_message(state_dir: Path) -> str:
    return (f"no running mcpvisor proxy found in {state_dir} "
            f"(start one with `mcpvisor serve`, or pass the --state-dir it uses)")


def run(args: argparse.Namespace) -> int:
    from mcpvisor.settings import state_dir

    directory = state_dir(args.state_dir)
    if args.watch:
        return watch(directory, args)
    reports, problems = collect(directory, args.timeout)
    for problem in problems:
        print(f"mcpvisor: {problem}", file=sys.stderr)
    if not reports:
        if not problems:
            print(f"mcpvisor: {no_proxy_message(directory)}", file=sys.stderr)
        if args.format == "json":
            print("[]")  # a script still gets valid JSON: no proxies
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps([{k: v for k, v in r.items() if k != "ok"} for r in reports], indent=2))
        return EXIT_OK
    from rich.console import Console

    console = Console()
    for report in reports:
        console.print(render(report, console.width))
    return EXIT_OK


def watch(directory: Path, args: argparse.Namespace) -> int:
    """Redraw every `WATCH_INTERVAL_S` until Ctrl-C (or ``--count`` redraws)."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    console = Console()
    shown = 0
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                reports, problems = collect(directory, args.timeout)
                parts: list[RenderableType] = [render(r, console.width) for r in reports]
                parts += [Text(p, style="red") for p in problems]
                if not reports and not problems:
                    parts.append(Text(f"{no_proxy_message(directory)}; watching...", style="dim"))
                parts.append(Text(f"{datetime.now().strftime('%H:%M:%S')}  (Ctrl-C to stop)", style="dim"))
                if args.format == "json":
                    live.console.print_json(json.dumps(reports))
                else:
                    live.update(Group(*parts), refresh=True)
                shown += 1
                if args.count is not None and shown >= args.count:
                    return EXIT_OK
                time.sleep(WATCH_INTERVAL_S)
    except KeyboardInterrupt:
        return EXIT_OK


# --------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------


def fmt_duration(seconds: float | None) -> str:
    """``12.3s``, ``4m 05s``, ``2h 03m``, ``3d 04h``; "-" for None."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def fmt_retry(server: dict[str, Any], countdown: bool = True) -> str:
    """Local wall time of the next start, and (``countdown``) how far away it is:
    ``14:03:07 (in 12s)``."""
    at = server.get("retryAt")
    if not at:
        return "-"
    try:
        when = datetime.fromisoformat(str(at).replace("Z", "+00:00")).astimezone()
    except ValueError:
        return str(at)
    left = server.get("retryInSeconds")
    suffix = f" (in {fmt_duration(left)})" if countdown and isinstance(left, int | float) else ""
    return when.strftime("%H:%M:%S") + suffix


def shorten(text: str | None, width: int = LAST_ERROR_WIDTH) -> str:
    if not text:
        return "-"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_restarts(server: dict[str, Any]) -> str:
    """Restarts in all, and in the last minute when there were any."""
    total, recent = server.get("restarts", 0), server.get("restartsLastMinute", 0)
    return f"{total} ({recent}/min)" if recent else str(total)


def fmt_availability(value: Any) -> str:
    """The fraction of client calls the server answered, as a percentage; "-" before any."""
    return "-" if value is None else f"{100 * float(value):.0f}%"


WIDE_TABLE_COLUMNS: Final = 150
"""Below this terminal width the table leaves out the detail columns (lives, availability,
protocol) and the countdown after "retry at", so the ones that say what is wrong keep their
room: an 80-column terminal must still show every server's name, state, restarts and next
try. (The wide table is about 145 columns with a server backing off.)"""


def render(report: dict[str, Any], width: int | None = None) -> Any:
    """One proxy's status as a rich `Table`, then each server's last error on its own line
    (a cell of a table with ten columns cannot hold an error message: it came out one
    letter per line); ``width`` (the terminal's) decides whether the detail columns fit
    (`WIDE_TABLE_COLUMNS`); None shows them all."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    wide = width is None or width >= WIDE_TABLE_COLUMNS
    toolset = report.get("toolset") or "-"
    title = (f"mcpvisor pid {report.get('pid')} · {report.get('transport') or 'embedded'} · "
             f"exposure {report.get('exposure')} · toolset {toolset}")
    caption = f"config {report.get('config') or '-'}"
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    table.add_column("server", no_wrap=True, min_width=len("server"))
    table.add_column("state", no_wrap=True, min_width=len("backing_off"))
    table.add_column("uptime", justify="right", no_wrap=True)
    table.add_column("restarts", justify="right", no_wrap=True)
    if wide:
        table.add_column("lives ok/failed", justify="right", no_wrap=True)
        table.add_column("avail.", justify="right", no_wrap=True)
    table.add_column("circuit", no_wrap=True)
    table.add_column("retry at", no_wrap=True)
    table.add_column("tools", justify="right")
    if wide:
        table.add_column("protocol", no_wrap=True)
    for s in report.get("servers", []):
        state = str(s.get("state"))
        circuit = str(s.get("circuit"))
        details = ([f"{s.get('healthyLives', 0)}/{s.get('failedStarts', 0)}",
                    fmt_availability(s.get("availability"))] if wide else [])
        table.add_row(
            str(s.get("name")),
            Text(state, style=STATE_STYLES.get(state, "")),
            fmt_duration(s.get("uptime")),
            fmt_restarts(s),
            *details,
            Text(circuit, style="red" if circuit == "open" else ("yellow" if circuit == "half_open" else "")),
            fmt_retry(s, countdown=wide),
            str(s.get("toolCount", 0)),
            *([spoken(s.get("protocolVersions"), s.get("protocolVersion"))] if wide else []),
        )
    if not report.get("servers"):
        table.add_row("(no servers)", *[""] * (len(table.columns) - 1))
    errors = [(str(s.get("name")), shorten(s.get("lastError"))) for s in report.get("servers", [])
              if s.get("lastError")]
    remembered = [(str(s.get("name")), s.get("toolCount", 0), str(s["remembered"]))
                  for s in report.get("servers", []) if s.get("remembered")]
    if not errors and not remembered:
        return table
    lines = Text()
    if remembered:
        lines.append("listed from memory while starting\n", style="bold")
        for name, count, seen in remembered:
            lines.append(f"  {name}: ", style="bold")
            lines.append(f"{count} tools remembered from {seen}\n")
    if errors:
        lines.append("last error\n", style="bold")
    for name, error in errors:
        lines.append(f"  {name}: ", style="bold")
        lines.append(f"{error}\n")
    lines.rstrip()
    return Group(table, lines)
