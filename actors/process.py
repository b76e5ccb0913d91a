"""Child processes of stdio upstreams: spawn in a process group, stop in stages, leave none.

Owns:

* `spawn`: `trio.lowlevel.open_process` with pipes, in a new session (its own
  process group), with the proxy's environment plus the server's ``env`` (the SDK's
  default passes only a handful of variables; users expect PATH and their keys).
* `stop_process`: close stdin, wait, SIGTERM the group, wait, SIGKILL the group, reap;
  then sweep the group for grandchildren (``npx`` -> ``node``) the leader left.
* `Reaper` (`open_reaper`): the "parent-death signal" of the whole tree. Linux's PR_SET_PDEATHSIG
  follows the *thread* that forked, and trio forks from a worker thread that exits
  when idle, so it would kill healthy children at random. Instead one tiny watchdog
  process per supervisor holds a pipe from the proxy and the list of live process
  groups; when the proxy dies (even by SIGKILL) the pipe reads EOF and the watchdog
  SIGKILLs every group still registered. Grandchildren in those groups die too. A
  watchdog that dies is replaced, and the new one told every group still registered.
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
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import trio

from mcpvisor.actors.framing import FrameWriter, LineReader, OversizedLine, StreamBroken

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S: Final = 2.0
"""close stdin -> wait -> SIGTERM -> wait -> SIGKILL; the MCP SDK's PROCESS_TERMINATION_TIMEOUT
and FORCE_KILL_TIMEOUT (docs/sdk.md §7), docs/design.md "Behaviour under failure"."""

SWEEP_POLL_S: Final = 0.05
"""How often a group sweep checks whether members are left."""

STREAM_CLOSE_S: Final = 0.5
"""Bound on closing each of a stopped child's pipes: they close at once or never."""

PROC: Final = "/proc"
"""Where Linux lists processes; elsewhere the group check falls back to ``killpg(pgid, 0)``."""

REAPER_RESTART_S: Final = 1.0
"""Least time between two starts of the watchdog: one that dies at once (no interpreter,
no memory) is retried about once a second, not in a busy loop."""

STDERR_KEEP_LINES: Final = 20
"""Last stderr lines kept per upstream for error messages."""

STDERR_MAX_LINE: Final = 16 * 1024
"""Longer stderr lines are cut (a flood must not cost memory)."""

_REAPER_SCRIPT: Final = r"""# mcpvisor process watchdog: kills the proxy's upstream groups when the proxy dies
trap '' INT
groups=' '
while IFS= read -r line; do
  case $line in
    +*) g=${line#+}
        case $g in ''|*[!0-9]*|0) ;; *) groups="$groups$g " ;; esac ;;
    -*) g=${line#-}
        case $g in
          ''|*[!0-9]*) ;;
          *) kept=' '
             for h in $groups; do [ "$h" = "$g" ] || kept="$kept$h "; done
             groups=$kept ;;
        esac ;;
  esac
done
# A member forking while the signal lands can escape one kill: repeat until each group
# is empty (bounded: 100 rounds of 20 ms, 2 s).
round=0
while [ -n "${groups# }" ] && [ "$round" -lt 100 ]; do
  alive=' '
  for g in $groups; do
    kill -s KILL -- "-$g" 2>/dev/null && alive="$alive$g "
  done
  groups=$alive
  round=$((round + 1))
  sleep 0.02
done
"""
"""The watchdog, in the POSIX shell: a Python one would hold ~9 MB for the proxy's whole
life to do this. ``+PGID`` registers a group, ``-PGID`` forgets it; at EOF (the proxy
is gone, however it died) every group still registered is killed."""

SHELL: Final = "/bin/sh"

_PYTHON_REAPER_SCRIPT: Final = r"""# mcpvisor process watchdog: kills the upstream groups when the proxy dies
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    try:
        if line[:1] == b"+" and int(line[1:]) > 0:
            groups.add(int(line[1:]))
        elif line[:1] == b"-":
            groups.discard(int(line[1:]))
    except ValueError:
        pass
deadline = time.monotonic() + 2.0
while groups and time.monotonic() < deadline:
    for g in list(groups):
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            groups.discard(g)
    time.sleep(0.02)
"""
"""The same watchdog for a system with no ``/bin/sh`` (a distroless image): the guarantee
matters more than its 9 MB."""


