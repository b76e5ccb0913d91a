"""Hot reload: a running proxy follows its config file (mcpvisor.reload: the
plan in reload_plan, the file watcher in reload_watch).

Three layers:

* `plan_reload`, sans-IO: which servers start, stop, restart or stay, and which settings
  need a restart of the proxy;
* a real supervisor in this process, with real stdio servers: a reload is one router
  step (exactly one `ListChanged`), unchanged servers keep their process, removed ones
  are stopped and reaped, a bad config changes nothing, the file watcher sees in-place
  writes and editor-style replace-by-rename;
* end to end: a real SDK client over stdio to ``python -m mcpvisor serve``, the config
  edited with the real CLI (``mcp add``/``mcp remove``) or by hand: tools appear after one
  ``list_changed``, a bad edit changes nothing, SIGHUP reloads (re-reading ``.env``).

Waits are for events (a notification, a log line, a state), each bounded.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
import trio.testing

from mcpvisor.actors.core.registration import UpstreamState
from mcpvisor.actors.messages import ListChanged
from mcpvisor.actors.upstream import State
from mcpvisor.config import Settings, parse_config
from mcpvisor.proxy import Supervisor
from mcpvisor.reload_plan import plan_reload
from mcpvisor.tree import open_supervisor
from tests.helpers import REAL_IO_BOUND_S, Recorder, flaky, proxy_client, write_config

pytestmark = pytest.mark.timeout(REAL_IO_BOUND_S * 2.5)  # real processes on a loaded 2-core machine

# --- plan_reload ----------------------------------------------------------------------------


def config(servers: dict[str, Any], **settings: Any) -> Any:
    return parse_config({"mcpServers": servers, "settings": settings})


def test_plan_sorts_servers_into_start_stop_restart_and_keep() -> None:
    old = config(
        {
            "keep": {"command": "a"},
            "change": {"command": "b"},
            "drop": {"command": "c"},
            "turn_off": {"command": "d"},
            "off": {"command": "e", "enabled": False},
        }
    )
    new = config(
        {
            "new": {"command": "n"},
            "keep": {"command": "a", "description": "only words changed"},
            "change": {"command": "b", "args": ["--v2"]},
            "turn_off": {"command": "d", "enabled": False},
            "off": {"command": "e"},
        }
    )
    running = {s.name: s for s in old.enabled_servers()}
    plan = plan_reload(running, old.settings, new)
    assert plan.order == ("new", "keep", "change", "off")
    assert plan.added == ("new", "off")
    assert plan.removed == ("drop", "turn_off")
    assert plan.changed == ("change",)
    assert plan.unchanged == ("keep",)
    assert plan.touches_servers
    assert not plan.namespacing_changed
    assert not plan.needs_restart


def test_plan_reports_settings_that_need_a_restart() -> None:
    old = config({"a": {"command": "a"}})
    new = config({"a": {"command": "a"}}, exposure="all", fastPath=False, namespacing="auto")
    plan = plan_reload({"a": old.servers["a"]}, old.settings, new)
    assert set(plan.needs_restart) == {"exposure", "fastPath"}
    assert plan.namespacing_changed
    assert not plan.touches_servers


def test_server_defaults_in_settings_restart_the_servers_they_change() -> None:
    old = config({"a": {"command": "a"}, "b": {"command": "b", "timeout": 5}})
    new = config({"a": {"command": "a"}, "b": {"command": "b", "timeout": 5}}, timeout="30s")
    plan = plan_reload({s.name: s for s in old.enabled_servers()}, Settings(), new)
    assert plan.changed == ("a",)
    assert plan.unchanged == ("b",)


# --- a real supervisor in this process -----------------------------------------------------------


class ListChanges:
    """Counts the supervisor's `ListChanged` events (what every client is sent)."""

    def __init__(self) -> None:
        self.count = 0
        self.event = trio.Event()

    async def run(
        self, sup: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        async for event in sup.events():
            if isinstance(event, ListChanged) and "tools" in event.kinds:
                self.count += 1
                self.event.set()
                self.event = trio.Event()


@asynccontextmanager
async def running(path: Path, tmp: Path, *, watch: bool) -> AsyncIterator[tuple[Supervisor, ListChanges]]:
    async with (
        open_supervisor(path, state_dir=tmp / "state", watch=watch) as sup,
        trio.open_nursery() as nursery,
    ):
        await sup.wait_ready(REAL_IO_BOUND_S)
        changes = ListChanges()
        await nursery.start(changes.run, sup)
        await trio.testing.wait_all_tasks_blocked()  # the subscription is in place
        yield sup, changes
        nursery.cancel_scope.cancel()


async def settle(sup: Supervisor) -> None:
    """Everything sent to the router so far has been applied, and every task is idle."""
    await sup.router.submit(UpstreamState("~barrier", "idle"))
    await trio.testing.wait_all_tasks_blocked()


def servers_of(sup: Supervisor) -> set[str]:
    return {t["name"].split("_", 1)[0] for t in sup.tools() if "_" in t["name"]}


def pid_of(sup: Supervisor, name: str) -> int:
    pid = sup.upstreams[name].status().pid
    assert pid is not None
    return pid


async def test_a_reload_is_one_router_step(tmp_path: Path) -> None:
    """Add b, remove c, change a, keep k: clients see one list_changed; k keeps its process,
    a gets a new one, c's process is stopped and reaped, b's tools appear."""
    path = write_config(tmp_path, {"a": flaky(), "c": flaky(), "k": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running(path, tmp_path, watch=False) as (sup, changes):
            assert servers_of(sup) == {"a", "c", "k"}
            before = {name: pid_of(sup, name) for name in ("a", "c", "k")}
            old_c = sup.upstreams["c"]
            write_config(tmp_path, {"a": flaky("--crash-every", "1000"), "b": flaky(), "k": flaky()})
            result = await sup.reload()
            assert result["ok"], result
            assert (result["added"], result["removed"], result["restarted"], result["unchanged"]) == (
                ["b"],
                ["c"],
                ["a"],
                ["k"],
            )
            while old_c.state is not State.STOPPED:
                await old_c.wait_changed()
            await settle(sup)
            assert changes.count == 1
            assert servers_of(sup) == {"a", "b", "k"}
            assert list(sup.upstreams) == ["a", "b", "k"]
            assert pid_of(sup, "k") == before["k"]
            assert pid_of(sup, "a") != before["a"]
            assert (
                not psutil.pid_exists(before["c"])
                or psutil.Process(before["c"]).status() == psutil.STATUS_ZOMBIE
            )
            done = await sup.call_tool("b_echo", {"text": "hi"})
            assert done["content"][0]["text"] == "echo: hi"


async def test_a_bad_config_changes_nothing(tmp_path: Path) -> None:
    """A file that cannot be used as a whole (here a misspelt setting) is refused entirely:
    the running setup stays, and the error names the field and the close match."""
    path = write_config(tmp_path, {"a": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running(path, tmp_path, watch=False) as (sup, changes):
            pid = pid_of(sup, "a")
            tools = sup.tools()
            doc = json.loads(path.read_text())
            doc["settings"]["startupWiat"] = "3s"
            doc["mcpServers"]["a"]["args"].append("--crash-every")  # would restart a, if it applied
            path.write_text(json.dumps(doc))
            result = await sup.reload()
            assert not result["ok"]
            assert any('unknown field "startupWiat"' in p and "startupWait" in p for p in result["errors"])
            await settle(sup)
            assert changes.count == 0
            assert sup.tools() == tools
            assert pid_of(sup, "a") == pid


async def test_the_watcher_follows_writes_and_editor_renames(tmp_path: Path) -> None:
    """An in-place write and a write-temp-then-rename save are both picked up; a bad save is
    ignored until the next good one."""
    path = write_config(tmp_path, {"a": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running(path, tmp_path, watch=True) as (sup, changes):
            changed = changes.event
            write_config(tmp_path, {"a": flaky(), "b": flaky()})
            await changed.wait()
            assert servers_of(sup) == {"a", "b"}
            path.write_text('{"mcpServers": {"a": ')  # a half-written file: ignored
            changed = changes.event
            temp = tmp_path / "mcpvisor.json.swp"
            temp.write_text(json.dumps({"mcpServers": {"b": flaky()}, "settings": {"exposure": "all"}}))
            os.replace(temp, path)
            await changed.wait()
            assert servers_of(sup) == {"b"}
            await settle(sup)
            assert changes.count == 2


# --- end to end: a client over stdio, the CLI editing the file ---------------------------------------


async def cli(*args: str, cwd: Path) -> str:
    done = await trio.run_process(
        [sys.executable, "-m", "mcpvisor", *args],
        cwd=cwd,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return str(done.stdout.decode())


async def wait_for_line(log: Path, text: str, *, start: int = 0) -> int:
    """Wait (polling the proxy's log file, bounded by the caller) for a line containing ``text``
    after byte offset ``start``; return the offset after it."""
    while True:
        data = await trio.to_thread.run_sync(lambda: log.read_bytes() if log.exists() else b"")
        found = data.find(text.encode(), start)
        if found >= 0:
            return data.index(b"\n", found) + 1 if b"\n" in data[found:] else len(data)
        await trio.sleep(0.05)


async def names(client: Any) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.slow
async def test_a_running_proxy_follows_cli_edits(tmp_path: Path) -> None:
    """`mcp add` -> the client gets one list_changed and sees the new tools; a hand edit
    that adds a bad entry -> that server is misconfigured and the client sees no change;
    `mcp remove` -> the tools go, again with one list_changed."""
    path = write_config(tmp_path, {"a": flaky()})
    log = tmp_path / "proxy.log"
    rec = Recorder()
    env = {"MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(path, "--log-file", str(log), recorder=rec, env=env) as client:
            assert "a_echo" in await names(client)
            assert "a_echo" in await names(client)  # a second round trip: start-up notices are in
            rec.list_changed = 0
            changed = rec.changed
            await cli(
                "mcp",
                "add",
                "b",
                "--config",
                str(path),
                "--",
                sys.executable,
                str(Path(__file__).parents[1] / "servers" / "flaky.py"),
                cwd=tmp_path,
            )
            await changed.wait()
            assert {"a_echo", "b_echo"} <= await names(client)
            offset = await wait_for_line(log, "config reloaded: 1 started")
            await names(client)
            assert rec.list_changed == 1

            good = path.read_text()
            doc = json.loads(good)
            doc["mcpServers"]["c"] = {"command": "x", "args": 3}
            path.write_text(json.dumps(doc))
            offset = await wait_for_line(log, 'c: starting -> misconfigured (field "args"', start=offset)
            assert {"a_echo", "b_echo"} <= await names(client)
            assert rec.list_changed == 1
            path.write_text(good)  # the CLI refuses to edit an invalid file: put it right first

            changed = rec.changed
            await cli("mcp", "remove", "a", "--yes", "--config", str(path), cwd=tmp_path)
            await changed.wait()
            tools = await names(client)
            assert "b_echo" in tools
            assert not any(t.startswith("a_") for t in tools)
            assert rec.list_changed == 2


def proxy_pid(config: Path) -> int:
    """The `mcpvisor serve` child of this test process serving ``config``."""
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "serve" in cmd and str(config) in cmd:
            return child.pid
    raise AssertionError("no proxy process found")


@pytest.mark.slow
async def test_sighup_reloads_and_rereads_dotenv(tmp_path: Path) -> None:
    """The watcher does not watch .env; SIGHUP re-reads the config and its .env: a server whose
    command line comes from .env restarts with the new value and its tools appear."""
    (tmp_path / ".env").write_text("FLAKY=/nonexistent/flaky.py\n")
    path = write_config(
        tmp_path, {"a": flaky(), "f": {"command": sys.executable, "args": ["${FLAKY}"], "protocol": "legacy"}}
    )
    rec = Recorder()
    env = {"MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(path, recorder=rec, env=env) as client:
            tools = await names(client)
            assert "a_echo" in tools
            assert "f_echo" not in tools
            (tmp_path / ".env").write_text(f"FLAKY={Path(__file__).parents[1] / 'servers' / 'flaky.py'}\n")
            changed = rec.changed
            os.kill(proxy_pid(path), signal.SIGHUP)
            while "f_echo" not in await names(client):
                await changed.wait()
                changed = rec.changed


async def test_a_restart_for_a_config_edit_is_logged_as_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The new process of a changed server, and the first of an added one, say why they
    start ("restart: its config entry changed", "added to the config"); the log said
    "first start" for both, which reads as if the proxy had restarted."""
    path = write_config(tmp_path, {"a": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running(path, tmp_path, watch=False) as (sup, _):
            doc = json.loads(path.read_text())
            doc["mcpServers"]["a"]["env"] = {"EDITED": "1"}
            doc["mcpServers"]["c"] = flaky()
            path.write_text(json.dumps(doc))
            with caplog.at_level(logging.INFO, logger="mcpvisor.actors.upstream.actor"):
                result = await sup.reload()
    assert result["ok"], result
    lines = [r.getMessage() for r in caplog.records if r.name == "mcpvisor.actors.upstream.actor"]
    assert "a: starting (restart: its config entry changed)" in lines
    assert "c: starting (added to the config)" in lines
    assert not [line for line in lines if "(first start)" in line]
