"""What ``mcpvisor serve`` imports before it serves (issue 29: at most 150 ms, stdio and HTTP).

* imports: the real command, ``python -X importtime -m mcpvisor serve --config CFG`` (one
  benchmark upstream, a fresh state directory each launch), over stdio and with
  ``--transport http --host 127.0.0.1 --port 0`` until a client's first answers have come:
  ``initialize``, then (after ``notifications/initialized``) ``tools/list``, over the pipes or
  POSTed to its ``/mcp``; then it is stopped. Python's import profile (on its stderr, into a
  log file) is read up to that moment: the sum of the top-level entries' cumulative times
  is the time spent importing (each nested import is inside its parent's cumulative time,
  so only the top level adds up without counting anything twice), the number of entries
  the modules imported (each module appears once, when it is first imported). For scale,
  ``python -c "import mcp"`` (the SDK alone) and ``python -c pass`` (the interpreter and
  its ``site``), profiled until they exit.

  ``start_ms`` is the wall time from exec to the same moment (the ``tools/list`` answer,
  the exit), measured in a second launch without the profiler (which
  costs a little per import), less any time the machine was paused (bench/stalls.py).
  Each figure is the median of ``Params.import_runs`` launches, the commands in turn.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.core import Params, Result, median, rnd
from mcpvisor.bench.drivers import PYTHON, ServerDef, mcpvisor_config
from mcpvisor.bench.scenarios_startup import INITIALIZE, INITIALIZED, TOOLS_LIST, _Lines
from mcpvisor.bench.stalls import WATCH

TARGET_MS: Final = 150.0
"""Issue 29: ``mcpvisor serve`` imports in at most this long, over stdio and over HTTP."""

TOP_PACKAGES: Final = 5
"""How many packages the notes rank by import time."""

READY_TIMEOUT_S: Final = 60.0
"""Bound on one launch reaching its ready moment (a loaded 2-core machine)."""

LOG_POLL_S: Final = 0.005
"""How often the HTTP launch's log is read for the address it bound (port 0: the OS picks)."""

BOUND_URL: Final = re.compile(rb"dashboard at https?://[^\s/]+:(\d+)/")
"""The line ``serve --transport http`` prints once its front is bound; only the port is read
(the rest of that line carries the dashboard's login token, which the bench never keeps)."""

_LINE: Final = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\| (\s*)(\S+)\s*$")
"""``import time: SELF_US | CUMULATIVE_US | NAME``, NAME indented two spaces per nesting level."""


@dataclass
class _Node:
    name: str
    self_us: int
    cumulative_us: int
    children: list[_Node] = field(default_factory=list)


@dataclass(frozen=True)
class ImportProfile:
    """One process's ``-X importtime`` output, as a forest of imports (children inside parents)."""

    roots: tuple[_Node, ...]
    modules: int

    @property
    def total_us(self) -> int:
        """Time spent importing: the top-level entries' cumulative times added up."""
        return sum(n.cumulative_us for n in self.roots)

    def packages(self) -> list[tuple[str, int]]:
        """Top-level packages (``mcp`` for ``mcp.types``), most expensive first: per package the
        cumulative time of its outermost imports (those not inside another import of the same
        package), so what a package pulls in counts for it, and also for whatever imported it."""
        totals: dict[str, int] = defaultdict(int)

        def walk(node: _Node, inside: frozenset[str]) -> None:
            package = node.name.split(".", 1)[0]
            if package not in inside:
                totals[package] += node.cumulative_us
            for child in node.children:
                walk(child, inside | {package})

        for root in self.roots:
            walk(root, frozenset())
        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))


def parse_importtime(text: str) -> ImportProfile:
    """Read ``-X importtime`` lines out of ``text`` (other stderr lines are skipped).

    Python prints an import when it finishes, after the imports it caused (one level
    deeper). An import still running when the text was cut has no line yet; the finished
    imports under it are kept as top-level ones, so their time is neither lost nor counted
    twice.
    """
    waiting: dict[int, list[_Node]] = defaultdict(list)  # finished, their parent not printed yet
    modules = 0
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        level = len(m.group(3)) // 2
        node = _Node(m.group(4), int(m.group(1)), int(m.group(2)), waiting.pop(level + 1, []))
        waiting[level].append(node)
        modules += 1
    roots = [node for level in sorted(waiting) for node in waiting[level]]
    return ImportProfile(tuple(roots), modules)


