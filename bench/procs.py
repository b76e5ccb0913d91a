"""Processes the bench starts: finding them, measuring them, and making sure none survive.

Owns:

* the run token: every process the bench starts carries ``MCPVISOR_BENCH_TOKEN`` in its
  environment (directly, or through the upstream configs it is handed), so `sweep` can
  find and kill anything left behind even when a wrapper (npx, a peer's supervisor)
  started it;
* locating a session's server process (the direct child carrying a session tag), its
  descendants, and telling the proxy's own processes from the upstreams it runs;
* memory readings: RSS of the proxy alone (children excluded) and its high-water mark
  (``VmHWM`` from ``/proc/PID/status``);
* starting and stopping a long-running server process (HTTP fronts) with a bounded stop.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import psutil
import trio

TOKEN_VAR: Final = "MCPVISOR_BENCH_TOKEN"
TAG_VAR: Final = "MCPVISOR_BENCH_TAG"
"""Per-session tag: finds the one process a session started among the bench's children."""

RUN_TOKEN: Final = os.environ.get(TOKEN_VAR) or uuid.uuid4().hex
os.environ[TOKEN_VAR] = RUN_TOKEN

UPSTREAM_MARK: Final = "upstream.py"
"""Upstreams are recognised by their command line (bench/upstream.py, bench/http_upstream.py excluded)."""

STOP_GRACE_S: Final = 3.0
"""SIGTERM, then this long, then SIGKILL: mcpvisor's own stop is 2 s per upstream, in parallel."""
PORT_WAIT_S: Final = 90.0
"""How long an HTTP server may take to accept connections (a loaded 2-core box, npx start-up)."""

BASE_ENV_KEYS: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR",
                         "PYTHONPATH", "MCPVISOR_TEST_TAG")
"""Passed to every child; MCPVISOR_TEST_TAG lets the test suite see what the bench started, and
PYTHONPATH makes the `mcpvisor serve` it starts the same code as the bench itself (a checkout
run with PYTHONPATH measures that checkout, not whatever is installed)."""


def base_env(extra: Mapping[str, str] | None = None, *, tag: str | None = None) -> dict[str, str]:
    """A minimal environment for a child: the usual basics, the run token, a session tag."""
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
    env[TOKEN_VAR] = RUN_TOKEN
    env["PYTHONUNBUFFERED"] = "1"
    if tag is not None:
        env[TAG_VAR] = tag
    env.update(extra or {})
    return env


def progress(text: str) -> None:
    """A progress line on stderr (stdout carries the table and the JSON lines)."""
    import sys

    print(text, file=sys.stderr, flush=True)


def new_tag() -> str:
    return uuid.uuid4().hex[:12]


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def find_tagged_child(tag: str) -> psutil.Process | None:
    """The process started with session tag ``tag`` (the shallowest one, if it spawned more)."""
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return None
    for proc in kids:  # psutil lists breadth-first: parents before their children
        if _environ(proc).get(TAG_VAR) == tag:
            return proc
    return None


async def wait_tagged_child(tag: str, limit_s: float = 5.0) -> psutil.Process | None:
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        proc = find_tagged_child(tag)
        if proc is not None:
            return proc
        await trio.sleep(0.01)
    return None


def is_upstream(proc: psutil.Process) -> bool:
    """A benchmark upstream: its script is ``upstream.py`` (a proxy merely passing it as an
    argument is not), after the interpreter and its ``-S`` when started lean."""
    try:
        head = [part for part in proc.cmdline()[:3] if part != "-S"][:2]
    except psutil.Error:
        return False
    return any(part.endswith(UPSTREAM_MARK) and "http_upstream" not in part for part in head)


def tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its live descendants."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def proxy_processes(root: psutil.Process) -> list[psutil.Process]:
    """The processes that make up the proxy: the tree under ``root`` minus the upstreams and
    their children."""
    out = []
    upstream_pids: set[int] = set()
    for proc in tree(root):
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if is_upstream(proc) or parent in upstream_pids:
            upstream_pids.add(proc.pid)
            continue
        out.append(proc)
    return out


def upstream_processes(root: psutil.Process) -> list[psutil.Process]:
    return [p for p in tree(root) if is_upstream(p)]


def run_time_s(pid: int) -> float | None:
    """Seconds ``pid`` has run on a CPU since it was forked (``/proc/PID/schedstat``, in
    nanoseconds; psutil's CPU times come in 10 ms ticks), or None where that is not known."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def rss_bytes(procs: Iterable[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def hwm_bytes(procs: Iterable[psutil.Process]) -> int:
    """Sum of the processes' peak resident set (``VmHWM``); falls back to current RSS."""
    total = 0
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            total += rss_bytes([proc])
    return total


def cpu_seconds(procs: Iterable[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def free_port() -> int:
    """A free loopback TCP port (there is a small race until the server binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_port(port: int, proc: trio.Process | None = None, limit_s: float = PORT_WAIT_S) -> None:
    """Wait until 127.0.0.1:port accepts a connection.

    Raises:
        RuntimeError: the process exited first, or the port never opened.
    """
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        if proc is not None and proc.returncode is not None:
            raise RuntimeError(f"exited with status {proc.returncode} before listening on port {port}")
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.02)
            continue
        await stream.aclose()
        return
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {limit_s:.0f} s")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


async def stop_process(proc: trio.Process, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group, wait ``grace``, SIGKILL it, reap. Shielded and bounded."""
    with trio.CancelScope(shield=True):
        descendants = []
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            pass
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            with trio.move_on_after(grace):
                await proc.wait()
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGKILL)
            with trio.move_on_after(grace):
                await proc.wait()
        kill_all(descendants)


def kill_all(procs: Iterable[psutil.Process]) -> None:
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
        except psutil.Error:
            pass


async def open_server_process(argv: list[str], env: Mapping[str, str], log: Path,
                              cwd: str | None = None) -> trio.Process:
    """Start a long-running server in its own process group, stdout+stderr to ``log``."""
    with open(log, "ab") as f:  # noqa: ASYNC230 - a local log file, opened once per server
        return await trio.lowlevel.open_process(
            argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def sweep() -> list[str]:
    """Kill every process still carrying this run's token (the last line of defence).
    Returns what it killed."""
    me = os.getpid()
    killed = []
    for proc in psutil.process_iter(["pid"]):
        if proc.info["pid"] == me:
            continue
        if _environ(proc).get(TOKEN_VAR) != RUN_TOKEN:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
            proc.kill()
        except psutil.Error:
            pass
    # Reap our own zombies, if any.
    for child in psutil.Process().children():
        try:
            child.wait(timeout=0.5)
        except (psutil.Error, subprocess.TimeoutExpired):
            pass
    return killed


def describe(proc: psutil.Process | None) -> dict[str, Any]:
    if proc is None:
        return {}
    try:
        return {"pid": proc.pid, "cmd": " ".join(proc.cmdline())[:200]}
    except psutil.Error:
        return {"pid": proc.pid}
