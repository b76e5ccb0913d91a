"""Child processes of stdio upstreams (actors/process.py), with real processes.

What must hold (issue point 6): every upstream runs in its own process group; stopping
it closes stdin, then SIGTERMs, then SIGKILLs the whole group, bounded by the grace
periods; grandchildren left in the group are swept; the watchdog kills every registered
group when the proxy's end of its pipe closes (the proxy died); every child is reaped.
A regression shows as a stop that takes the full grace for nothing, a grandchild that
outlives the test (the conftest's leak check), or a status that does not say why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio
import trio.testing

from mcpvisor.actors import process
from mcpvisor.actors.process import (
    SpawnError,
    StderrLog,
    _group_alive,
    _group_members,
    describe_exit,
    open_reaper,
    spawn,
    stop_process,
)
from tests.helpers import REAL_IO_BOUND_S, SERVERS_DIR
from tests.polling import poll_until

FLAKY = str(SERVERS_DIR / "flaky.py")


async def read_grandchild(proc: trio.Process) -> int:
    """The pid flaky.py --spawn-grandchild announces on stderr."""
    assert proc.stderr is not None
    data = b""
    while b"\n" not in data:
        chunk = await proc.stderr.receive_some(4096)
        assert chunk, "flaky.py exited before announcing its grandchild"
        data += chunk
    line = data.split(b"\n", 1)[0].decode()
    assert line.startswith("grandchild pid "), line
    return int(line.rsplit(" ", 1)[1])


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_well_behaved_server_stops_on_stdin_eof() -> None:
    """Closing stdin is enough for a server that exits on EOF: status 0, no signal."""
    with trio.fail_after(REAL_IO_BOUND_S):
        proc = await spawn([sys.executable, FLAKY], env={}, cwd=None, reaper=None)
        assert os.getpgid(proc.pid) == proc.pid  # its own process group
        assert await stop_process(proc, grace=30.0, reaper=None) == 0  # generous: a throttled CI CPU


async def test_a_server_ignoring_eof_and_sigterm_is_killed_after_two_graces() -> None:
    """--ignore-sigterm: close stdin, wait 0.3 s, SIGTERM, wait 0.3 s, SIGKILL."""
    with trio.fail_after(REAL_IO_BOUND_S):
        argv = [sys.executable, FLAKY, "--ignore-sigterm", "--spawn-grandchild"]
        proc = await spawn(argv, env={}, cwd=None, reaper=None)
        grandchild = await read_grandchild(proc)  # announced after the SIGTERM handler is installed
        started = trio.current_time()
        status = await stop_process(proc, grace=0.3, reaper=None)
        took = trio.current_time() - started
        assert status == -signal.SIGKILL
        assert describe_exit(status) == "killed by SIGKILL"
        assert 0.6 <= took < 0.6 + 5.0
        assert not alive(grandchild)


async def test_grandchildren_in_the_group_are_swept_without_waiting_the_grace() -> None:
    """--spawn-grandchild: the leader exits on EOF, its grandchild does not; the sweep
    SIGTERMs the group and returns as soon as only zombies remain (in a container whose
    PID 1 never reaps orphans, a zombie used to make every stop wait the full grace)."""
    with trio.fail_after(REAL_IO_BOUND_S):
        proc = await spawn([sys.executable, FLAKY, "--spawn-grandchild"], env={}, cwd=None, reaper=None)
        grandchild = await read_grandchild(proc)
        assert os.getpgid(grandchild) == proc.pid
        started = trio.current_time()
        await stop_process(proc, grace=10.0, reaper=None)
        assert trio.current_time() - started < 5.0
        assert not alive(grandchild)
        assert not _group_alive(proc.pid)


async def test_group_members_ignore_zombies() -> None:
    """`_group_members` lists live members only; a group of zombies is not alive."""
    with trio.fail_after(REAL_IO_BOUND_S):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],  # noqa: ASYNC220
                                 start_new_session=True)
        try:
            assert _group_members(child.pid) == [child.pid]
            assert _group_alive(child.pid)
            child.kill()
            await poll_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, every=0.01)
            assert _group_members(child.pid) == []
            assert not _group_alive(child.pid)
        finally:
            child.kill()
            child.wait()


async def test_the_watchdog_kills_registered_groups_when_the_proxy_end_closes() -> None:
    """The parent-death guarantee: when the watchdog's pipe from the proxy reads EOF (as
    when the proxy is SIGKILLed), every registered group is SIGKILLed, grandchildren too;
    unregistered groups are left alone."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_reaper() as reaper:
            assert reaper.active
            doomed = await spawn([sys.executable, FLAKY, "--spawn-grandchild"], env={}, cwd=None,
                                 reaper=reaper)
            grandchild = await read_grandchild(doomed)
            spared = await spawn([sys.executable, FLAKY], env={}, cwd=None, reaper=reaper)
            await reaper.unregister(spared.pid)
            assert reaper._writer is not None
            assert reaper._proc is not None
            await reaper._writer.aclose()  # what the kernel does when the proxy dies
            await reaper._proc.wait()
            await doomed.wait()
            assert doomed.returncode == -signal.SIGKILL
            await poll_until(lambda: not alive(grandchild), every=0.01)
            assert spared.returncode is None
            assert await stop_process(spared, grace=5.0, reaper=None) == 0
            await stop_process(doomed, grace=5.0, reaper=None)


async def test_spawn_errors_name_the_command_and_the_reason(tmp_path: object) -> None:
    with pytest.raises(SpawnError, match="command not found on PATH: no-such-mcp-server"):
        await spawn(["no-such-mcp-server"], env={}, cwd=None, reaper=None)
    with pytest.raises(SpawnError, match="working directory does not exist: /no/such/dir"):
        await spawn([sys.executable, FLAKY], env={}, cwd="/no/such/dir", reaper=None)
    with pytest.raises(SpawnError, match="empty command"):
        await spawn([], env={}, cwd=None, reaper=None)


def test_describe_exit() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(None) == "still running"


async def test_stderr_is_drained_and_its_tail_kept() -> None:
    """The last lines stay for error messages; a line without newline is cut, not kept whole."""
    send, receive = trio.testing.memory_stream_pair()
    log = StderrLog("s")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(log.drain, receive)
        await send.send_all(b"".join(b"line %d\n" % i for i in range(30)))
        await send.aclose()
    assert log.tail(2) == "line 28 | line 29"
    assert len(log.lines) == 20


async def test_with_no_shell_the_watchdog_is_a_python_one_and_still_kills(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A system without /bin/sh (a distroless image) keeps the guarantee: the watchdog
    starts as a Python process and kills a registered group when the proxy's end closes."""
    monkeypatch.setattr(process, "SHELL", str(tmp_path / "no-shell-here"))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_reaper() as reaper:
            assert reaper.active
            assert reaper._proc is not None
            watchdog = psutil.Process(reaper._proc.pid)
            # Spawning returns once exec has begun (the close-on-exec pipe closed); the kernel
            # sets the new program's arguments a moment later, and until then
            # /proc/PID/cmdline reads empty. Nothing to wait on but the file itself.
            argv = watchdog.cmdline()
            while not argv:
                await trio.sleep(0.01)
                argv = watchdog.cmdline()
            assert argv[0] == sys.executable
            doomed = await spawn([sys.executable, FLAKY], env={}, cwd=None, reaper=reaper)
            assert reaper._writer is not None
            await reaper._writer.aclose()  # what the kernel does when the proxy dies
            await reaper._proc.wait()
            await doomed.wait()
            assert doomed.returncode == -signal.SIGKILL