@dataclass(frozen=True)
class Command:
    """One row: argv (after ``python``), and what ``ready`` means for it."""

    subject: str
    args: list[str]
    ready: str  # "stdio" / "http" (a client's initialize and tools/list answered that way) or "exit"
    kind: str = "proxy"


def commands(config: Path) -> list[Command]:
    serve = ["-m", "mcpvisor", "serve", "--config", str(config)]
    return [
        Command("mcpvisor-stdio", serve, "stdio"),
        Command("mcpvisor-http", [*serve, "--transport", "http", "--host", "127.0.0.1", "--port", "0"],
                "http"),
        Command("mcp (the SDK alone)", ["-c", "import mcp"], "exit", "scale"),
        # The floor of any `serve`: the event loop and the wire's codec, both on its hot path.
        Command("trio and msgspec", ["-c", "import trio, msgspec"], "exit", "scale"),
        Command("python -c pass", ["-c", "pass"], "exit", "scale"),
    ]


def _size(log: Path) -> int:
    """The log's size now. A stat of a local file, synchronous on purpose: taken the moment a
    launch is ready, with no await (no other task's time) in between."""
    return log.stat().st_size


def _tail(log: Path) -> str:
    """The end of a ``python -c`` launch's log, for an error (a local file, read once). Never a
    ``serve`` log's: over HTTP it holds the dashboard's login token."""
    return log.read_text(errors="replace")[-300:]


READY: Final = {"stdio": "answered initialize and tools/list",
                "http": "answered initialize and tools/list on the port it printed", "exit": "exited"}


@contextmanager
def _ready_within(seconds: float, command: Command) -> Iterator[None]:
    """`trio.fail_after` whose error says which command did not get ready, and how."""
    try:
        with trio.fail_after(seconds):
            yield
    except trio.TooSlowError:
        raise RuntimeError(f"{command.subject} had not {READY[command.ready]} within {seconds:g} s "
                           "(its stderr: imports.log, kept with --keep)") from None


async def _bound_port(log: Path, proc: trio.Process) -> int:
    """The port the HTTP front bound, read from the line it prints (polled: a log file)."""
    while True:
        found = BOUND_URL.search(await trio.Path(log).read_bytes())
        if found:
            return int(found.group(1))
        if proc.returncode is not None:
            raise RuntimeError(f"exited with status {proc.returncode} before it served (log {log.name})")
        await trio.sleep(LOG_POLL_S)


async def _first_answers_over_http(port: int) -> None:
    """A client's first answers from the HTTP front on ``port``: ``initialize`` POSTed to
    ``/mcp``, then ``notifications/initialized`` and ``tools/list`` on the session it opened."""
    from mcpvisor.bench.http_raw import H11Connection, open_raw_session, response_in

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        http = H11Connection(stream, f"127.0.0.1:{port}")
        headers = await open_raw_session(http, "/mcp")
        status, _, text = await http.post("/mcp", TOOLS_LIST, headers)
        if status != 200 or "tools" not in response_in(text).get("result", {}):
            raise RuntimeError(f"tools/list: HTTP {status}: {text[:200]}")
    finally:
        await stream.aclose()


