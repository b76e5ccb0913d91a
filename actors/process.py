"""Child processes of stdio upstreams: spawn in a process group, stop in stages, leave none.

Owns:

* `spawn`: `trio.lowlevel.open_process` with pipes, in a new session (its own
  process group), with the proxy's environment plus the server's ``env`` (the SDK's
  default passes only a handful of variables; users expect PATH and their keys).
* `stop_process`: close stdin, wait, SIGTERM the group, wait, SIGKILL the group, reap;
  then sweep the group for grandchildren (``npx`` -> ``node``) the leader left.
* `Reaper`: the "parent-death signal" of the whole tree. Linux's PR_SET_PDEATHSIG
  follows the *thread* that forked, and trio forks from a worker thread that exits
  when idle, so it would kill healthy children at random. Instead one tiny watchdog
  process per supervisor holds a pipe from the proxy and the list of live process
  groups; when the proxy dies (even by SIGKILL) the pipe reads EOF and the watchdog
  SIGKILLs every group still registered. Grandchildren in those groups die too.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Final

import trio

from mcpvisor.actors.framing import FrameWriter, LineReader, OversizedLine, StreamBroken

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S: Final = 2.0
"""close stdin -> wait -> SIGTERM -> wait -> SIGKILL; the MCP SDK's PROCESS_TERMINATION_TIMEOUT
and FORCE_KILL_TIMEOUT (SDK-NOTES.md §7), DESIGN.md "Behaviour under failure"."""

SWEEP_POLL_S: Final = 0.05
"""How often a group sweep checks whether members are left."""

STREAM_CLOSE_S: Final = 0.5
"""Bound on closing each of a stopped child's pipes: they close at once or never."""

PROC: Final = "/proc"
"""Where Linux lists processes; elsewhere the group check falls back to ``killpg(pgid, 0)``."""

STDERR_KEEP_LINES: Final = 20
"""Last stderr lines kept per upstream for error messages."""

STDERR_MAX_LINE: Final = 16 * 1024
"""Longer stderr lines are cut (a flood must not cost memory)."""

_REAPER_SCRIPT: Final = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    line = line.strip()
    try:
        if line[:1] == b"+":
            groups.add(int(line[1:]))
        elif line[:1] == b"-":
            groups.discard(int(line[1:]))
    except ValueError:
        pass
# A member forking while the signal lands can escape one killpg: repeat until each
# group is empty (bounded: 2 s).
import time
deadline = time.monotonic() + 2.0
while groups and time.monotonic() < deadline:
    for g in list(groups):
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            groups.discard(g)
    time.sleep(0.02)
"""


class Reaper:
    """Watchdog that kills registered process groups if the proxy dies.

    Use `open_reaper` to start one for the lifetime of a supervisor; `register` each
    stdio upstream's group right after spawning it and `unregister` once the group is
    gone. If the watchdog cannot be started the proxy still runs (logged), it only
    loses the SIGKILL guarantee.
    """

    def __init__(self) -> None:
        self._proc: trio.Process | None = None
        self._writer: FrameWriter | None = None
        self._groups: set[int] = set()

    @property
    def active(self) -> bool:
        return self._writer is not None and self._writer.broken is None

    async def _start(self) -> None:
        try:
            self._proc = await trio.lowlevel.open_process(
                [sys.executable, "-S", "-c", _REAPER_SCRIPT],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            logger.warning("could not start the process watchdog (%s); children may outlive a killed proxy",
                           exc)
            return
        assert self._proc.stdin is not None
        self._writer = FrameWriter(self._proc.stdin)

    async def _send(self, line: bytes) -> None:
        if self._writer is None:
            return
        try:
            await self._writer.send(line)
        except StreamBroken:
            logger.warning("process watchdog is gone; children may outlive a killed proxy")

    async def register(self, pgid: int) -> None:
        self._groups.add(pgid)
        await self._send(b"+%d\n" % pgid)

    async def unregister(self, pgid: int) -> None:
        self._groups.discard(pgid)
        await self._send(b"-%d\n" % pgid)

    async def _stop(self) -> None:
        if self._proc is None:
            return
        with trio.CancelScope(shield=True):
            # Anything still registered is killed by the watchdog on EOF, which is
            # what we want on a crash of the proxy's own shutdown too.
            if self._writer is not None:
                await self._writer.aclose()
            with trio.move_on_after(SHUTDOWN_GRACE_S):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()


class open_reaper:  # lower case: an async context manager named like trio's open_* functions
    """``async with open_reaper() as reaper:`` a watchdog for the block's lifetime."""

    def __init__(self) -> None:
        self._reaper = Reaper()

    async def __aenter__(self) -> Reaper:
        await self._reaper._start()
        return self._reaper

    async def __aexit__(self, *exc: object) -> None:
        await self._reaper._stop()


