"""A server whose leader process exits while a grandchild keeps its pipes (issue 23, point 10).

What ``npx``/``uvx``/``sh -c`` wrappers do: the process the proxy started dies, a child of
it still holds stdout, so stdout never reads EOF. Through a real ``mcpvisor serve`` over
stdio: the call in flight when the leader dies gets the "server died" error at once (not
at the 60 s call timeout, nor after ~104 s of missed pings), the grandchild is killed
with the group, and the server is restarted (a second process answers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import psutil
import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.helpers import REAL_IO_BOUND_S, flaky, proxy_client, read_record, text_of, write_config
from tests.polling import poll_until

pytestmark = pytest.mark.slow

PROMPT_S: Final = 10.0
"""An error "at once" in real time on a loaded 2-core box: far below the 60 s call timeout."""
POLL_S: Final = 0.05


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_leader_that_exits_while_a_grandchild_holds_stdout_fails_its_call_at_once_and_restarts(
        tmp_path: Path) -> None:
    """The ``crash`` tool exits flaky mid-call while its grandchild keeps the pipes open.
    The call fails within seconds naming the exit (a regression waits out the 60 s
    timeout), the grandchild is gone, and the next call is served by a new process."""
    record = tmp_path / "rec.jsonl"
    config = write_config(tmp_path, {"fl": flaky("--grandchild-keeps-pipes", "--record", str(record),
                                                 restartWait="60s")})
    with trio.fail_after(REAL_IO_BOUND_S * 2):
        async with proxy_client(config) as client:
            assert text_of(await client.call_tool("fl_echo", {"text": "before"})) == "echo: before"
            events = read_record(record)
            first_pid = next(e["pid"] for e in events if e["event"] == "initialize")
            grandchild = next(e["child"] for e in events if e["event"] == "grandchild")
            assert alive(grandchild)
            started = trio.current_time()
            with trio.fail_after(PROMPT_S), pytest.raises(MCPError) as died:
                await client.call_tool("fl_crash", {})
            took = trio.current_time() - started
            assert "exited with status 3" in died.value.error.message, died.value.error
            print(f"\nthe call in flight got {died.value.error.message!r} {took:.2f}s after the leader died")
            with trio.fail_after(PROMPT_S):
                await poll_until(lambda: not alive(grandchild), every=POLL_S)
            assert text_of(await client.call_tool("fl_echo", {"text": "after"})) == "echo: after"
            pids = {e["pid"] for e in read_record(record) if e["event"] == "initialize"}
            assert len(pids) == 2
            assert first_pid in pids