class Reaper:
    """Watchdog that kills registered process groups if the proxy dies.

    Use `open_reaper` to start one for the lifetime of a supervisor; `register` each
    stdio upstream's group right after spawning it and `unregister` once the group is
    gone. If the watchdog dies (killed by someone, OOM) a new one is started and told
    every group still registered, so the guarantee holds for the proxy's whole life. If
    none can be started the proxy still runs (logged), it only loses the SIGKILL guarantee.
    """

    def __init__(self) -> None:
        self._proc: trio.Process | None = None
        self._writer: FrameWriter | None = None
        self._groups: set[int] = set()
        self.restarts = 0
        """Watchdogs started again after the previous one died."""

    @property
    def active(self) -> bool:
        return self._writer is not None and self._writer.broken is None

    @property
    def pid(self) -> int | None:
        """The running watchdog's process id (None if none could be started)."""
        return self._proc.pid if self._proc is not None else None

    async def _start(self) -> None:
        argv = [SHELL, "-c", _REAPER_SCRIPT]
        if not os.access(SHELL, os.X_OK):
            argv = [sys.executable, "-S", "-c", _PYTHON_REAPER_SCRIPT]
        try:
            self._proc = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            logger.warning("could not start the process watchdog (%s); children may outlive a killed proxy",
                           exc)
            self._proc = self._writer = None
            return
        assert self._proc.stdin is not None
        self._writer = FrameWriter(self._proc.stdin)

    async def keep_alive(self) -> None:
        """Start a new watchdog whenever the running one dies, and tell it every group
        still registered; at most one start per `REAPER_RESTART_S`. Runs until cancelled."""
        while self._proc is not None:
            died = self._proc
            await died.wait()
            logger.warning("the process watchdog %s; starting a new one", describe_exit(died.returncode))
            if self._writer is not None:
                with trio.move_on_after(STREAM_CLOSE_S):
                    await self._writer.aclose()
            self._writer = None
            await self._start()
            if self._proc is None:
                return
            self.restarts += 1
            for pgid in sorted(self._groups):
                await self._send(b"+%d\n" % pgid)
            await trio.sleep(REAPER_RESTART_S)

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


@asynccontextmanager
async def open_reaper() -> AsyncIterator[Reaper]:
    """``async with open_reaper() as reaper:`` a watchdog for the block's lifetime, started
    again if it dies."""
    reaper = Reaper()
    await reaper._start()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reaper.keep_alive)
            try:
                yield reaper
            finally:
                nursery.cancel_scope.cancel(reason="the watchdog's owner is done")
    finally:
        await reaper._stop()


WITHHELD_ENV: Final = ("MCPVISOR_TOKEN", "MCPVISOR_STORE", "MCPVISOR_STORE_KEY")
"""Variables of the proxy's environment no upstream inherits: ``$MCPVISOR_TOKEN`` is the
bearer token of the proxy's own front, ``$MCPVISOR_STORE`` the shared store's URL (its
password) and ``$MCPVISOR_STORE_KEY`` the key its OAuth tokens are sealed with; a server
has no business holding any of them."""

_withheld_values: set[str] = set()


def withhold_values(values: Iterable[str]) -> None:
    """No upstream inherits a variable holding one of ``values`` (the front's tokens).

    A token may reach the proxy under any name: ``"authToken": "${MY_TOKEN}"`` or a token
    file. Whatever the name, an inherited variable whose value is a front token is dropped
    from every child's environment; a server's own ``env`` still gives it one on purpose.
    Process-wide and never forgets, like the environment it guards: a token replaced by a
    reload may still be in the variable it came from."""
    _withheld_values.update(v for v in values if v)


class SpawnError(Exception):
    """The command could not be started at all (not found, not executable, bad cwd)."""


PARENT_ENV: Final = "MCPVISOR_PARENT"
"""Set in every child's environment to the pid of the mcpvisor that started it. A
``mcpvisor serve`` that finds it, naming one of its own ancestors, refuses to run: it was
started as a server of a proxy (through any wrapper: ``sh -c``, ``npx``, ``uvx``) and
would read the same config and start itself again, without end."""

SELF_REFUSAL: Final = "refusing to serve: started as an upstream server by mcpvisor"
"""The words that child says on stderr before it exits, by which its parent knows why."""


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The proxy's own environment, less the front's tokens (`withhold_values`), plus the
    server's ``env`` (the server wins: a token it is given on purpose in its ``env`` reaches it), marked with
    `PARENT_ENV` (which the server's ``env`` cannot override)."""
    env = {k: v for k, v in os.environ.items() if v not in _withheld_values}
    for name in WITHHELD_ENV:
        env.pop(name, None)
    env.update(extra)
    env[PARENT_ENV] = str(os.getpid())
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

    The sequence (docs/design.md): close stdin, wait ``grace``, SIGTERM the group, wait
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
        self.ended = trio.Event()
        """Set once stderr is read to its end (the process and any child holding it exited)."""

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
        finally:
            self.ended.set()

    def tail(self, n: int = 5) -> str:
        """The last ``n`` lines, joined for an error message ("" if none)."""
        lines = list(self.lines)[-n:]
        return " | ".join(line.strip() for line in lines if line.strip())