class SpawnError(Exception):
    """The command could not be started at all (not found, not executable, bad cwd)."""


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The proxy's own environment plus the server's ``env`` (the server wins)."""
    env = dict(os.environ)
    env.update(extra)
    return env


async def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, reaper: Reaper | None
) -> trio.Process:
    """Start ``argv`` with piped stdio in a new session (its own process group).

    Raises:
        SpawnError: with a message that names the command and the reason.
    """
    if not argv:
        raise SpawnError("empty command")
    full_env = child_environment(env)
    command = argv[0]
    if os.sep not in command and shutil.which(command, path=full_env.get("PATH")) is None:
        raise SpawnError(f"command not found on PATH: {command}")
    try:
        proc = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        # One stat on a failed spawn only, to say which of the two was missing.
        if cwd is not None and not os.path.isdir(cwd):  # noqa: ASYNC240
            raise SpawnError(f"working directory does not exist: {cwd}") from exc
        raise SpawnError(f"command not found: {command}") from exc
    except PermissionError as exc:
        raise SpawnError(f"permission denied running {command}") from exc
    except OSError as exc:
        raise SpawnError(f"could not start {command}: {exc.strerror or exc}") from exc
    if reaper is not None:
        await reaper.register(proc.pid)
    return proc


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) members of process group ``pgid``, or None where /proc is missing.

    A zombie still belongs to its group until it is reaped, and ``killpg(pgid, 0)``
    succeeds on it; an orphaned grandchild is reaped by init, which in some containers
    never happens (the sandbox's PID 1 does not reap). Counting zombies as alive made
    every stop of a server with a grandchild wait its full grace.
    """
    try:
        entries = os.listdir(PROC)
    except OSError:
        return None
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{PROC}/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = _group_members(pgid)
    return True if members is None else bool(members)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            logger.debug("killpg(%d, %s): %s", pgid, sig, exc)


async def _sweep_group(pgid: int, grace: float) -> None:
    """Terminate members the leader left behind in its group (grandchildren)."""
    if not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    with trio.move_on_after(grace):
        # Polled: the group's other members are not our children, nothing signals their exit.
        while _group_alive(pgid):  # noqa: ASYNC110
            await trio.sleep(SWEEP_POLL_S)
        return
    _signal_group(pgid, signal.SIGKILL)


async def stop_process(proc: trio.Process, *, grace: float = SHUTDOWN_GRACE_S, reaper: Reaper | None) -> int:
    """Stop ``proc`` and its whole process group; always reaps. Returns the exit status.

    The sequence (DESIGN.md): close stdin, wait ``grace``, SIGTERM the group, wait
    ``grace``, SIGKILL the group. Shielded from cancellation and bounded by about
    ``3 * grace``, so a stuck child can delay shutdown but never wedge it.
    """
    pgid = proc.pid
    with trio.CancelScope(shield=True):
        if proc.returncode is None and proc.stdin is not None:
            with trio.move_on_after(grace):
                await proc.stdin.aclose()
            with trio.move_on_after(grace):
                await proc.wait()
        if proc.returncode is None:
            _signal_group(pgid, signal.SIGTERM)
            with trio.move_on_after(grace):
                await proc.wait()
        if proc.returncode is None:
            _signal_group(pgid, signal.SIGKILL)
            await proc.wait()
        await _sweep_group(pgid, grace)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with trio.move_on_after(STREAM_CLOSE_S):
                    await stream.aclose()
        if reaper is not None:
            await reaper.unregister(pgid)
    assert proc.returncode is not None
    return proc.returncode


def describe_exit(status: int | None) -> str:
    """Human text for a wait status: "exited with status 3" / "killed by SIGKILL"."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


class StderrLog:
    """Drain an upstream's stderr line by line into the log, keeping the last lines."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: deque[str] = deque(maxlen=STDERR_KEEP_LINES)
        self._log = logging.getLogger(f"mcpvisor.upstream.{server}")

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        try:
            async for batch in LineReader(stream, STDERR_MAX_LINE):
                for line in batch:
                    if isinstance(line, OversizedLine):
                        text = f"[{line.size} bytes of stderr without a newline]"
                    else:
                        text = line.decode("utf-8", "replace")
                    self.lines.append(text)
                    self._log.info("%s", text)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def tail(self, n: int = 5) -> str:
        """The last ``n`` lines, joined for an error message ("" if none)."""
        lines = list(self.lines)[-n:]
        return " | ".join(line.strip() for line in lines if line.strip())
