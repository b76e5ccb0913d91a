"""The process watchdog is replaced when it dies (issue 23, point 14: "a dead watchdog is
not restarted").

The watchdog is the tiny process that SIGKILLs every upstream group when the proxy dies
without running its cleanup (SIGKILL, OOM). Through a real ``mcpvisor serve``: kill the
watchdog, see a new one start, then SIGKILL the proxy: every upstream and grandchild
still dies. Before, the first kill left the proxy without the guarantee for the rest of
its life, and its children outlived it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

import psutil
import pytest
import trio

from tests.helpers import PY, REAL_IO_BOUND_S, flaky, write_config
from tests.polling import poll_until

pytestmark = pytest.mark.slow

PROMPT_S: Final = 10.0
"""Real time for a process to start or die on a loaded 2-core box."""
POLL_S: Final = 0.05


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def command(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def watchdogs(pid: int) -> list[psutil.Process]:
    return [p for p in descendants(pid) if "mcpvisor process watchdog" in command(p) and alive(p)]


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    with trio.move_on_after(PROMPT_S):
        await poll_until(predicate, every=POLL_S)
        return
    pytest.fail(f"no {what} within {PROMPT_S:g}s")


async def test_a_killed_watchdog_is_replaced_so_a_sigkilled_proxy_still_takes_its_children(
        tmp_path: Path) -> None:
    """Kill the watchdog: a new one starts. SIGKILL the proxy: both upstreams and the
    grandchild die within seconds (a regression leaves them running: the leak check
    and the assertion below both say so)."""
    config = write_config(tmp_path, {"a": flaky("--spawn-grandchild"), "b": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S * 2):
        proxy = await trio.lowlevel.open_process(
            [PY, "-m", "mcpvisor", "serve", "--config", str(config),
             "--state-dir", str(tmp_path / "state")],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def started() -> bool:
                family = descendants(proxy.pid)
                return (len([p for p in family if "flaky" in command(p)]) >= 2
                        and any("sleep(3600)" in command(p) for p in family)
                        and len(watchdogs(proxy.pid)) == 1)

            await wait_for(started, "the upstreams, the grandchild and the watchdog")
            first = watchdogs(proxy.pid)[0]
            first.kill()
            await wait_for(lambda: [w.pid for w in watchdogs(proxy.pid)] not in ([], [first.pid]),
                           "a new watchdog")
            family = [p for p in descendants(proxy.pid) if alive(p)]
            assert len(family) == 4, [command(p) for p in family]  # a, b, a's grandchild, the new watchdog
            proxy.kill()
            await proxy.wait()
            with trio.fail_after(PROMPT_S):
                await poll_until(lambda: not any(alive(p) for p in family), every=POLL_S)
        finally:
            if proxy.returncode is None:
                proxy.kill()
                await proxy.wait()