async def launch(command: Command, env: dict[str, str], log: Path, *, profile: bool) -> tuple[float, int]:
    """Run ``command`` until it is ready, then stop it. Returns (seconds from exec to ready,
    the size its stderr log had then: the import profile is read up to there)."""
    argv = [PYTHON, *(["-X", "importtime"] if profile else []), *command.args]
    with open(log, "wb") as err:  # noqa: ASYNC230 - a local log file, opened once per launch
        t0 = time.perf_counter()
        proc = await trio.lowlevel.open_process(argv, env=env, cwd=str(log.parent), stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        with _ready_within(READY_TIMEOUT_S, command):
            if command.ready == "stdio":
                lines = _Lines(proc)
                await lines.send(INITIALIZE)
                await lines.answer(1)
                await lines.send(INITIALIZED, TOOLS_LIST)
                await lines.answer(2)
                t1, cut = time.perf_counter(), _size(log)
            elif command.ready == "http":
                await _first_answers_over_http(await _bound_port(log, proc))
                t1, cut = time.perf_counter(), _size(log)
            else:
                status = await proc.wait()
                t1, cut = time.perf_counter(), _size(log)
                if status != 0:
                    raise RuntimeError(f"exited with status {status}: {_tail(log)}")
    finally:
        await procs.stop_process(proc)
    await WATCH.settle()
    return t1 - t0 - WATCH.overlap(t0, t1), cut


def read_profile(log: Path, cut: int) -> ImportProfile:
    """The import profile in ``log``'s first ``cut`` bytes (a line cut in the middle is dropped)."""
    with open(log, "rb") as f:
        text = f.read(cut).decode("utf-8", errors="replace")
    return parse_importtime(text.rsplit("\n", 1)[0] if not text.endswith("\n") else text)


async def run_imports(params: Params, workdir: Path, runs: int | None = None,
                      only: Sequence[str] | None = None) -> Result:
    """The ``imports`` scenario; ``only``: these subjects (the test runs fewer)."""
    n = runs or params.import_runs
    result = Result("imports", "What `mcpvisor serve` imports before it serves (python -X importtime)",
                    ["import_ms", "modules", "start_ms"])
    result.params.update(runs=n, upstreams=1, target_ms=TARGET_MS)
    result.notes.append("import_ms = the top-level imports' cumulative times added up, until a client's "
                        "initialize and tools/list were answered (over stdio, over HTTP) / the command "
                        "exited; modules = modules imported by then; start_ms = exec -> that moment, in "
                        "a launch without the profiler")
    config = workdir / "imports.json"
    config.write_text(json.dumps(mcpvisor_config([ServerDef("s00")], {"exposure": "all"}), indent=1))
    rows = [c for c in commands(config) if only is None or c.subject in only]
    figures: dict[str, list[tuple[float, ImportProfile]]] = {c.subject: [] for c in rows}
    alive = list(rows)
    log = workdir / "imports.log"
    launches = 0

    def fresh_env() -> dict[str, str]:
        """Every launch is a first one: its own empty state directory (nothing remembered)."""
        nonlocal launches
        launches += 1
        return procs.base_env({"MCPVISOR_STATE_DIR": str(workdir / f"imports-state-{launches}")})

    for r in range(n):
        for command in alive if r % 2 == 0 else list(reversed(alive)):
            try:
                _, cut = await launch(command, fresh_env(), log, profile=True)
                profile = read_profile(log, cut)
                wall, _ = await launch(command, fresh_env(), log, profile=False)
            except Exception as exc:
                result.skip(command.subject, f"{type(exc).__name__}: {exc}")
                alive.remove(command)
                figures.pop(command.subject)
                continue
            if profile.modules == 0:
                result.skip(command.subject, "printed no import profile (python -X importtime)")
                alive.remove(command)
                figures.pop(command.subject)
                continue
            figures[command.subject].append((wall, profile))
    for command in rows:
        got = figures.get(command.subject)
        if not got:
            continue
        result.rows.append({
            "subject": command.subject, "kind": command.kind,
            "transport": command.ready if command.ready != "exit" else "-",
            "import_ms": rnd(median([p.total_us / 1e3 for _, p in got]), 1),
            "modules": int(median([float(p.modules) for _, p in got]) or 0),
            "start_ms": rnd(median([w * 1e3 for w, _ in got]), 1),
            "top_packages": top_packages([p for _, p in got]),
        })
        top = ", ".join(f"{name} {ms:g}" for name, ms in result.rows[-1]["top_packages"])
        result.notes.append(f"{command.subject}: most expensive packages, cumulative ms: {top}")
    for subject, how in (("mcpvisor-stdio", "over stdio"), ("mcpvisor-http", "over HTTP")):
        if result.row(subject):
            result.target(subject, "import_ms", "<=", TARGET_MS,
                          f"`mcpvisor serve` {how} imports in at most {TARGET_MS:g} ms")
    return result


def top_packages(profiles: Sequence[ImportProfile], k: int = TOP_PACKAGES) -> list[tuple[str, float]]:
    """The ``k`` packages with the highest median cumulative import time over ``profiles`` (ms)."""
    per: dict[str, list[float]] = defaultdict(list)
    for profile in profiles:
        for name, us in profile.packages():
            per[name].append(us / 1e3)
    # a package a launch did not import counts 0 ms there
    ranked = [(name, median(ms + [0.0] * (len(profiles) - len(ms))) or 0.0) for name, ms in per.items()]
    ranked.sort(key=lambda item: (-item[1], item[0]))
    return [(name, round(ms, 1)) for name, ms in ranked[:k]]
